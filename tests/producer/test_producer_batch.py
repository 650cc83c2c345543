"""The batch and non-blocking ways in: ``put_many``, ``put_nowait``, and ``abort``.

Against the local server; the bounded queue (the dispatcher's mailbox) bounds them as it bounds
``put``.
"""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.producer import PutHandle, _intake
from tests.producer.test_producer_supervision import user_records

pytestmark = pytest.mark.anyio


async def test_put_many_queues_in_order_through_a_small_queue_and_settles_every_record(
    client: KinesisClient, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    await client.create_stream(stream_name, 2)
    config = ProducerConfig(queue_limit_records=50, queue_limit_bytes=4_000, linger=0.01)
    records = [(f"{i % 5}|{i}".encode(), f"k{i % 5}") for i in range(1_000)]
    with anyio.fail_after(60):
        async with Producer(client, stream_name, config) as producer:
            handles = await producer.put_many(records)
            results = [await handle for handle in handles]
            metrics = producer.metrics
            (tree,) = producer.supervision
            queue = tree.child("dispatcher").mailbox
    assert len(results) == 1_000
    assert metrics.records_put == metrics.records_sent == 1_000
    assert metrics.peak_outstanding_records <= 50 and metrics.peak_outstanding_bytes <= 4_000
    assert metrics.backpressure_cycles > 0
    assert (queue.capacity, queue.max_weight) == (50, 4_000)
    by_key: dict[bytes, list[int]] = {}
    for data in user_records(local_kinesis, stream_name):
        key, index = data.split(b"|")
        by_key.setdefault(key, []).append(int(index))
    assert all(indices == sorted(indices) for indices in by_key.values())
    assert sum(len(indices) for indices in by_key.values()) == 1_000


async def test_put_many_refuses_a_bad_record_by_its_index_and_queues_nothing(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    given = [PutHandle() for _ in range(4)]
    async with Producer(client, stream_name) as producer:
        with pytest.raises(errors.ValidationError, match="record 2 of the batch"):
            await producer.put_many([(b"a", "k"), (b"b", "k"), (b"", "k"), (b"d", "k")])
        with pytest.raises(errors.ValidationError, match="record 1 of the batch"):
            await producer.put_many([(b"a", "k"), (b"b",), (b"c", "k"), (b"d", "k")], handles=given)
        assert producer.metrics.records_put == 0
    assert all(isinstance(handle.exception(), errors.ValidationError) for handle in given)


async def test_put_nowait_queues_while_there_is_room_and_says_would_block_when_full(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    config = ProducerConfig(queue_limit_records=2, linger=30.0)  # nothing goes before flush
    async with Producer(client, stream_name, config) as producer:
        first = producer.put_nowait(b"a", "k")
        producer.put_nowait(b"b", "k")
        with pytest.raises(anyio.WouldBlock):
            producer.put_nowait(b"c", "k")
        assert producer.metrics.outstanding_records == 2
        await producer.flush()
        assert (await first).shard_id
        producer.put_nowait(b"c", "k")  # room again, given back by the acknowledgements
    assert producer.metrics.records_sent == 3


async def test_abort_fails_every_unsettled_record_at_once(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    config = ProducerConfig(linger=30.0)
    async with Producer(client, stream_name, config) as producer:
        handles = [await producer.put(b"x", f"k{i}") for i in range(10)]
        producer.abort()
        with pytest.raises(errors.ProducerClosedError):
            await producer.put(b"late", "k")
        given = [PutHandle(), PutHandle()]
        with pytest.raises(errors.ProducerClosedError):  # SyncProducer's late batch
            await producer.put_many([(b"a", "k"), (b"b", "k")], handles=given)
    assert all(isinstance(h.exception(), errors.ProducerClosedError) for h in handles + given)
    assert producer.metrics.records_failed == 10


@pytest.mark.parametrize("given", [1, 3])
async def test_put_many_with_the_wrong_number_of_handles_is_a_typed_error(
    client: KinesisClient, stream_name: str, given: int
) -> None:
    """Fewer handles than records was an IndexError from inside the producer; both ways are
    a ValidationError naming the counts, every given handle gets it, and nothing is queued."""
    await client.create_stream(stream_name, 1)
    handles = [PutHandle() for _ in range(given)]
    async with Producer(client, stream_name) as producer:
        with pytest.raises(errors.ValidationError, match=f"got {given} handles for 2 records"):
            await producer.put_many([(b"a", "k"), (b"b", "k")], handles=handles)
        assert producer.metrics.records_put == 0
    for handle in handles:
        assert handle.done()
        with pytest.raises(errors.ValidationError):
            await handle


async def test_puts_that_never_wait_still_let_other_tasks_run(
    client: KinesisClient, stream_name: str
) -> None:
    """Neither put nor put_many holds the loop for more than a bounded run of records when
    the queue always has room: each yields every _CHECKPOINT_EVERY puts (put_many: every
    _CHECKPOINT_EVERY_MANY records), so a task beside them sees at most two such runs
    between its own turns (trio may run the putter first in one batch and last in the
    previous one)."""
    await client.create_stream(stream_name, 1)
    config = ProducerConfig(queue_limit_records=20_000, linger=0.05)
    gaps: list[int] = []
    stop = anyio.Event()
    async with Producer(client, stream_name, config) as producer, anyio.create_task_group() as tg:

        async def beside() -> None:
            last = producer.metrics.records_put  # counts each record as it is queued
            while not stop.is_set():
                await anyio.lowlevel.checkpoint()
                now = producer.metrics.records_put
                gaps.append(now - last)
                last = now

        tg.start_soon(beside)
        await anyio.lowlevel.checkpoint()
        for index in range(2_000):
            await producer.put(b"x", f"k{index % 7}")
        put_gap, gaps[:] = max(gaps), []
        for _ in range(4):
            await producer.put_many([(b"y", "k")] * 1_200)
        stop.set()
    assert 0 < put_gap <= 2 * _intake._CHECKPOINT_EVERY
    assert 0 < max(gaps) <= 2 * _intake._CHECKPOINT_EVERY_MANY
