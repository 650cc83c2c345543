"""Put handles as views of columnar outcomes, and the entries the producer recycles.

The first tests need no loop or server. The last ones check, against the local server behind
the fault proxy, the promise recycling could break: every handle names its own record (the
data read back at its shard, sequence and sub-sequence number is the data put), through
refilled entries, blocks of single puts, batches and retries.
"""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors import LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.producer import PutHandle, PutResult
from kinesis_actors.producer._handle import PUT_BLOCK, Outcomes, PutHandles
from kinesis_actors.records import deaggregate
from tests.boto import read_back
from tests.faults import FaultProxy
from tests.producer.test_producer_faults import Share, proxied

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


@pytest.mark.anyio
@pytest.mark.parametrize("aggregation", [True, False], ids=["aggregated", "single"])
async def test_every_handle_names_its_own_record_through_recycled_entries_and_retries(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str, aggregation: bool
) -> None:
    """A quarter of every call's records rejected: retried records, refilled entries (the
    queue holds 64, so 1,400 records go through at most 64 spares), blocks of single puts
    from two tasks at once, and batches; each handle's position holds its record."""
    proxy.decide = Share(0.25)
    config = ProducerConfig(
        queue_limit_records=64, linger=0.005, aggregation=aggregation, retry_base=0.005
    )
    put: list[tuple[bytes, PutHandle]] = []
    kinesis = proxied(proxy, local_kinesis)
    async with kinesis:
        await kinesis.create_stream(stream_name, 2)

        async def put_singles(task: int, count: int) -> None:
            for i in range(count):
                data = f"single|{task}|{i}".encode()
                put.append((data, await producer.put(data, f"k{i % 7}")))

        with anyio.fail_after(60):
            async with Producer(kinesis, stream_name, config) as producer:
                async with anyio.create_task_group() as tg:  # more than two blocks of puts
                    tg.start_soon(put_singles, 0, PUT_BLOCK + 100)
                    tg.start_soon(put_singles, 1, PUT_BLOCK)
                for batch in range(2):
                    records = [(f"many|{batch}|{i}".encode(), f"k{i % 5}") for i in range(444)]
                    handles = await producer.put_many(records)
                    put.extend(zip((data for data, _ in records), handles, strict=True))
                await producer.flush()
                spares = len(producer._spares)
                retries = producer.metrics.retries
    written = await anyio.to_thread.run_sync(positions, local_kinesis, stream_name)
    assert retries > 0 and spares == 64
    assert len(put) == 2 * PUT_BLOCK + 100 + 888
    for data, handle in put:
        result = handle.result()
        assert written[(result.shard_id, result.sequence_number, result.sub_sequence_number)] == (
            data
        )
    assert len({handle.result() for _, handle in put}) == len(put)  # no position twice
