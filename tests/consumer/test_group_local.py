"""Acceptance: workers in separate processes share a stream through a lease table.

Real local Kinesis and DynamoDB; every worker is ``_group_worker.py`` in its own process, so a
SIGKILL is a real crash. The checks read only the workers' own logs (records, and the
consumer's start / stop / finish / release events) and the table. Short protocol timings
(failover 2.5 s, renewals every 0.5 s) keep the runs near 30 s each; the figures are printed
(``pytest -s``) and bounded by assertions with room for a loaded machine.

The orchestration runs on asyncio only: the workers are processes of their own, one test's on
asyncio and the other's on trio.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalDynamoDB, LocalKinesis
from kinesis_actors.client import DynamoDBClient

from .group import Group, Writer, check_order_within_each_reading, first_deliveries, keys_per_shard
from .helpers import shard_map

pytestmark = [pytest.mark.anyio, pytest.mark.local_kinesis]

FAILOVER = 2.5
RENEW = 0.5
LEASES = {
    "failover_time": FAILOVER,
    "renew_interval": RENEW,
    "take_interval": 0.25,
    "shard_sync_interval": 1.0,
}
#: Room for a machine shared with other test runs, on top of what the protocol promises.
SLACK = 2.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(local_kinesis: LocalKinesis) -> AsyncIterator[KinesisClient]:
    async with local_kinesis.client(tls=False) as kinesis:
        yield kinesis


@pytest.fixture
def group_factory(
    local_kinesis: LocalKinesis, local_dynamodb: LocalDynamoDB, tmp_path: Path
) -> Iterator[Any]:
    groups: list[Group] = []

    def make(stream: str, **extra: Any) -> Group:
        group = Group(
            local_kinesis,
            local_dynamodb,
            stream,
            f"app-{uuid.uuid4().hex[:10]}",
            tmp_path,
            LEASES,
            extra,
        )
        groups.append(group)
        return group

    yield make
    for group in groups:
        group.close()  # no orphan process, whatever failed


async def lease_checkpoints(
    dynamodb: DynamoDBClient, table: str
) -> dict[str, tuple[str | None, tuple[int, int] | None]]:
    """leaseKey -> (owner, checkpoint as (sequence, sub-sequence) or None if special)."""
    page = await dynamodb.call("Scan", {"TableName": table, "ConsistentRead": True})
    out: dict[str, tuple[str | None, tuple[int, int] | None]] = {}
    for item in page["Items"]:
        owner = item.get("leaseOwner", {}).get("S")
        checkpoint = item["checkpoint"]["S"]
        sub = int(item.get("checkpointSubSequenceNumber", {}).get("N", "0"))
        out[item["leaseKey"]["S"]] = (
            owner,
            (int(checkpoint), sub) if checkpoint.isdigit() else None,
        )
    return out


def even(group: Group, workers: list[str], share: int) -> bool:
    holding = group.holding()
    return all(len(holding.get(worker, ())) == share for worker in workers)


async def test_three_workers_share_fail_over_rebalance_and_hand_over(
    client: KinesisClient, dynamodb: DynamoDBClient, group_factory: Any, stream_name: str
) -> None:
    await client.create_stream(stream_name, 12)
    keys = keys_per_shard(await shard_map(client, stream_name), 4)
    writer = Writer(client, stream_name, keys, pause=0.2)
    group: Group = group_factory(stream_name, backend="asyncio")
    figures: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        # -- three workers: four leases each -----------------------------------------------
        for worker in ("w1", "w2", "w3"):
            group.start(worker)
        started = min(group.launched.values())
        with anyio.fail_after(60):
            figures["even_3"] = (
                await group.wait_for(lambda: even(group, ["w1", "w2", "w3"], 4)) - started
            )
            ready = [e["t"] for e in group.events() if e["ev"] == "ready"]
            figures["even_3_after_ready"] = time.time() - max(ready)
            await anyio.sleep(2 * RENEW)  # a few checkpoints ride on renewals
        # -- SIGKILL one: its shards are taken within failover + one renewal -----------------
        dead = sorted(group.holding()["w3"])
        killed_at = group.kill("w3")
        table = await lease_checkpoints(dynamodb, group.table)
        last_checkpoint = {shard: table[shard][1] for shard in dead if table[shard][0] == "w3"}
        assert set(last_checkpoint) == set(dead)

        def taken_over() -> bool:
            holding = group.holding()
            return set(dead) <= holding.get("w1", set()) | holding.get("w2", set())

        with anyio.fail_after(30):
            await group.wait_for(taken_over)
        restarts = [
            e["t"]
            for e in group.events()
            if e["ev"] == "start" and e["shard"] in dead and e["t"] > killed_at
        ]
        figures["takeover"] = max(restarts) - killed_at
        figures["takeover_first"] = min(restarts) - killed_at
        assert figures["takeover"] <= FAILOVER + RENEW + SLACK, figures
        # -- a fourth worker joins: shares even again ---------------------------------------
        group.start("w4")
        joined = time.time()
        with anyio.fail_after(60):
            figures["even_after_join"] = (
                await group.wait_for(lambda: even(group, ["w1", "w2", "w4"], 4)) - joined
            )
        # -- graceful stop: w4's leases go to the others, with no duplicate -----------------
        handed = sorted(group.holding()["w4"])
        stopping_at = time.time()
        with anyio.fail_after(30):
            assert await group.terminate("w4") == 0

        def handed_over() -> bool:
            holding = group.holding()
            return set(handed) <= holding.get("w1", set()) | holding.get("w2", set())

        with anyio.fail_after(30):
            figures["handover"] = await group.wait_for(handed_over) - stopping_at
        await anyio.sleep(1.0)
        writer.stopping.set()
    written = writer.written()
    with anyio.fail_after(60):
        await group.wait_for(lambda: written <= {d.data for d in group.deliveries()})
        for worker in ("w1", "w2"):
            assert await group.terminate(worker) == 0

    events = group.events()
    deliveries = group.deliveries()
    # Every record at least once, and per key in order within every reading of a shard.
    assert {d.data for d in deliveries} == written
    figures["readings_checked"] = check_order_within_each_reading(events)
    # Duplicates: only after the dead worker's last checkpoints; none from w4.
    first = first_deliveries(deliveries)
    counts = Counter(d.record for d in deliveries)
    lost_at = defaultdict(list)
    for event in events:
        # A lease taken, or one a live worker let expire (a loaded machine delays its
        # renewals past the failover time): either way its reader's uncommitted records are
        # read again by the next owner, which is the at-least-once promise, not the crash.
        if event["ev"] == "stop" and event.get("reason") in ("taken", "expired"):
            lost_at[(event["w"], event["shard"])].append(event["t"])
    after_kill = after_steal = 0
    for record, count in counts.items():
        if count == 1:
            continue
        origin = first[record]
        if any(t >= origin.t for t in lost_at[(origin.worker, origin.shard)]):
            after_steal += 1  # its first reader lost the lease to a steal before committing
            continue
        # Otherwise only the crash explains it: after the dead worker's last checkpoint.
        assert origin.worker == "w3" and origin.shard in last_checkpoint, origin
        checkpoint = last_checkpoint[origin.shard]
        assert checkpoint is None or origin.order > checkpoint, (origin, checkpoint)
        after_kill += 1
    # The clean stop: nothing w4 delivered is delivered again after it stopped.
    again_after_w4 = [
        d
        for d in deliveries
        if d.worker != "w4" and d.t >= stopping_at and first[d.record].worker == "w4"
    ]
    assert again_after_w4 == []
    # Shares evened out by graceful handoffs (the default): the owner stops, checkpoints
    # what was taken and committed, and the taker resumes there - no steal re-delivers.
    assert after_steal == 0
    # No shard read by two workers beyond the losing side's next renewal.
    figures["max_overlap"] = max_overlap(events, {"w3": killed_at})
    assert figures["max_overlap"] <= RENEW + SLACK, figures
    figures.update(
        records=len(written),
        deliveries=len(deliveries),
        duplicates_after_kill=after_kill,
        duplicates_after_steals=after_steal,
        duplicates_after_clean_stop=0,
    )
    print(f"\nconsumer group figures: {figures}")


def max_overlap(events: list[dict[str, Any]], killed: dict[str, float]) -> float:
    """The longest time two workers read one shard at once, from their start/stop events
    (a killed worker's readings end when it was killed)."""
    spans: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    opened: dict[tuple[str, str], float] = {}
    end = max(e["t"] for e in events)
    for event in sorted(events, key=lambda e: e["t"]):
        if "shard" not in event:
            continue
        reading = (event["w"], event["shard"])
        if event["ev"] == "start":
            opened[reading] = event["t"]
        elif event["ev"] in ("stop", "finish", "release") and reading in opened:
            spans[event["shard"]].append((event["w"], opened.pop(reading), event["t"]))
    for (worker, shard), since in opened.items():
        spans[shard].append((worker, since, killed.get(worker, end)))
    worst = 0.0
    for readings in spans.values():
        for i, (a, a0, a1) in enumerate(readings):
            for b, b0, b1 in readings[i + 1 :]:
                if a != b:
                    worst = max(worst, min(a1, b1) - max(a0, b0))
    return worst


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "backend"), [("polling", "trio"), ("efo", "asyncio")])
async def test_resharding_with_three_workers_reads_no_child_before_its_parents_finished(
    client: KinesisClient, group_factory: Any, stream_name: str, mode: str, backend: str
) -> None:
    """Polling workers on trio, EFO workers (one registered consumer shared by the three) on
    asyncio."""
    await client.create_stream(stream_name, 4)
    keys = keys_per_shard(await shard_map(client, stream_name), 4)
    writer = Writer(client, stream_name, keys, pause=0.1)
    group: Group = group_factory(
        stream_name, backend=backend, max_records=20, mode=mode, consumer_name=f"group-{mode}"
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        for worker in ("w1", "w2", "w3"):
            group.start(worker)
        with anyio.fail_after(60):
            await group.wait_for(lambda: sum(map(len, group.holding().values())) == 4)
        await anyio.sleep(1.0)
        listed = await client.call("ListShards", {"StreamName": stream_name})
        first = listed["Shards"][0]["HashKeyRange"]
        middle = (int(first["StartingHashKey"]) + int(first["EndingHashKey"])) // 2
        await client.call(
            "SplitShard",
            {
                "StreamName": stream_name,
                "ShardToSplit": "shardId-000000000000",
                "NewStartingHashKey": str(middle),
            },
        )
        await client.wait_for_stream(stream_name)
        await anyio.sleep(2.0)
        await client.call(
            "MergeShards",
            {
                "StreamName": stream_name,
                "ShardToMerge": "shardId-000000000001",
                "AdjacentShardToMerge": "shardId-000000000002",
            },
        )
        await client.wait_for_stream(stream_name)
        await anyio.sleep(2.0)
        writer.stopping.set()
    written = writer.written()
    with anyio.fail_after(60):
        await group.wait_for(lambda: written <= {d.data for d in group.deliveries()})
        for worker in ("w1", "w2", "w3"):
            assert await group.terminate(worker) == 0
    events = group.events()
    deliveries = group.deliveries()
    assert {d.data for d in deliveries} == written
    check_order_within_each_reading(events)
    # Children: first read after every parent's SHARD_END, whichever workers held them.
    finished = {e["shard"]: e["t"] for e in events if e["ev"] == "finish"}
    assert {"shardId-000000000000", "shardId-000000000001", "shardId-000000000002"} <= set(finished)
    parents = {
        "shardId-000000000004": ["shardId-000000000000"],
        "shardId-000000000005": ["shardId-000000000000"],
        "shardId-000000000006": ["shardId-000000000001", "shardId-000000000002"],
    }
    for child, its_parents in parents.items():
        first_start = min(e["t"] for e in events if e["ev"] == "start" and e["shard"] == child)
        for parent in its_parents:
            assert first_start >= finished[parent], (child, parent)
    # Per key across workers: first deliveries, in time, keep each key's rounds in order.
    by_key: dict[str, list[int]] = defaultdict(list)
    for delivery in sorted(first_deliveries(deliveries).values(), key=lambda d: (d.t, d.n)):
        by_key[delivery.key].append(int(delivery.data.rsplit(":", 1)[1]))
    for key, rounds in by_key.items():
        assert rounds == sorted(rounds), key
    readers = {
        child: {e["w"] for e in events if e["ev"] == "start" and e["shard"] == child}
        for child in parents
    }
    print(f"\nresharding ({mode}): {len(written)} records, children read by {readers}")


async def test_a_worker_killed_and_restarted_under_its_id_takes_its_leases_back_from_nobody(
    client: KinesisClient, dynamodb: DynamoDBClient, group_factory: Any, stream_name: str
) -> None:
    """Most deployments keep a worker's id across restarts. The restarted process counts the
    leases under its id as its own and takes them back once they stood still for two renewal
    intervals - before the survivors' failover time - so the survivors keep every lease they
    had, and only what came after the dead process's last checkpoints is read twice."""
    await client.create_stream(stream_name, 6)
    keys = keys_per_shard(await shard_map(client, stream_name), 3)
    writer = Writer(client, stream_name, keys, pause=0.2)
    group: Group = group_factory(stream_name, backend="asyncio")
    # A failover time the restart (a Python process's start, a few seconds on a busy machine)
    # fits in; the protocol's own steps are the same at any scale.
    group.leases = {**LEASES, "failover_time": 8.0, "renew_interval": 1.0}
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        for worker in ("w1", "w2", "w3"):
            group.start(worker)
        with anyio.fail_after(60):
            await group.wait_for(lambda: even(group, ["w1", "w2", "w3"], 2))
        await anyio.sleep(3.0)  # checkpoints ride on renewals
        mine = group.holding()["w3"]
        table = await lease_checkpoints(dynamodb, group.table)
        last_checkpoint = {shard: table[shard][1] for shard in mine}
        killed_at = group.kill("w3")
        group.start("w3")

        def mine_again() -> bool:
            events = group.events()
            restarted = any(
                e["ev"] == "ready" and e["w"] == "w3" and e["t"] > killed_at for e in events
            )
            return restarted and group.holding().get("w3") == mine

        with anyio.fail_after(60):
            await group.wait_for(mine_again)
        back = time.time() - killed_at
        await anyio.sleep(1.0)
        settled_at = time.time()  # then the workers stop, and hand their leases around
        writer.stopping.set()
    written = writer.written()
    with anyio.fail_after(60):
        await group.wait_for(lambda: written <= {d.data for d in group.deliveries()})
        for worker in ("w1", "w2", "w3"):
            assert await group.terminate(worker) == 0
    events = group.events()
    deliveries = group.deliveries()
    assert {d.data for d in deliveries} == written
    # The survivors neither lost nor gained a shard from the kill until the restarted worker
    # held its own again.
    moved = [
        e
        for e in events
        if e["w"] in ("w1", "w2")
        and e["ev"] in ("start", "stop")
        and killed_at < e["t"] < settled_at
    ]
    assert moved == [], moved
    # Read twice: only records of the dead process's shards after its last checkpoints.
    first = first_deliveries(deliveries)
    counts = Counter(d.record for d in deliveries)
    for record, count in counts.items():
        if count > 1:
            origin = first[record]
            assert origin.worker == "w3" and origin.t < killed_at, origin
            checkpoint = last_checkpoint[origin.shard]
            assert checkpoint is None or origin.order > checkpoint, (origin, checkpoint)
    print(f"\nrestart under the same id: leases back after {back:.1f} s")
