"""Put handles as views of columnar outcomes, and the entries the producer recycles.

The first tests need no loop or server. The fault test checks, against the local server behind
the fault proxy, the promise recycling could break: every handle names its own record (the
data read back at its shard, sequence and sub-sequence number is the data put), through
refilled entries, blocks of single puts, batches, cancelled puts and retries of every kind.
"""

from __future__ import annotations

import random
import sys
import threading
from collections import Counter

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.producer import PutHandle, PutHandles, PutResult
from kinesis_actors.producer._calls import Part
from kinesis_actors.producer._entry import Entry
from kinesis_actors.producer._handle import NO_OUTCOMES, PUT_BLOCK, Outcomes
from kinesis_actors.producer._ledger import Ledger
from kinesis_actors.producer._validation import batch_entries
from kinesis_actors.records import deaggregate
from kinesis_actors.runtime import Mailbox
from tests.boto import read_back
from tests.faults import Cut, Fault, FaultProxy, RejectRecords, Reply, Request, Rewrite
from tests.producer.test_producer_faults import proxied

# -- without a loop ------------------------------------------------------------------------------


def test_a_handle_of_its_own_settles_once() -> None:
    handle = PutHandle()
    assert not handle.done() and handle.exception() is None
    with pytest.raises(RuntimeError, match="not acknowledged yet"):
        handle.result()
    handle._set_result(PutResult("shardId-0", "49", 2))
    assert handle.done() and handle.result() == PutResult("shardId-0", "49", 2)
    with pytest.raises(RuntimeError, match="settles once"):
        handle._set_error(errors.ProducerClosedError("late"))
    assert handle.exception() is None


def test_views_of_one_slot_are_one_handle_and_slots_settle_apart() -> None:
    outcomes = Outcomes(3)
    handles = PutHandles._over(outcomes)
    assert len(handles) == 3
    assert handles[0] == handles[0] and hash(handles[0]) == hash(handles[0])
    assert handles[-1] == handles[2] and handles[0] != handles[1]
    assert list(handles) == [handles[0], handles[1], handles[2]] == handles[0:3]
    with pytest.raises(IndexError):
        handles[3]
    outcomes.acknowledge(1, "shardId-1", "50", 7)
    failure = errors.RecordExpiredError("too old")
    outcomes.fail(2, failure)
    assert not handles[0].done() and repr(handles[0]) == "<PutHandle pending>"
    assert handles[1].result() == PutResult("shardId-1", "50", 7)
    assert handles[2].exception() is failure
    with pytest.raises(errors.RecordExpiredError):
        handles[2].result()
    with pytest.raises(RuntimeError, match="settles once"):
        outcomes.acknowledge(2, "shardId-1", "51", 0)
    assert repr(handles) == "<PutHandles 3 records, 2 settled>"


@pytest.mark.anyio
async def test_a_handle_awaited_before_it_settles_wakes_with_its_own_result() -> None:
    outcomes = Outcomes(2)
    first, second = PutHandles._over(outcomes)
    results: list[PutResult] = []

    async def wait(handle: PutHandle) -> None:
        results.append(await handle)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, second)
            tg.start_soon(wait, second)
            await anyio.wait_all_tasks_blocked()
            outcomes.acknowledge(0, "shardId-0", "1", 0)  # not the awaited slot
            await anyio.wait_all_tasks_blocked()
            assert results == []
            outcomes.acknowledge(1, "shardId-0", "1", 1)
    assert results == [PutResult("shardId-0", "1", 1)] * 2
    assert outcomes.events == {}  # the slot's event went with the wake-up
    assert await first == PutResult("shardId-0", "1", 0)


# -- against the local server ---------------------------------------------------------------


def positions(local: LocalKinesis, stream: str) -> dict[tuple[str, str, int], bytes]:
    """Every user record in the stream by ``(shard, sequence number, sub-sequence number)``."""
    seen = {}
    for shard_id, raw in read_back(local, stream).items():
        for record in raw:
            users = deaggregate(record["Data"], record["PartitionKey"])
            for sub, user in enumerate(users):
                seen[(shard_id, record["SequenceNumber"], sub)] = user.data
    return seen


class MixedFaults:
    """Per PutRecords call, seeded: a share of its records rejected, an answer garbled after
    the records were written (an unknown outcome: sent again), a cut connection, a 500, or
    nothing (the proxy runs in its own thread, hence the lock)."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.fired: Counter[str] = Counter()

    def __call__(self, request: Request) -> Fault:
        if request.target != "PutRecords":
            return None
        with self._lock:
            roll = self._random.random()
            count = len(request.json()["Records"])  # type: ignore[arg-type]
            rejected = frozenset(i for i in range(count) if self._random.random() < 0.3)
        fault: Fault = None
        if roll < 0.35:
            fault = RejectRecords(rejected)
        elif roll < 0.45:
            fault = Rewrite(lambda body: b"")
        elif roll < 0.52:
            fault = Cut()
        elif roll < 0.57:
            fault = Reply.error("InternalFailure", status=500)
        with self._lock:
            self.fired[type(fault).__name__] += 1
        return fault


@pytest.mark.anyio
@pytest.mark.parametrize("aggregation", [True, False], ids=["aggregated", "single"])
async def test_every_handle_names_its_own_record_through_recycled_entries_and_faults(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str, aggregation: bool
) -> None:
    """Rejected records, unknown outcomes, cut connections and 500s (retried records);
    entries refilled many times over (the queue holds 24); blocks of single puts from two
    tasks, some cancelled while they wait for room; and batches. Every acknowledged handle's
    position holds its own record, no position twice, every handle settles, and the spares
    stay within the queue's bound."""
    faults = MixedFaults(7)
    proxy.decide = faults
    config = ProducerConfig(
        queue_limit_records=24,
        linger=0.002,
        aggregation=aggregation,
        retry_base=0.002,
        retry_max=0.02,
        fail_on_error=False,
        max_in_flight_calls=3,
    )
    put: list[tuple[bytes, PutHandle]] = []
    kinesis = proxied(proxy, local_kinesis)
    async with kinesis:
        await kinesis.create_stream(stream_name, 2)

        async def put_singles(task: int, count: int) -> None:
            patience = random.Random(task)
            for i in range(count):  # more than a block of puts each
                data = f"single|{task}|{i}".encode()
                with anyio.move_on_after(patience.choice([0.0005, 0.002, 5.0])):
                    put.append((data, await producer.put(data, f"k{i % 5}")))

        async def put_batches(count: int) -> None:
            for batch in range(count):
                records = [(f"many|{batch}|{i}".encode(), f"k{i % 3}") for i in range(70)]
                handles = await producer.put_many(records)
                put.extend(zip((data for data, _ in records), handles, strict=True))

        with anyio.fail_after(120):
            async with Producer(kinesis, stream_name, config) as producer:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(put_singles, 1, PUT_BLOCK + 44)
                    tg.start_soon(put_singles, 2, PUT_BLOCK + 44)
                    tg.start_soon(put_batches, 6)
                await producer.flush()
                spares = producer._spares
                assert len(spares) <= 24 and len(set(map(id, spares))) == len(spares)
                retries = producer.metrics.retries
    written = await anyio.to_thread.run_sync(positions, local_kinesis, stream_name)
    assert retries > 0
    # Each kind of fault the docstring names was met at least once.
    assert {"RejectRecords", "Rewrite", "Cut", "Reply"} <= set(faults.fired), faults.fired
    acknowledged: set[tuple[str, str, int]] = set()
    for data, handle in put:
        assert handle.done()
        if handle.exception() is None:
            result = handle.result()
            position = (result.shard_id, result.sequence_number, result.sub_sequence_number)
            assert written[position] == data
            assert position not in acknowledged
            acknowledged.add(position)
    assert len(acknowledged) > len(put) // 2


def test_a_spare_keeps_no_block_of_results_alive() -> None:
    """Settled entries go back to the spares without their block: a caller dropping a
    batch's handles frees its results (and any failure's traceback, which holds the frames
    of the call that carried the records). Found in review: every spare kept its last
    batch's block, failures included, until it was refilled."""
    ledger = Ledger("s", ProducerConfig(queue_limit_records=2_000))
    queue: Mailbox[Entry] = Mailbox(2_000, hold=True)
    ledger.open(queue)
    entries, outcomes = batch_entries([(b"x", "k")] * 1_000, None, 1 << 20, "s", 0, spares=[])
    assert outcomes is not None
    for entry in entries:
        queue.send_nowait(entry, entry.size)
    queue.receive_held()
    ledger.outstanding[0] = 1_000
    aggregate = Part(b"aggregate", "k", None, "shardId-0", entries[:999], 0, [])
    ledger.acknowledge([aggregate], ["shardId-0"], ["1"])
    ledger.settle(entries[999], PutResult("shardId-0", "2", 0), None)
    assert PutHandles._over(outcomes)[998].result().sub_sequence_number == 998
    assert len(ledger.spares) == 1_000
    assert all(spare.outcomes is NO_OUTCOMES and spare.data == b"" for spare in ledger.spares)
    assert sys.getrefcount(outcomes) == 2  # this test's name and the call's argument
    with pytest.raises(IndexError):  # a spare settled again fails loudly
        ledger.settle(ledger.spares[0], PutResult("shardId-0", "3", 0), None)


def test_an_aggregate_of_records_from_many_blocks_settles_each_in_its_own_block() -> None:
    """An aggregate of a key alone on its shard holds one record of each of many put_many
    batches: each record's handle gets the aggregate's shard and sequence number and its own
    index, a failed slot of the same blocks keeps its failure, and settling twice fails.
    (Outcomes keep two columns, written record by record in the aggregate's order.)"""
    ledger = Ledger("s", ProducerConfig(queue_limit_records=2_000))
    queue: Mailbox[Entry] = Mailbox(2_000, hold=True)
    ledger.open(queue)
    blocks = []
    taken: list[Entry] = []
    for _ in range(6):
        entries, outcomes = batch_entries(
            [(b"x", "k"), (b"y", "j")], None, 1 << 20, "s", 0, spares=[]
        )
        assert outcomes is not None
        blocks.append(outcomes)
        for entry in entries:
            queue.send_nowait(entry, entry.size)
        taken += entries
    queue.receive_held()
    ledger.outstanding[0] = len(taken)
    keyed = taken[::2][::-1]  # key k's records, the newest batch's first, as a retry leaves them
    aggregate = Part(b"aggregate", "k", None, "shardId-7", keyed, 0, [])
    failure = errors.RecordExpiredError("too old")
    taken[1].outcomes.fail(taken[1].slot, failure)  # key j's record of the first batch
    ledger.acknowledge([aggregate], ["shardId-7"], ["495"])
    for index, outcomes in enumerate(reversed(blocks)):
        handles = PutHandles._over(outcomes)
        assert handles[0].result() == PutResult("shardId-7", "495", index)
    assert PutHandles._over(blocks[0])[1].exception() is failure
    assert not PutHandles._over(blocks[1])[1].done()
    with pytest.raises(RuntimeError, match="settles once"):
        blocks[0].fail(1, failure)
    with pytest.raises(RuntimeError, match="settles once"):
        blocks[0].acknowledge(0, "shardId-7", "496", 0)


@pytest.mark.anyio
async def test_put_nowait_refused_for_room_gives_its_entry_back(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    config = ProducerConfig(queue_limit_records=2, linger=5.0)
    async with Producer(client, stream_name, config) as producer:
        first, second = producer.put_nowait(b"a", "k"), producer.put_nowait(b"b", "k")
        with pytest.raises(anyio.WouldBlock):
            producer.put_nowait(b"c", "k")
        (spare,) = producer._spares
        assert spare.data == b"" and spare.outcomes is NO_OUTCOMES
        await producer.flush()
    one, two = await first, await second
    assert (one.sequence_number, one.sub_sequence_number) < (
        two.sequence_number,
        two.sub_sequence_number,
    )
