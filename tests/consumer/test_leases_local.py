"""A consumer with a lease table, in this process: real local Kinesis and DynamoDB.

What one worker does with its leases: it reads exactly the shards it holds, its commits become
the leases' checkpoints (mid-aggregate included), a clean close hands every lease over, a lease
taken from under it stops that shard at once without breaking the user's loop, and a bad
table or worker id fails the ``async with`` as a typed error. The multi-process acceptance
runs (failover, rebalancing, resharding across workers) are in ``test_group_local.py``.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, Literal

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalDynamoDB, LocalKinesis, errors
from kinesis_actors.client import DynamoDBClient
from kinesis_actors.consumer import Consumer, ConsumerConfig, RecordBatch, StartingPosition
from kinesis_actors.consumer._membership import LeaseMembership
from kinesis_actors.consumer._positions import SavedShard
from kinesis_actors.leases import (
    LeaseConfig,
    LeaseCoordinator,
    LeaseTableError,
    WorkerIdConflictError,
)
from kinesis_actors.records import Position
from tests.faults import Cut, FaultProxy, Request

from .helpers import Row, aggregate_per_shard, put_aggregated, put_plain, rows, shard_map

pytestmark = [pytest.mark.anyio, pytest.mark.local_kinesis]

FAST = LeaseConfig(failover_time=2.0, renew_interval=0.4, take_interval=0.2)


@pytest.fixture
def table() -> str:
    return f"app-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["polling", "efo"])
async def reading(
    request: pytest.FixtureRequest, local_kinesis: LocalKinesis
) -> AsyncIterator[tuple[Literal["polling", "efo"], KinesisClient]]:
    mode: Literal["polling", "efo"] = "efo" if request.param == "efo" else "polling"
    async with local_kinesis.client(tls=mode == "efo") as kinesis:
        yield mode, kinesis


def leased(
    local_dynamodb: LocalDynamoDB, table: str, worker: str, **options: Any
) -> ConsumerConfig:
    return ConsumerConfig(
        start=StartingPosition.trim_horizon(),
        lease_table=table,
        worker_id=worker,
        dynamodb_endpoint_url=local_dynamodb.endpoint_url,
        leases=FAST,
        idle_backoff_initial=0.05,
        idle_backoff_max=0.1,
        **options,
    )


async def items(dynamodb: DynamoDBClient, table: str) -> dict[str, dict[str, Any]]:
    """The lease items by lease key, attribute values unwrapped."""
    found: dict[str, dict[str, Any]] = {}
    params: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = await dynamodb.call("Scan", params)
        for item in page["Items"]:
            plain = {name: next(iter(value.values())) for name, value in item.items()}
            found[plain["leaseKey"]] = plain
        if "LastEvaluatedKey" not in page:
            return found
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


async def read_until(consumer: Consumer, count: int, *, commit: bool = True) -> list[Row]:
    seen: list[Row] = []
    async for batch in consumer:
        seen.extend(rows(batch))
        if commit:
            consumer.commit(batch)
        if len(seen) >= count:
            break
    return seen


async def test_one_worker_reads_every_shard_and_its_commits_become_the_leases_checkpoints(
    reading: tuple[Literal["polling", "efo"], KinesisClient],
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    stream_name: str,
    table: str,
) -> None:
    mode, client = reading
    await client.create_stream(stream_name, 3)
    await put_plain(client, stream_name, [(f"r{i}".encode(), f"k{i}") for i in range(300)])
    config = leased(local_dynamodb, table, "solo", mode=mode)
    async with Consumer(client, stream_name, config) as consumer:
        with anyio.fail_after(30):
            seen = await read_until(consumer, 300)
        stats = consumer.leases
        assert consumer.worker_id == "solo"
        assert stats is not None and stats.held == 3 and stats.taken == 3
        assert consumer.statistics().leases.held == 3
    assert sorted(row.data for row in seen) == sorted(f"r{i}".encode() for i in range(300))
    last = {row.shard_id: row.sequence_number for row in seen}
    leases = await items(dynamodb, table)
    assert set(leases) == set(last)
    for shard_id, lease in leases.items():
        assert lease["checkpoint"] == last[shard_id]  # the final checkpoint, written on close
        assert "leaseOwner" not in lease or lease["leaseOwner"] in ("", "NULL", None)


async def test_a_new_owner_resumes_after_the_last_checkpoint_in_the_middle_of_an_aggregate(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    stream_name: str,
    table: str,
) -> None:
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        shards = await shard_map(client, stream_name)
        records = [(f"u{i}".encode(), f"key-{i}") for i in range(40)]
        await put_aggregated(client, stream_name, aggregate_per_shard(records, shards, 10))
        first: list[Row] = []
        async with Consumer(client, stream_name, leased(local_dynamodb, table, "a")) as consumer:
            with anyio.fail_after(30):
                async for batch in consumer:
                    part = batch.slice(0, 15)  # 1.5 aggregates: stop inside the second one
                    first.extend(rows(part))
                    consumer.commit(part)
                    break
        second: list[Row] = []
        async with Consumer(client, stream_name, leased(local_dynamodb, table, "b")) as consumer:
            with anyio.fail_after(30):
                second = await read_until(consumer, 25)
    assert [row.data for row in first + second] == [data for data, _ in records]
    assert second[0].sub_sequence_number == 5  # the rest of the aggregate, nothing repeated


#: Longer than FAST's failover time: a pause after which another worker may read the shard.
PAUSE = FAST.failover_time + 0.5


async def pause_with_a_batch_buffered(
    client: KinesisClient, stream_name: str, consumer: Consumer
) -> None:
    """Put s0..s9, wait until the consumer has them buffered, then stop the whole process
    (its event loop with it) past the failover time."""
    await put_plain(client, stream_name, [(f"s{i}".encode(), "k") for i in range(10)])
    with anyio.fail_after(30):
        while consumer.statistics().buffered_batches == 0:
            await anyio.sleep(0.05)
    time.sleep(PAUSE)  # noqa: ASYNC251 - the fault: the whole process stops, its loop too


async def test_a_worker_paused_past_its_failover_time_delivers_nothing_of_the_lapsed_lease(
    reading: tuple[Literal["polling", "efo"], KinesisClient],
    local_dynamodb: LocalDynamoDB,
    stream_name: str,
    table: str,
) -> None:
    """A process paused past its failover time (SIGSTOP, a debugger, a long collection)
    wakes up with its deliveries and its renewal loop due at once, in no set order: the
    lease soak saw a resumed worker hand out the batch it had buffered while another worker
    already read the shard. A lease that went a failover time without renewal is as good as
    lost, so nothing of it is delivered; the shard is read again from its checkpoint (here
    TRIM_HORIZON, nothing committed), not from the buffered batch."""
    mode, client = reading
    await client.create_stream(stream_name, 1)
    await put_plain(client, stream_name, [(f"r{i}".encode(), "k") for i in range(10)])
    config = leased(local_dynamodb, table, "sleeper", max_records_per_call=10, mode=mode)
    async with Consumer(client, stream_name, config) as consumer:
        with anyio.fail_after(30):
            first = await consumer.__anext__()  # r0..r9, not committed
            await pause_with_a_batch_buffered(client, stream_name, consumer)
            after = await consumer.__anext__()
            assert consumer.leases is not None and consumer.leases.lost >= 1
    assert rows(first)[0].data == b"r0"
    assert rows(after)[0].data == b"r0"  # read again from the checkpoint, not s0


async def test_a_processor_paused_past_its_failover_time_handles_nothing_of_the_lapsed_lease(
    local_kinesis: LocalKinesis, local_dynamodb: LocalDynamoDB, stream_name: str, table: str
) -> None:
    """The same pause under ``run(handler)``: the handler blocks the process past the
    failover time while the next batch waits in the shard's buffer; that batch is not
    handled, the shard is read again from its checkpoint."""
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        await put_plain(client, stream_name, [(f"r{i}".encode(), "k") for i in range(10)])
        config = leased(local_dynamodb, table, "sleeper", max_records_per_call=10)
        handled: list[bytes] = []
        async with Consumer(client, stream_name, config) as consumer:

            async def handler(batch: RecordBatch) -> None:
                handled.append(rows(batch)[0].data)
                if len(handled) == 1:
                    await pause_with_a_batch_buffered(client, stream_name, consumer)
                elif len(handled) == 2:
                    consumer.stop()

            with anyio.fail_after(30):
                await consumer.run(handler)
            assert consumer.leases is not None and consumer.leases.lost >= 1
    assert handled == [b"r0", b"r0"]  # the first batch again (never committed), not s0


async def test_a_lease_taken_from_under_a_worker_stops_its_shard_and_a_late_commit_is_harmless(
    reading: tuple[Literal["polling", "efo"], KinesisClient],
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    stream_name: str,
    table: str,
) -> None:
    mode, client = reading
    await client.create_stream(stream_name, 1)
    await put_plain(client, stream_name, [(f"r{i}".encode(), "k") for i in range(50)])
    config = leased(local_dynamodb, table, "victim", max_records_per_call=10, mode=mode)
    async with Consumer(client, stream_name, config) as consumer:
        with anyio.fail_after(30):
            batch = await consumer.__anext__()  # taken, not committed yet
            shard_id = batch.shard_id
            # Another worker takes the lease (what a steal writes: owner and counter).
            await dynamodb.call(
                "UpdateItem",
                {
                    "TableName": table,
                    "Key": {"leaseKey": {"S": shard_id}},
                    "UpdateExpression": "SET leaseOwner = :o ADD leaseCounter :one",
                    "ExpressionAttributeValues": {":o": {"S": "thief"}, ":one": {"N": "1"}},
                },
            )
            while consumer.leases is None or consumer.leases.lost == 0:
                await anyio.sleep(0.05)
            consumer.commit(batch)  # the lease is gone: ignored, not an error
            # The lease holder counts the loss before the scheduler, which it tells, drops
            # the shard (under load the test once looked in between): its reader goes.
            while (stream_name, shard_id) in consumer.statistics().shards:
                await anyio.sleep(0.05)
            consumer.commit(batch)  # and later still: ignored too
            metrics = consumer.statistics()
            assert metrics.buffered_batches == 0  # and what it had read, undelivered
            assert consumer.leases.held == 0
    leases = await items(dynamodb, table)
    lease = leases[shard_id]
    assert lease["leaseOwner"] == "thief"  # nothing written over the new owner
    assert lease["checkpoint"] == "TRIM_HORIZON"  # and no checkpoint of the old one


async def test_a_table_with_another_key_schema_fails_the_block_and_is_left_as_it_was(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    stream_name: str,
    table: str,
) -> None:
    await dynamodb.create_table(
        {
            "TableName": table,
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
        }
    )
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        with pytest.raises(LeaseTableError):
            async with Consumer(client, stream_name, leased(local_dynamodb, table, "w")):
                pass
    assert await items_by(dynamodb, table, "id") == {}


async def items_by(dynamodb: DynamoDBClient, table: str, key: str) -> dict[str, Any]:
    page = await dynamodb.call("Scan", {"TableName": table})
    return {item[key]["S"]: item for item in page["Items"]}


async def test_bad_lease_options_fail_before_any_call(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with local_kinesis.client(tls=False) as client:
        calls = client.statistics().calls
        with pytest.raises(errors.ConfigError, match="worker_count"):
            Consumer(client, stream_name, ConsumerConfig(lease_table="app", worker_count=2))
        assert client.statistics().calls == calls


async def test_with_latest_a_lease_never_checkpointed_skips_what_was_written_before_opening(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    stream_name: str,
    table: str,
) -> None:
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        await put_plain(client, stream_name, [(f"old{i}".encode(), "k") for i in range(10)])
        config = leased(local_dynamodb, table, "w")
        config = dataclasses.replace(config, start=StartingPosition.latest())
        async with Consumer(client, stream_name, config) as consumer:
            with anyio.fail_after(30):
                # The iterator exists once the shard was read (empty): LATEST is pinned there.
                while not any(s.reads for s in consumer.statistics().shards.values()):
                    await anyio.sleep(0.05)
                await put_plain(client, stream_name, [(f"new{i}".encode(), "k") for i in range(10)])
                seen = await read_until(consumer, 10)
    assert [row.data for row in seen] == [f"new{i}".encode() for i in range(10)]


async def test_with_latest_a_worker_lost_before_its_first_checkpoint_loses_no_record(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    stream_name: str,
    table: str,
) -> None:
    """The first owner pins its LATEST start in the lease; its successor reads from there."""
    lost = False

    def decide(request: Request) -> Cut | None:
        # Worker 1's table goes out of reach: its renewals and its release fail, its lease
        # expires. (An AccessDenied is permanent: it stops the consumer with that error.)
        return Cut() if lost else None

    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        await put_plain(client, stream_name, [(f"old{i}".encode(), "k") for i in range(5)])
        first: list[Row] = []
        with FaultProxy(local_dynamodb.port, decide) as proxy:
            config = dataclasses.replace(
                leased(local_dynamodb, table, "w1"),
                start=StartingPosition.latest(),
                dynamodb_endpoint_url=proxy.endpoint_url,
            )
            async with Consumer(client, stream_name, config) as consumer:
                with anyio.fail_after(30):
                    while not any(s.reads for s in consumer.statistics().shards.values()):
                        await anyio.sleep(0.05)
                    before = [(f"a{i}".encode(), "k") for i in range(10)]
                    await put_plain(client, stream_name, before)
                    first = await read_until(consumer, 10, commit=False)
                lost = True
        (lease,) = (await items(dynamodb, table)).values()
        assert lease["leaseOwner"] == "w1"  # not released: the worker was lost
        assert lease["checkpoint"] == "LATEST" and "latestPinnedAt" in lease
        after = [(f"b{i}".encode(), "k") for i in range(10)]
        await put_plain(client, stream_name, after)
        wanted = {data for data, _ in before + after}
        second: set[bytes] = set()
        config = leased(local_dynamodb, table, "w2")
        config = dataclasses.replace(config, start=StartingPosition.latest())
        async with Consumer(client, stream_name, config) as consumer:
            with anyio.fail_after(30):
                async for batch in consumer:
                    second.update(row.data for row in rows(batch))
                    consumer.commit(batch)
                    if wanted <= second:
                        break
    assert {row.data for row in first} == {data for data, _ in before}
    assert wanted <= second  # worker 1 committed nothing: worker 2 reads it all again


async def test_a_worker_id_used_twice_fails_the_second_consumers_loop_as_a_typed_error(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    stream_name: str,
    table: str,
) -> None:
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 2)
        config = leased(local_dynamodb, table, "twin")
        async with Consumer(client, stream_name, config) as first:
            with anyio.fail_after(30):
                while first.leases is None or first.leases.held < 2:
                    await anyio.sleep(0.05)
                with pytest.raises(WorkerIdConflictError) as raised:
                    async with Consumer(client, stream_name, config) as second:
                        async for _ in second:
                            pass
            assert raised.value.worker_id == "twin"
            stats = first.leases
            assert stats is not None and stats.held == 2 and stats.lost == 0


async def test_run_handlers_commit_to_the_leases_and_a_second_run_resumes_after_them(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    stream_name: str,
    table: str,
) -> None:
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 2)
        await put_plain(client, stream_name, [(f"a{i}".encode(), f"k{i}") for i in range(100)])
        seen: list[Row] = []
        async with Consumer(client, stream_name, leased(local_dynamodb, table, "a")) as consumer:

            async def handler(batch: RecordBatch) -> None:
                seen.extend(rows(batch))
                if len(seen) >= 100:
                    consumer.stop()

            with anyio.fail_after(30):
                await consumer.run(handler)
        await put_plain(client, stream_name, [(f"b{i}".encode(), f"k{i}") for i in range(50)])
        async with Consumer(client, stream_name, leased(local_dynamodb, table, "b")) as consumer:
            with anyio.fail_after(30):
                again = await read_until(consumer, 50)
    assert sorted(row.data for row in seen) == sorted(f"a{i}".encode() for i in range(100))
    assert sorted(row.data for row in again) == sorted(f"b{i}".encode() for i in range(50))


async def test_a_table_gone_at_close_leaves_the_users_exception_as_itself(
    local_kinesis: LocalKinesis, stream_name: str, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The handover is contained: the leases expire instead, and the block's own exception
    is what leaves it (not ours, not a group)."""
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        with LocalDynamoDB() as private:
            config = leased(private, table, "w")
            with anyio.fail_after(60), pytest.raises(KeyError, match="the user's"):
                async with Consumer(client, stream_name, config) as consumer:
                    while consumer.leases is None or consumer.leases.held < 1:
                        await anyio.sleep(0.05)
                    private.stop()
                    raise KeyError("the user's")
    assert "left to expire" in caplog.text


async def test_under_run_a_lost_lease_cancels_its_handler_and_run_goes_on(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    stream_name: str,
    table: str,
) -> None:
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        await put_plain(client, stream_name, [(f"r{i}".encode(), "k") for i in range(20)])
        handling = anyio.Event()
        cancelled = anyio.Event()
        async with Consumer(client, stream_name, leased(local_dynamodb, table, "w")) as consumer:

            async def handler(batch: RecordBatch) -> None:
                handling.set()
                try:
                    await anyio.sleep_forever()  # a handler still busy when the lease goes
                except anyio.get_cancelled_exc_class():
                    cancelled.set()
                    raise

            async def steal_then_stop() -> None:
                await handling.wait()
                await dynamodb.call(
                    "UpdateItem",
                    {
                        "TableName": table,
                        "Key": {"leaseKey": {"S": "shardId-000000000000"}},
                        "UpdateExpression": "SET leaseOwner = :o ADD leaseCounter :one",
                        "ExpressionAttributeValues": {":o": {"S": "thief"}, ":one": {"N": "1"}},
                    },
                )
                await cancelled.wait()
                consumer.stop()

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(steal_then_stop)
                    await consumer.run(handler)  # returns after stop(): no error
            stats = consumer.leases
        assert stats is not None and stats.lost == 1 and stats.held == 0
        leases = await items(dynamodb, table)
    assert leases["shardId-000000000000"]["leaseOwner"] == "thief"


async def test_a_stream_given_by_arn_shares_its_leases_with_one_given_by_name(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    stream_name: str,
    table: str,
) -> None:
    """A lease key names the stream the same way whichever form the
    worker was given, so a worker started by ARN resumes the checkpoints a worker by name wrote
    (neither repeating nor skipping), and its ListShards and reads send StreamARN."""
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 2)
        summary = await client.call("DescribeStreamSummary", {"StreamName": stream_name})
        arn = summary["StreamDescriptionSummary"]["StreamARN"]
        await put_plain(client, stream_name, [(f"a{i}".encode(), f"k{i}") for i in range(100)])
        async with Consumer(client, stream_name, leased(local_dynamodb, table, "by-name")) as first:
            with anyio.fail_after(30):
                before = await read_until(first, 100)
        keys_by_name = set(await items(dynamodb, table))
        await put_plain(client, stream_name, [(f"b{i}".encode(), f"k{i}") for i in range(100)])
        async with Consumer(client, arn, leased(local_dynamodb, table, "by-arn")) as second:
            assert second.streams == [stream_name]
            with anyio.fail_after(30):
                after = await read_until(second, 100)
        assert set(await items(dynamodb, table)) == keys_by_name  # no second set of leases
    assert sorted(row.data for row in before) == sorted(f"a{i}".encode() for i in range(100))
    assert sorted(row.data for row in after) == sorted(f"b{i}".encode() for i in range(100))


async def test_a_lease_lost_and_taken_back_before_its_reader_ended_is_read_again(
    reading: tuple[Literal["polling", "efo"], KinesisClient],
    local_dynamodb: LocalDynamoDB,
    stream_name: str,
    table: str,
) -> None:
    """Seen in the pipeline soak: a worker whose lease expired under load and that took it
    back at once died with "'readers' already has a child named ..." - the dropped reader
    had not ended yet when the shard was scheduled again. Here the two events come back to
    back (no await between them: the old reader cannot have ended); the shard is read on
    from the lease's checkpoint."""
    mode, client = reading
    await client.create_stream(stream_name, 1)
    first = [(f"a{i}".encode(), "k") for i in range(10)]
    then = [(f"b{i}".encode(), "k") for i in range(10)]
    await put_plain(client, stream_name, first)
    config = leased(local_dynamodb, table, "w", mode=mode)
    async with Consumer(client, stream_name, config) as consumer:
        with anyio.fail_after(30):
            seen = await read_until(consumer, len(first))
            key = (stream_name, seen[0].shard_id)
            await consumer._scheduler._lease_lost(key, "expired")
            last = Position(seen[-1].sequence_number, seen[-1].sub_sequence_number)
            consumer._scheduler._lease_acquired(key, SavedShard(committed=last), ())
            await consumer._scheduler._schedule()
            await put_plain(client, stream_name, then)
            after: list[Row] = []
            while not after or after[-1].data != then[-1][0]:
                after += await read_until(consumer, 1)
    # Read on from the lease's checkpoint: what it had not written yet comes again, in order.
    assert [row.data for row in after][-len(then) :] == [data for data, _ in then]
    assert {row.data for row in seen + after} == {data for data, _ in first + then}
    assert sorted(after, key=lambda row: row.order) == after


async def test_a_late_answer_to_a_withdrawn_handoff_keeps_the_lease_taken_back_assigned(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    stream_name: str,
    table: str,
) -> None:
    """The coordinator answers a handoff whose ask was withdrawn by itself (a release) after
    ``handoff_timeout``, this worker takes the lease back, and only then does the reader's
    answer come: the lease is being read anew and must stay this worker's."""
    handoff = LeaseConfig(
        failover_time=1.0, renew_interval=0.25, take_interval=0.1, handoff_timeout=0.5
    )
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 2)
        config = dataclasses.replace(leased(local_dynamodb, table, "a"), leases=handoff)
        membership = LeaseMembership(client, [stream_name], config, "a")
        told: list[tuple[str, str]] = []
        acquired: list[tuple[str, str]] = []
        answer, answered = anyio.Event(), anyio.Event()

        async def handoff_task(key: tuple[str, str]) -> None:
            told.append(key)
            await answer.wait()  # held up past handoff_timeout
            await membership.hand_over(key, None)
            answered.set()

        async def lost(key: tuple[str, str], reason: str) -> None:
            pass

        async with AsyncExitStack() as stack:
            await membership.open(stack)
            async with anyio.create_task_group() as group:
                group.start_soon(
                    membership.run_events,
                    lambda key, saved, parents: acquired.append(key),
                    lost,
                    handoff_task,
                )
                with anyio.fail_after(30):
                    while len(acquired) < 2:
                        await anyio.sleep(0.01)
                b = LeaseCoordinator(
                    dynamodb, client, table, stream_name, worker_id="b", config=handoff
                )
                async with b:
                    with anyio.fail_after(30):
                        while not told:
                            await anyio.sleep(0.01)
                    await b.release_all()  # "b" leaves: its asks are withdrawn
                # "a" releases the lease it was told to hand over, and takes it back.
                with anyio.fail_after(30):
                    while acquired.count(told[0]) < 2:
                        await anyio.sleep(0.01)
                answer.set()
                with anyio.fail_after(30):
                    await answered.wait()
                assert membership.assignment.owns(told[0])
                group.cancel_scope.cancel()


async def test_a_shard_taken_back_while_its_handoff_was_being_answered_is_read_again(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    stream_name: str,
    table: str,
) -> None:
    """A shard is not scheduled while its handoff is answered (it is still this worker's
    lease, and its old reader is stopping). Taken back meanwhile (the ask withdrawn, the
    answer a release, the lease acquired again), it is read again as soon as the answer is
    done: not at the next shard discovery, minutes later here."""
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        first = [(f"a{i}".encode(), "k") for i in range(10)]
        then = [(f"b{i}".encode(), "k") for i in range(10)]
        await put_plain(client, stream_name, first)
        config = leased(local_dynamodb, table, "w", shard_discovery_interval=600.0)
        async with Consumer(client, stream_name, config) as consumer:
            with anyio.fail_after(30):
                seen = await read_until(consumer, len(first))
            key = (stream_name, seen[0].shard_id)
            scheduler = consumer._scheduler
            group = scheduler._group
            assert group is not None
            answer = anyio.Event()

            async def held_up_answer(key: tuple[str, str], committed: object) -> None:
                await answer.wait()  # the table's answer: a release, nothing to write here

            group.hand_over = held_up_answer  # type: ignore[method-assign]
            last = Position(seen[-1].sequence_number, seen[-1].sub_sequence_number)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(scheduler._lease_handoff, key)
                with anyio.fail_after(30):
                    while key not in scheduler._handing:
                        await anyio.sleep(0.01)
                scheduler._lease_acquired(key, SavedShard(committed=last), ())
                with anyio.fail_after(30):  # the scheduler runs, and skips the shard
                    while scheduler._reschedule.is_set():
                        await anyio.sleep(0.01)
                assert key not in scheduler._pipelines
                answer.set()
            await put_plain(client, stream_name, then)
            with anyio.fail_after(30):
                after = await read_until(consumer, len(then))
    assert [row.data for row in after] == [data for data, _ in then]
