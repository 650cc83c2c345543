"""One owner for PutRecords retries, deadlines that hold, and unknown outcomes with a bound.

Through the fault proxy in front of the local server. The client
here is configured to retry PutRecords twice (``FAST``): the producer must not let it, so
every attempt the proxy sees is one the producer made, counted and paced.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.producer import StreamInfo
from tests.faults import Fault, FaultProxy, Reply, Request, Rewrite
from tests.producer.test_producer_faults import count_by_key, proxied

pytestmark = pytest.mark.anyio

FAULTS: dict[str, tuple[Callable[[], Fault], type[errors.KinesisError]]] = {
    "throttled": (
        lambda: Reply.error("ProvisionedThroughputExceededException"),
        errors.ThrottlingError,
    ),
    "500": (lambda: Reply.error("InternalFailure", status=500), errors.ServiceError),
}


def put_records_only(fault: Fault) -> Any:
    return lambda request: fault if request.target == "PutRecords" else None


async def open_stream(proxy: FaultProxy, local: LocalKinesis, stream: str) -> KinesisClient:
    kinesis = proxied(proxy, local)
    await kinesis.__aenter__()
    await kinesis.create_stream(stream, 1)
    return kinesis


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_record_ttl_holds_under_permanent_throttling(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str, fault: str
) -> None:
    """record_ttl=1 with every PutRecords refused: the record fails in about 1 s (it took
    12.8-17 s while the client retried 10 times inside each producer attempt), the error
    counts the attempts the server saw, and the pacing saw every throttle (it saw 1 of 11)."""
    make_reply, cause = FAULTS[fault]
    config = ProducerConfig(record_ttl=1.0, fail_on_error=False)
    kinesis = await open_stream(proxy, local_kinesis, stream_name)
    try:
        proxy.decide = put_records_only(make_reply())
        async with Producer(kinesis, stream_name, config) as producer:
            started = time.monotonic()
            handle = await producer.put(b"x", "k")
            with pytest.raises(errors.RecordExpiredError) as expired:
                await handle
            elapsed = time.monotonic() - started
            metrics = producer.metrics
    finally:
        await kinesis.__aexit__(None, None, None)
    attempts = proxy.stats.by_target["PutRecords"]
    # The deadline plus one call (milliseconds here), with room for a busy test machine.
    assert 1.0 <= elapsed < 2.0, elapsed
    assert attempts >= 2  # retried by the producer, with its backoff
    assert f"after {attempts} attempt(s)" in str(expired.value)
    assert isinstance(expired.value.__cause__, cause)
    assert metrics.failed_calls == attempts
    if cause is errors.ThrottlingError:
        assert metrics.throttled == attempts  # every whole-call throttle reached the pacing
        limiter = producer._pipeline._limiter  # type: ignore[union-attr]
        (stats,) = limiter.all_statistics().values()
        assert stats.throttles == attempts and stats.factor < 1.0
    else:
        assert metrics.throttled == 0


async def test_the_deadline_ends_a_record_while_it_backs_off(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """A backoff of up to 30 s does not carry a record past its 0.5 s deadline."""
    config = ProducerConfig(
        record_ttl=0.5, retry_base=30.0, retry_max=30.0, linger=0.01, fail_on_error=False
    )
    kinesis = await open_stream(proxy, local_kinesis, stream_name)
    try:
        proxy.decide = put_records_only(Reply.error("ProvisionedThroughputExceededException"))
        async with Producer(kinesis, stream_name, config) as producer:
            started = time.monotonic()
            handles = [await producer.put(b"x", f"k{i}") for i in range(10)]
            for handle in handles:
                # Full jitter: a backoff drawn from [0, 30 s] is rarely below 0.5 s, never 0.
                with pytest.raises(errors.RecordExpiredError, match=r"after [12] attempt\(s\)"):
                    await handle
            elapsed = time.monotonic() - started
    finally:
        await kinesis.__aexit__(None, None, None)
    assert 0.5 <= elapsed < 1.5, elapsed  # not the 30 s backoff
    assert proxy.stats.by_target["PutRecords"] <= 4


async def test_transport_errors_of_the_whole_call_are_retried_by_the_producer(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """Five 500s and five dropped connections in a row (more than the client's two retries
    allow): the producer retries them itself and the record arrives once."""
    failures = [Reply.error("InternalFailure", status=500)] * 5

    def decide(request: Request) -> Fault:
        if request.target != "PutRecords" or not failures:
            return None
        return failures.pop()

    config = ProducerConfig(linger=0.01, retry_base=0.001, retry_max=0.01)
    kinesis = await open_stream(proxy, local_kinesis, stream_name)
    try:
        proxy.decide = decide
        async with Producer(kinesis, stream_name, config) as producer:
            handle = await producer.put(b"k|0|", "k")
            with anyio.fail_after(10):
                assert (await handle).shard_id
    finally:
        await kinesis.__aexit__(None, None, None)
    assert proxy.stats.by_target["PutRecords"] == 6
    assert producer.metrics.failed_calls == 5 and producer.metrics.records_sent == 1
    seen = await anyio.to_thread.run_sync(count_by_key, local_kinesis, stream_name)
    assert seen == {"k": [0]}


def drop_one_result(body: bytes) -> bytes:
    document = json.loads(body)
    document["Records"] = document["Records"][:-1]
    return json.dumps(document).encode()


def drop_records(body: bytes) -> bytes:
    document = json.loads(body)
    del document["Records"]
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    "transform", [drop_one_result, drop_records], ids=["one-result-fewer", "no-records"]
)
async def test_an_unknown_outcome_is_resent_with_a_bound(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str, transform: Any
) -> None:
    """Item 7: a PutRecords reply with one result fewer than sent (or no Records at all) was
    resent without end, 100 records written 1,270 times, or killed the producer with a bare
    KeyError. Now each record is sent at most ``max_unknown_outcomes`` times, then fails with
    MalformedReplyError; the producer stays up and takes more records."""
    config = ProducerConfig(
        linger=0.05, retry_base=0.001, retry_max=0.01, max_unknown_outcomes=3, fail_on_error=False
    )
    kinesis = await open_stream(proxy, local_kinesis, stream_name)
    try:
        proxy.decide = put_records_only(Rewrite(transform))
        async with Producer(kinesis, stream_name, config) as producer:
            handles = [await producer.put(f"k{i}|{i}|".encode(), f"k{i}") for i in range(100)]
            with anyio.fail_after(20):
                for handle in handles:
                    with pytest.raises(errors.MalformedReplyError, match="unknown") as failed:
                        await handle
                    assert isinstance(failed.value.__cause__, errors.MalformedReplyError)
            proxy.decide = lambda request: None
            after = await producer.put(b"after|0|", "after")
            with anyio.fail_after(10):
                await producer.flush()
    finally:
        await kinesis.__aexit__(None, None, None)
    assert after.result().shard_id  # the producer survived
    assert producer.metrics.records_failed == 100
    seen = await anyio.to_thread.run_sync(count_by_key, local_kinesis, stream_name)
    written = sum(len(indices) for key, indices in seen.items() if key != "after")
    # Every call was forwarded and written by the server: each record exactly 3 times.
    assert written == 300, written
    assert all(len(seen[f"k{i}"]) == 3 for i in range(100))
    assert seen["after"] == [0]


async def test_one_unknown_outcome_is_resent_and_the_record_arrives(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """Once is not a pattern: a single reply with a missing entry is resent (at-least-once)."""
    first = [Rewrite(drop_one_result)]

    def decide(request: Request) -> Fault:
        return first.pop() if request.target == "PutRecords" and first else None

    kinesis = await open_stream(proxy, local_kinesis, stream_name)
    try:
        proxy.decide = decide
        async with Producer(kinesis, stream_name, ProducerConfig(linger=0.01)) as producer:
            handle = await producer.put(b"k|0|", "k")
            with anyio.fail_after(10):
                assert (await handle).shard_id
            # Acknowledged, the record's entry is a spare that keeps neither the record nor
            # the first attempt's failure (whose traceback holds that call's frames and
            # request body); its count of unknown outcomes stays until it is refilled.
            (entry,) = producer._spares
            assert entry.last_error is None and entry.data == b""
            assert entry.unknown_outcomes == 1
    finally:
        await kinesis.__aexit__(None, None, None)
    seen = await anyio.to_thread.run_sync(count_by_key, local_kinesis, stream_name)
    assert seen == {"k": [0, 0]}  # written by the unbelievable call, and by the resend


async def test_a_certificate_that_fails_verification_fails_the_record_at_once(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """The local server's TLS certificate is self-signed: with verification on, PutRecords
    meets CertificateError, which no other attempt changes. The record fails at once (the
    given description skips the open's calls, so PutRecords is the first call)."""
    async with local_kinesis.client(tls=True) as plain:
        await plain.create_stream(stream_name, 1)
    info = StreamInfo(max_record_bytes=1_048_576, record_distribution="AUTO", open_shards=1)
    config = ProducerConfig(linger=0.01, fail_on_error=False)
    verifying = KinesisClient(
        region=local_kinesis.region,
        endpoint_url=local_kinesis.tls_endpoint_url,
        credentials=local_kinesis.credentials,
    )
    async with verifying, Producer(verifying, stream_name, config, stream_info=info) as producer:
        started = time.monotonic()
        handle = await producer.put(b"x", "k")
        with pytest.raises(errors.CertificateError):
            await handle
        elapsed = time.monotonic() - started
    assert elapsed < 2.0, elapsed
    assert producer.metrics.failed_calls == 1 and producer.metrics.retries == 0
