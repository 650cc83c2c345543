"""The producer under faults the local server cannot produce: slowness, throttling, cuts.

A fault proxy (``tests/faults.py``) sits between the producer and the local server; records it
rejects are never forwarded, so any duplicate in the stream would be the producer's fault.
"""

from __future__ import annotations

import logging
import random
import threading
import tracemalloc
from typing import Any

import anyio
import pytest

from kinesis_actors import (
    ClientConfig,
    KinesisClient,
    LocalKinesis,
    Producer,
    ProducerConfig,
    errors,
)
from kinesis_actors.client import RetryPolicy, RetrySettings
from kinesis_actors.producer import StreamInfo
from tests.boto import read_back
from tests.faults import Cut, Delay, Fault, FaultProxy, RejectRecords, Reply, Request

pytestmark = pytest.mark.anyio

FAST = RetrySettings(max_retries=2, base=0.001, max=0.005)


def proxied(proxy: FaultProxy, local: LocalKinesis) -> KinesisClient:
    return KinesisClient(
        region=local.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local.credentials,
        config=ClientConfig(retry=RetryPolicy(overrides={"PutRecords": FAST})),
    )


class Share:
    """Reject a seeded share of every PutRecords call's records (thread-safe: the proxy's
    loop runs in its own thread)."""

    def __init__(self, share: float, *, seed: int = 1, delay: float = 0.0) -> None:
        self.share = share
        self.delay = delay
        self.recovered = threading.Event()
        self._random = random.Random(seed)
        self.calls = 0

    def __call__(self, request: Request) -> Fault:
        if request.target != "PutRecords" or self.recovered.is_set():
            return None
        self.calls += 1
        count = len(request.json()["Records"])  # type: ignore[arg-type]
        rejected = frozenset(i for i in range(count) if self._random.random() < self.share)
        return RejectRecords(rejected, delay=self.delay)


def count_by_key(local: LocalKinesis, stream: str) -> dict[str, list[int]]:
    """Every user record in the stream, deaggregated by our own decoder, per key in order."""
    from kinesis_actors.records import deaggregate

    seen: dict[str, list[int]] = {}
    for raw in read_back(local, stream).values():
        for record in raw:
            for user in deaggregate(record["Data"], record["PartitionKey"]):
                key, index = user.data.split(b"|")[:2]
                seen.setdefault(key.decode(), []).append(int(index))
    return seen


async def test_a_slow_throttling_stream_backpressures_put_with_bounded_memory(
    proxy: FaultProxy,
    local_kinesis: LocalKinesis,
    stream_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """FLINK-9374: the queue is bounded, put waits, memory stays flat, nothing is lost."""
    fault = Share(0.5, delay=0.05)
    proxy.decide = fault
    config = ProducerConfig(
        queue_limit_records=1_000,
        linger=0.02,
        backpressure_warning_after=0.05,
        backpressure_warning_interval=60,
    )
    # The local server is bound by bytes (about 1 MB/s), so the workload is many small
    # records: 4.8 MB through a queue of 1,000 records (200 KB).
    total, size, recover_at = 24_000, 200, 4_000
    caplog.set_level(logging.WARNING, "kinesis_actors.producer")
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 4)
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            async with Producer(kinesis, stream_name, config) as producer:
                for i in range(total):
                    if i == recover_at:
                        fault.recovered.set()  # the server recovers
                    if i == total // 2:
                        first_half = tracemalloc.get_traced_memory()[1] - baseline
                        tracemalloc.reset_peak()
                    key = f"k{i % 64}"
                    payload = f"{key}|{i // 64}|".encode().ljust(size, b".")
                    await producer.put(payload, key)  # handles dropped: only the queue holds
                    assert producer.metrics.outstanding_records <= 1_000
                await producer.flush()
                metrics = producer.metrics
            peak = tracemalloc.get_traced_memory()[1] - baseline
        finally:
            tracemalloc.stop()
    assert metrics.peak_outstanding_records <= 1_000
    assert metrics.backpressure_cycles > 0
    assert metrics.throttled > 0 and metrics.retries > 0
    assert metrics.records_sent == total and metrics.records_failed == 0
    # Flat: the second half of the workload needs no more memory than the first. At the peak
    # the queue's records also exist as aggregates and as the base64 and JSON of the calls in
    # flight; measured: about 2.4 MB here, for a 4.8 MB workload.
    assert peak < first_half * 1.25, f"peak grew: {first_half:,} then {peak:,} bytes"
    assert max(peak, first_half) < 4_000_000, f"peak traced memory {first_half:,} / {peak:,}"
    warnings = [r for r in caplog.records if "waited" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited to one per 10 s
    assert stream_name in warnings[0].getMessage()
    assert "records" in warnings[0].getMessage() and "outstanding" in warnings[0].getMessage()
    seen = await anyio.to_thread.run_sync(count_by_key, local_kinesis, stream_name)
    assert sum(map(len, seen.values())) == total
    for indices in seen.values():
        assert indices == list(range(len(indices)))


@pytest.mark.parametrize("aggregation", [True, False], ids=["aggregated", "plain"])
async def test_throttled_records_are_retried_until_all_arrive_once(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str, aggregation: bool
) -> None:
    """Partial failures are routine; retry, count, never drop or reorder."""
    fault = Share(0.3, seed=5)
    proxy.decide = fault
    config = ProducerConfig(
        # Small aggregates: many Kinesis records per call, so the share bites often.
        aggregation=aggregation,
        aggregation_max_bytes=1_024,
        linger=0.01,
        retry_base=0.005,
    )
    total = 3_000 if aggregation else 1_200  # plain records cost the local server more
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 2)
        async with Producer(kinesis, stream_name, config) as producer:
            for i in range(total):
                key = f"k{i % 50}"
                await producer.put(f"{key}|{i // 50}|".encode(), key)
            await producer.flush()
            metrics = producer.metrics
    assert metrics.records_sent == total and metrics.records_failed == 0
    assert metrics.throttled == proxy.stats.rejected_records > 0
    assert metrics.retries >= metrics.throttled
    seen = await anyio.to_thread.run_sync(count_by_key, local_kinesis, stream_name)
    assert sum(map(len, seen.values())) == total  # no duplicates, nothing lost
    for indices in seen.values():
        assert indices == list(range(len(indices)))  # retries kept key order


async def test_dropped_connections_lose_nothing(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    rng = random.Random(3)
    proxy.decide = lambda r: Cut() if r.target == "PutRecords" and rng.random() < 0.3 else None
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        async with Producer(kinesis, stream_name, ProducerConfig(linger=0.01)) as producer:
            handles = [await producer.put(f"k|{i}|".encode(), "k") for i in range(500)]
    assert all(handle.exception() is None for handle in handles)
    assert proxy.stats.faults.get("cut", 0) > 0
    seen = await anyio.to_thread.run_sync(count_by_key, local_kinesis, stream_name)
    assert seen == {"k": list(range(500))}  # cut before forwarding: no duplicates either


def deny_puts(request: Request) -> Fault:
    return Reply.error("AccessDeniedException") if request.target == "PutRecords" else None


async def test_a_final_failure_reaches_the_handle_and_fails_the_producer(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = deny_puts
        async with Producer(kinesis, stream_name, ProducerConfig(linger=0.01)) as producer:
            handle = await producer.put(b"x", "k")
            with pytest.raises(errors.AccessDeniedError):
                await handle
            with pytest.raises(errors.ProducerFailedError) as raised:
                await producer.put(b"y", "k")
            assert isinstance(raised.value.__cause__, errors.AccessDeniedError)
            with pytest.raises(errors.ProducerFailedError):
                await producer.flush()
        # Leaving raised nothing: the one failure was retrieved from its handle.
    assert producer.metrics.records_failed == 1


async def test_a_failure_retrieved_from_its_handle_does_not_fail_the_exit(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = deny_puts
        handled = []
        async with Producer(kinesis, stream_name, ProducerConfig(linger=0.01)) as producer:
            handles = await producer.put_many([(b"a", "k1"), (b"b", "k2"), (b"c", "k3")])
            for handle in handles[:2]:
                try:
                    await handle
                except errors.AccessDeniedError as error:
                    handled.append(error)
            assert isinstance(handles[2].exception(), errors.AccessDeniedError)
    assert len(handled) == 2
    assert producer.metrics.records_failed == 3


async def test_a_failure_nobody_retrieved_fails_the_exit_with_its_count(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = deny_puts
        with pytest.raises(errors.ProducerFailedError) as raised:
            async with Producer(kinesis, stream_name, ProducerConfig(linger=0.01)) as producer:
                handles = await producer.put_many([(b"a", "k1"), (b"b", "k2"), (b"c", "k3")])
                with pytest.raises(errors.AccessDeniedError):
                    await handles[0]
                with pytest.raises(errors.ProducerFailedError):
                    await producer.flush()  # all settled; flush's error retrieves no handle's
                assert "failed" in repr(handles[1])  # looking is not retrieving
    message = str(raised.value)
    assert "2 record(s)" in message and "fail_on_error=False" in message
    assert isinstance(raised.value.__cause__, errors.AccessDeniedError)


async def test_without_fail_on_error_a_failure_stays_with_its_record(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    first = True

    def decide(request: Request) -> Fault:
        nonlocal first
        if request.target == "PutRecords" and first:
            first = False
            return Reply.error("KMSAccessDeniedException")
        return None

    config = ProducerConfig(linger=0.01, fail_on_error=False)
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = decide
        async with Producer(kinesis, stream_name, config) as producer:
            lost = await producer.put(b"x", "k")
            with pytest.raises(errors.KMSError):
                await lost
            kept = await producer.put(b"y", "k")
            await producer.flush()
    assert kept.result().shard_id
    assert producer.metrics.records_failed == 1 and producer.metrics.records_sent == 1


async def test_record_ttl_gives_up_with_a_typed_error_never_silently(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """the KPL's TTL dropped records under load; here the handle says so."""
    proxy.decide = Share(1.0)  # every record throttled, forever
    config = ProducerConfig(linger=0.01, record_ttl=0.3, retry_base=0.01, retry_max=0.05)
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        async with Producer(kinesis, stream_name, config) as producer:
            handles = [await producer.put(b"x", f"k{i}") for i in range(20)]
            with anyio.fail_after(10):
                for handle in handles:
                    with pytest.raises(errors.RecordExpiredError) as expired:
                        await handle
                    assert isinstance(expired.value.__cause__, errors.ThrottlingError)
        # Every failure was retrieved from its handle: leaving raised nothing.
    assert producer.metrics.records_failed == 20
    assert producer.metrics.outstanding_records == 0


async def test_cancelling_the_block_fails_what_is_left_and_returns_at_once(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = lambda r: Delay(30) if r.target == "PutRecords" else None
        handles: list[Any] = []
        with anyio.move_on_after(0.5), anyio.fail_after(5):
            async with Producer(kinesis, stream_name, ProducerConfig(linger=0.01)) as producer:
                handles.extend([await producer.put(b"x", f"k{i}") for i in range(10)])
                await producer.flush()  # stalls until cancelled
    assert handles and all(isinstance(h.exception(), errors.ProducerClosedError) for h in handles)
    assert producer.metrics.outstanding_records == 0


async def test_a_given_stream_description_skips_the_describe_call(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    # Many short-lived producers (Spark tasks) share their driver's description instead of each
    # calling DescribeStreamSummary (20/s per account). Here the call would fail if made.
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 2)
        described = proxy.stats.by_target.get("DescribeStreamSummary", 0)
        proxy.decide = lambda r: (
            Reply.error("LimitExceededException") if r.target == "DescribeStreamSummary" else None
        )
        info = StreamInfo(
            max_record_bytes=100, record_distribution="USER_PARTITION_KEY", open_shards=2
        )
        with anyio.fail_after(30):
            async with Producer(kinesis, stream_name, stream_info=info) as producer:
                handle = await producer.put(b"x" * 90, "k")
                with pytest.raises(errors.RecordTooLargeError, match="100-byte limit"):
                    await producer.put(b"x" * 100, "k")  # the given limit, not the stream's
            assert (await handle).shard_id.startswith("shardId-")
    assert proxy.stats.by_target.get("DescribeStreamSummary", 0) == described
