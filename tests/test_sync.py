"""The blocking producer for threads and Spark tasks, against the local server."""

from __future__ import annotations

import threading
import time

import pytest

from kinesis_actors import LocalKinesis, ProducerConfig, PutHandle, errors
from kinesis_actors.sync import SyncProducer
from tests.boto import create_stream, read_back
from tests.faults import FaultProxy, Reply


@pytest.fixture
def stream(local_kinesis: LocalKinesis, stream_name: str) -> str:
    create_stream(local_kinesis, stream_name, 2)
    return stream_name


def _producer(local: LocalKinesis, stream: str, **config: object) -> SyncProducer:
    return SyncProducer(
        stream,
        endpoint_url=local.endpoint_url,
        credentials=local.credentials,
        config=ProducerConfig(linger=0.01, **config),  # type: ignore[arg-type]
        batch_size=100,
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_every_record_is_settled_after_flush(
    local_kinesis: LocalKinesis, stream: str, backend: str
) -> None:
    with SyncProducer(
        stream,
        endpoint_url=local_kinesis.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ProducerConfig(linger=0.01),
        backend=backend,
    ) as producer:
        handles = [producer.put(f"r{i}".encode(), f"k{i % 9}") for i in range(1_000)]
        producer.flush()
        assert all(handle.done() for handle in handles)
        assert producer.metrics.records_sent == 1_000
    assert {h.result().shard_id for h in handles} <= set(read_back(local_kinesis, stream))
    total = sum(len(r) for r in read_back(local_kinesis, stream).values())
    assert 0 < total <= 1_000  # aggregated: fewer Kinesis records than user records


def test_bad_input_raises_in_the_callers_thread(local_kinesis: LocalKinesis, stream: str) -> None:
    with _producer(local_kinesis, stream) as producer:
        with pytest.raises(errors.ValidationError):
            producer.put(b"", "k")
        with pytest.raises(errors.ValidationError):
            producer.put(b"x", "k" * 300)
        handle = producer.put(b"fine", "k")
    assert handle.result().shard_id


def test_closing_sends_what_is_buffered_and_then_refuses(
    local_kinesis: LocalKinesis, stream: str
) -> None:
    producer = _producer(local_kinesis, stream)
    handle = producer.put(b"buffered", "k")  # below batch_size: still in this thread
    assert not handle.done()
    producer.close()
    assert handle.result().shard_id
    producer.close()  # idempotent
    with pytest.raises(errors.ProducerClosedError):
        producer.put(b"late", "k")


def test_threads_can_share_one_producer(local_kinesis: LocalKinesis, stream: str) -> None:
    with _producer(local_kinesis, stream) as producer:

        def work(n: int) -> None:
            for i in range(200):
                producer.put(f"{n}-{i}".encode(), f"t{n}")

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        producer.flush()
        assert producer.metrics.records_sent == 800


def test_an_unknown_stream_fails_at_construction(local_kinesis: LocalKinesis) -> None:
    with pytest.raises(errors.ResourceNotFoundError):
        _producer(local_kinesis, "no-such-stream")


def test_flush_and_put_after_close_raise_producer_closed(
    local_kinesis: LocalKinesis, stream: str
) -> None:
    """flush after close raised anyio's "This portal is not running"."""
    producer = _producer(local_kinesis, stream)
    producer.close()
    with pytest.raises(errors.ProducerClosedError):
        producer.flush()
    with pytest.raises(errors.ProducerClosedError):
        producer.put(b"late", "k")
    with pytest.raises(errors.ConfigError, match="timeout"):
        _producer(local_kinesis, stream).close(timeout=-1)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_close_with_a_timeout_returns_and_fails_a_put_blocked_on_a_full_queue(
    local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy, backend: str
) -> None:
    """Every way out is bounded: with the stream throttling every call and a put blocked on a
    full queue in another thread, close() never returned; close(timeout=1) returns in about
    1 s, and the blocked put and every unsettled handle fail with ProducerClosedError."""
    proxy.decide = lambda request: (
        Reply.error("ProvisionedThroughputExceededException")
        if request.target == "PutRecords"
        else None
    )
    producer = SyncProducer(
        stream,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ProducerConfig(queue_limit_records=4, linger=0.01),
        batch_size=1,
        backend=backend,
    )
    handles: list[PutHandle] = []
    blocked: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(5):  # the fifth finds the queue full, for good
                handles.append(producer.put(b"x", f"k{i}"))
        except BaseException as exc:
            blocked.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 10
    while producer.metrics.backpressure_cycles == 0:  # no event says "a put now waits"
        assert time.monotonic() < deadline, "the fifth put never blocked"
        time.sleep(0.01)
    flushed: list[BaseException] = []

    def flusher() -> None:
        try:
            producer.flush()
        except BaseException as exc:
            flushed.append(exc)

    flushing = threading.Thread(target=flusher)
    flushing.start()
    started = time.monotonic()
    producer.close(timeout=1.0)
    elapsed = time.monotonic() - started
    thread.join(5)
    flushing.join(5)
    assert not thread.is_alive() and not flushing.is_alive()
    assert len(flushed) == 1 and isinstance(flushed[0], errors.ProducerClosedError)
    assert 1.0 <= elapsed < 3.0, elapsed
    assert len(handles) == 4
    assert all(isinstance(h.exception(), errors.ProducerClosedError) for h in handles)
    assert len(blocked) == 1 and isinstance(blocked[0], errors.ProducerClosedError)
    assert producer.metrics.records_sent == 0 and producer.metrics.outstanding_records == 0
    with pytest.raises(errors.ProducerClosedError):
        producer.flush()


def test_close_with_a_timeout_fails_a_flush_waiting_in_another_thread(
    local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy
) -> None:
    """No put blocked this time: close takes the buffer, sends it, and at its timeout stops;
    a flush waiting in another thread raises ProducerClosedError instead of returning."""
    proxy.decide = lambda request: (
        Reply.error("InternalFailure", status=500) if request.target == "PutRecords" else None
    )
    producer = SyncProducer(
        stream,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ProducerConfig(linger=0.01),
        batch_size=2,
    )
    sent = [producer.put(b"x", f"k{i}") for i in range(2)]  # handed to the loop
    buffered = producer.put(b"y", "k")  # still in this thread's buffer
    flushed: list[BaseException] = []

    def flusher() -> None:
        try:
            producer.flush()
        except BaseException as exc:
            flushed.append(exc)

    flushing = threading.Thread(target=flusher)
    flushing.start()
    deadline = time.monotonic() + 10
    while proxy.stats.by_target.get("PutRecords", 0) < 2:  # the flush is under way
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    producer.close(timeout=0.5)
    elapsed = time.monotonic() - started
    flushing.join(5)
    assert 0.5 <= elapsed < 2.5, elapsed
    assert len(flushed) == 1 and isinstance(flushed[0], errors.ProducerClosedError)
    for handle in [*sent, buffered]:
        assert isinstance(handle.exception(), errors.ProducerClosedError)


def test_put_many_validates_the_whole_batch_first_then_delivers_it_in_order(
    local_kinesis: LocalKinesis, stream: str
) -> None:
    with _producer(local_kinesis, stream, queue_limit_records=64) as producer:
        with pytest.raises(errors.ValidationError, match="record 2 of the batch"):
            producer.put_many([(b"a", "k"), (b"b", "k"), (b"", "k")])
        producer.flush()  # hands over anything buffered: nothing of the bad batch was
        assert producer.metrics.records_put == 0
        handles = producer.put_many([(f"{i}".encode(), "k", None) for i in range(500)])
        producer.flush()
    results = [handle.result() for handle in handles]
    positions = [(r.sequence_number, r.sub_sequence_number) for r in results]
    assert positions == sorted(positions, key=lambda p: (int(p[0]), p[1]))  # one key: in order
