"""The lease protocol against the local DynamoDB and Kinesis: several coordinators, one table.

A short failover (1 s) stands in for the KCL's 10 s; every wait is bounded by events, not
sleeps.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence

import anyio
import pytest

from kinesis_actors import DynamoDBClient, KinesisClient
from kinesis_actors.leases import (
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    LeaseAcquired,
    LeaseConfig,
    LeaseEvent,
    LeaseLost,
    LeaseLostError,
    LeaseTable,
    decode_lease,
)
from kinesis_actors.leases._taker import PIN_MARGIN_MS

from .helpers import FAST, PATIENCE, coordinator, events_until, scan

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stream(client: KinesisClient, stream_name: str) -> AsyncIterator[str]:
    with anyio.fail_after(PATIENCE):
        await client.create_stream(stream_name, 4)
    yield stream_name


def acquired(events: Sequence[LeaseEvent]) -> set[str]:
    held: set[str] = set()
    for event in events:
        if isinstance(event, LeaseAcquired):
            held.add(event.shard_id)
        elif isinstance(event, LeaseLost):
            held.discard(event.shard_id)
    return held


async def test_one_worker_creates_kcl_leases_and_takes_every_shard(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "w1") as one:
        events = await events_until(one, lambda seen: len(acquired(seen)) == 4)
        assert all(isinstance(e, LeaseAcquired) and e.checkpoint == TRIM_HORIZON for e in events)
        stats = one.statistics()
        assert (stats.held, stats.ready, stats.taken, stats.leases_created) == (4, 4, 4, 4)
    items = await scan(dynamodb, lease_table_name)
    assert [item["leaseKey"]["S"] for item in items] == [
        f"shardId-00000000000{n}" for n in range(4)
    ]
    for item in items:  # the KCL's attributes, and our two stream attributes
        assert item["leaseOwner"] == {"S": "w1"}
        assert item["checkpoint"] == {"S": TRIM_HORIZON}
        assert item["checkpointSubSequenceNumber"] == {"N": "0"}
        assert int(item["leaseCounter"]["N"]) >= 1
        assert set(item) <= {
            "leaseKey", "leaseOwner", "leaseCounter", "checkpoint",
            "checkpointSubSequenceNumber", "ownerSwitchesSinceCheckpoint",
            "startingHashKey", "endingHashKey", "streamArn", "streamCreationEpoch",
        }  # fmt: skip


async def test_two_workers_share_four_shards_two_each_and_keep_them(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with (
        coordinator(dynamodb, client, lease_table_name, stream, "a") as a,
        coordinator(dynamodb, client, lease_table_name, stream, "b") as b,
    ):
        seen_a: list[LeaseEvent] = []
        seen_b: list[LeaseEvent] = []
        with anyio.fail_after(PATIENCE):
            while not (len(acquired(seen_a)) == 2 and len(acquired(seen_b)) == 2):
                with anyio.move_on_after(0.05):
                    seen_a.append(await a.next_event())
                with anyio.move_on_after(0.05):
                    seen_b.append(await b.next_event())
        assert acquired(seen_a).isdisjoint(acquired(seen_b))
        before = {item["leaseKey"]["S"]: int(item["leaseCounter"]["N"]) for item in
                  await scan(dynamodb, lease_table_name)}  # fmt: skip
        # 'a' started alone and took all four; 'b' stole two. A few renewals later, nothing
        # more changed hands.
        lost = (a.statistics().lost, b.statistics().lost)
        assert lost == (2, 0) and b.statistics().stolen == 2
        renewals = a.statistics().renewals
        with anyio.fail_after(PATIENCE):
            while a.statistics().renewals < renewals + 8:
                await anyio.sleep(0.05)
        assert (a.statistics().lost, b.statistics().lost) == lost
        assert a.statistics().stolen == 0 and b.statistics().stolen == 2
        after = await scan(dynamodb, lease_table_name)
        assert all(int(item["leaseCounter"]["N"]) > before[item["leaseKey"]["S"]] for item in after)
        assert a.statistics().renewal_latency_max is not None


async def test_a_stopped_workers_leases_are_taken_after_the_failover_time(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "dead") as dead:
        await events_until(dead, lambda seen: len(acquired(seen)) == 4)
    # 'dead' left without releasing: its leases are owned and silent.
    started = anyio.current_time()  # before the heir's first look at the table
    async with coordinator(dynamodb, client, lease_table_name, stream, "heir") as heir:
        events = await events_until(heir, lambda seen: len(acquired(seen)) == 4)
        waited = anyio.current_time() - started
        assert waited >= FAST.failover_time  # the protocol's lower bound: never earlier
        assert {e.previous_owner for e in events if isinstance(e, LeaseAcquired)} == {"dead"}
        # Until 'dead' expires it counts as a live worker with four leases: the heir steals
        # toward two, then takes the rest once they expire.
        stats = heir.statistics()
        assert stats.taken + stats.stolen == 4 and stats.taken >= 2
    items = await scan(dynamodb, lease_table_name)
    assert {item["ownerSwitchesSinceCheckpoint"]["N"] for item in items} == {"1"}


async def test_a_latest_lease_is_pinned_before_it_is_handed_out_and_its_heir_gets_the_pin(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    before = int(time.time() * 1000)
    options = {"initial_position": LATEST}
    async with coordinator(dynamodb, client, lease_table_name, stream, "dead", **options) as one:
        events = await events_until(one, lambda seen: len(acquired(seen)) == 4)
        # The first reader reads from LATEST as asked: no pin handed to it...
        assert {e.latest_pinned_at for e in events if isinstance(e, LeaseAcquired)} == {None}
        # ...but every lease was pinned before it was handed out.
        items = await scan(dynamodb, lease_table_name)
        pins = {item["leaseKey"]["S"]: int(item["latestPinnedAt"]["N"]) for item in items}
    after = int(time.time() * 1000)
    # The service's clock (the replies' Date, in whole seconds: up to 1 s behind), less the
    # margin; the local server shares this host's clock.
    low, high = before - PIN_MARGIN_MS - 1000, after - PIN_MARGIN_MS
    assert all(low <= pin <= high for pin in pins.values())
    assert {item["checkpoint"]["S"] for item in items} == {LATEST}  # the KCL's view unchanged
    async with coordinator(dynamodb, client, lease_table_name, stream, "heir", **options) as heir:
        events = await events_until(heir, lambda seen: len(acquired(seen)) == 4)
        heirs = {e.shard_id: e.latest_pinned_at for e in events if isinstance(e, LeaseAcquired)}
        assert heirs == pins  # the pin is kept, not moved to the heir's start
    assert {int(i["latestPinnedAt"]["N"]) for i in await scan(dynamodb, lease_table_name)} == set(
        pins.values()
    )


async def test_a_new_worker_steals_toward_an_even_share(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "first") as first:
        seen_first = await events_until(first, lambda seen: len(acquired(seen)) == 4)
        async with coordinator(dynamodb, client, lease_table_name, stream, "second") as second:
            seen_second = await events_until(second, lambda seen: len(acquired(seen)) == 2)
            await events_until(first, lambda seen: len(acquired(seen)) == 2, seen_first)
            lost = [e for e in seen_first if isinstance(e, LeaseLost)]
            assert [e.reason for e in lost] == ["taken", "taken"]
            assert {e.shard_id for e in lost} == acquired(seen_second)
            assert second.statistics().stolen == 2 and first.statistics().lost == 2
            # Balanced: nobody steals more.
            steals = second.statistics().stolen
            scans = second.statistics().table_calls
            with anyio.fail_after(PATIENCE):
                while second.statistics().table_calls < scans + 30:
                    await anyio.sleep(0.05)
            assert second.statistics().stolen == steals


async def take_from_under(table: LeaseTable, key: str) -> None:
    """An intruder takes ``key`` from its owner, on the counter it read: read again and
    retried if the owner's renewal landed in between (it renews every 0.25 s)."""
    with anyio.fail_after(PATIENCE):
        while True:
            target = await table.get(key)
            assert target is not None
            if await table.take(target, "intruder") is not None:
                return


async def test_a_failed_renewal_condition_is_a_lease_lost_at_once(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "victim") as victim:
        seen = await events_until(victim, lambda seen: len(acquired(seen)) == 4)
        table = LeaseTable(dynamodb, lease_table_name)
        await take_from_under(table, "shardId-000000000001")
        await events_until(victim, lambda seen: isinstance(seen[-1], LeaseLost), seen)
        assert seen[-1] == LeaseLost(stream, "shardId-000000000001", "taken")
        with pytest.raises(LeaseLostError):
            await victim.checkpoint(stream, "shardId-000000000001", "1234")
        assert (stream, "shardId-000000000001") not in victim.held()
    item = await table.get("shardId-000000000001")
    assert item is not None and item.owner == "intruder" and item.checkpoint == TRIM_HORIZON


async def test_a_lease_is_deliverable_only_while_validly_held(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    """What the consumer's deliveries are fenced by: held, handed to the reader, renewed
    within a failover time by the worker's clock. Not once a pause let it lapse (before the
    renewal loop ran), not after the loop dropped it, not for a lease taken from under the
    worker: a dropped lease read as "not lapsed" would have reopened the fence between the
    holder's drop and the consumer's."""
    shard, other = "shardId-000000000001", "shardId-000000000002"
    async with coordinator(dynamodb, client, lease_table_name, stream, "sleeper") as worker:
        await events_until(worker, lambda seen: len(acquired(seen)) == 4)
        assert worker.deliverable(stream, shard) and worker.deliverable(stream, other)
        assert not worker.deliverable(stream, "shardId-000000000009")  # not a shard held
        assert not worker.deliverable("another-stream", shard)
        time.sleep(FAST.failover_time)  # noqa: ASYNC251 - the fault: the process stops
        assert not worker.deliverable(stream, shard)  # lapsed, the renewal loop not run yet
        seen = await events_until(worker, lambda seen: any(e.shard_id == shard for e in seen))
        assert LeaseLost(stream, shard, "expired") in seen
        assert not worker.deliverable(stream, shard)  # dropped: still shut
    async with coordinator(dynamodb, client, lease_table_name, stream, "victim") as victim:
        await events_until(victim, lambda seen: len(acquired(seen)) == 4)
        assert victim.deliverable(stream, other)
        table = LeaseTable(dynamodb, lease_table_name)
        await take_from_under(table, other)
        await events_until(victim, lambda seen: bool(seen) and isinstance(seen[-1], LeaseLost))
        assert not victim.deliverable(stream, other)


async def test_a_checkpoint_is_conditional_and_lands_in_kcl_attributes(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "w") as one:
        await events_until(one, lambda seen: len(acquired(seen)) == 4)
        await one.checkpoint(
            stream,
            "shardId-000000000000",
            "49590338271490256608559692538361571095921575989136588801",
            2,
        )
        one.note_checkpoint(
            stream,
            "shardId-000000000002",
            "49590338271490256608559692538361571095921575989136588899",
        )
        with anyio.fail_after(PATIENCE):
            while one.statistics().checkpoints < 2:
                await anyio.sleep(0.05)
    items = {item["leaseKey"]["S"]: item for item in await scan(dynamodb, lease_table_name)}
    first = items["shardId-000000000000"]
    assert first["checkpoint"] == {"S": "49590338271490256608559692538361571095921575989136588801"}
    assert first["checkpointSubSequenceNumber"] == {"N": "2"}
    assert items["shardId-000000000002"]["checkpoint"]["S"].endswith("8899")


async def test_a_graceful_release_hands_leases_over_at_once_with_their_checkpoints(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    # A failover far longer than the wait: only a release can explain a take.
    slow = LeaseConfig(failover_time=120.0, renew_interval=0.25, take_interval=0.1)
    finals = {(stream, f"shardId-00000000000{n}"): (f"{n}00", n) for n in range(4)}
    async with coordinator(dynamodb, client, lease_table_name, stream, "leaving", slow) as leaving:
        seen = await events_until(leaving, lambda seen: len(acquired(seen)) == 4)
        await leaving.release_all(finals)
        assert leaving.statistics().released == 4 and leaving.statistics().held == 0
        await events_until(leaving, lambda seen: len(acquired(seen)) == 0, seen)
        assert {e.reason for e in seen if isinstance(e, LeaseLost)} == {"released"}
        async with coordinator(
            dynamodb, client, lease_table_name, stream, "staying", slow
        ) as staying:
            events = await events_until(staying, lambda seen: len(acquired(seen)) == 4)
            resumed = {
                e.shard_id: (e.checkpoint, e.sub_sequence)
                for e in events
                if isinstance(e, LeaseAcquired)
            }
            assert resumed == {shard: checkpoint for (_, shard), checkpoint in finals.items()}
            assert staying.statistics().stolen == 0


async def test_a_finished_parent_opens_its_children_and_not_before(
    dynamodb: DynamoDBClient, client: KinesisClient, stream_name: str, lease_table_name: str
) -> None:
    with anyio.fail_after(PATIENCE):
        await client.create_stream(stream_name, 1)
    async with coordinator(dynamodb, client, lease_table_name, stream_name, "w") as one:
        seen = await events_until(one, lambda seen: len(acquired(seen)) == 1)
        listed = await client.call("ListShards", {"StreamName": stream_name})
        hash_range = listed["Shards"][0]["HashKeyRange"]
        middle = (int(hash_range["StartingHashKey"]) + int(hash_range["EndingHashKey"])) // 2
        await client.call(
            "SplitShard",
            {"StreamName": stream_name, "ShardToSplit": "shardId-000000000000",
             "NewStartingHashKey": str(middle)},
        )  # fmt: skip
        with anyio.fail_after(PATIENCE):
            await client.wait_for_stream(stream_name)
            while one.statistics().held < 3:  # the children's leases, taken but not open
                await anyio.sleep(0.05)
        assert one.held() == {(stream_name, "shardId-000000000000")}
        assert one.statistics().ready == 1
        await one.finish(stream_name, "shardId-000000000000")
        await events_until(one, lambda seen: len(acquired(seen)) == 3, seen)
        children = [e for e in seen[1:] if isinstance(e, LeaseAcquired)]
        assert {e.shard_id for e in children} == {"shardId-000000000001", "shardId-000000000002"}
        assert all(
            e.parents == ("shardId-000000000000",) and e.checkpoint == TRIM_HORIZON
            for e in children
        )
    parent = decode_lease(
        next(i for i in await scan(dynamodb, lease_table_name) if i["leaseKey"]["S"].endswith("0"))
    )
    assert parent.checkpoint == SHARD_END and parent.owner is None
    assert parent.child_shard_ids == ("shardId-000000000001", "shardId-000000000002")


async def test_three_workers_and_twelve_shards_settle_at_four_each(
    dynamodb: DynamoDBClient, client: KinesisClient, stream_name: str, lease_table_name: str
) -> None:
    with anyio.fail_after(PATIENCE):
        await client.create_stream(stream_name, 12)
    async with (
        coordinator(dynamodb, client, lease_table_name, stream_name, "x") as x,
        coordinator(dynamodb, client, lease_table_name, stream_name, "y") as y,
        coordinator(dynamodb, client, lease_table_name, stream_name, "z") as z,
    ):
        with anyio.fail_after(PATIENCE):
            while sorted(len(c.held()) for c in (x, y, z)) != [4, 4, 4]:
                await anyio.sleep(0.05)
    owners = Counter(item["leaseOwner"]["S"] for item in await scan(dynamodb, lease_table_name))
    assert owners == {"x": 4, "y": 4, "z": 4}
