"""The EFO reader against the local server's TLS port (HTTP/2): faults, isolation, shard end.

Faults are injected by wrapping ``client.subscribe_to_shard`` (the only mock here): a
subscription cut mid-stream, an exception event, silence past the watchdog, ResourceInUse on
resubscribe. Everything else is the real server.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, errors
from kinesis_actors.consumer import Consumer, ConsumerConfig, RecordBatch, StartingPosition
from kinesis_actors.records import ShardMap

from .helpers import Row, assert_in_shard_order, by_data, rows, shard_map
from .test_resharding_local import KEYS, ROUNDS, check_per_key_order, produce_while_resharding

pytestmark = pytest.mark.anyio


def efo(**options: Any) -> ConsumerConfig:
    return ConsumerConfig(
        mode="efo", start=StartingPosition.trim_horizon(), shard_discovery_interval=0.5, **options
    )


class FaultySubscriptions:
    """Wraps ``client.subscribe_to_shard``; subscription *n* gets ``plan[n]``:

    ``"in_use"`` (ResourceInUse at open), ``"cut"`` (transport failure after its first event
    with records), ``"exception"`` (an exception event there), ``"stall"`` (silence there),
    anything else: untouched.
    """

    def __init__(self, client: KinesisClient, plan: list[str]) -> None:
        self._real = client.subscribe_to_shard
        self.plan = plan
        self.positions: list[Mapping[str, Any]] = []
        self.stalled = anyio.Event()

    @asynccontextmanager
    async def __call__(
        self, arn: str, shard_id: str, position: Mapping[str, Any]
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        fault = self.plan[len(self.positions)] if len(self.positions) < len(self.plan) else ""
        self.positions.append(dict(position))
        if fault == "in_use":
            raise errors.ResourceInUseError("injected", code="ResourceInUseException")
        async with self._real(arn, shard_id, position) as subscription:
            yield self._events(subscription, fault)

    async def _events(
        self, subscription: AsyncIterable[dict[str, Any]], fault: str
    ) -> AsyncIterator[dict[str, Any]]:
        async for event in subscription:
            yield event
            if not event.get("Records"):
                continue
            if fault == "cut":
                raise errors.TransportError("injected: connection reset")
            if fault == "exception":
                raise errors.ServiceError("injected", code="InternalFailureException")
            if fault == "stall":
                self.stalled.set()
                await anyio.sleep_forever()


async def put_round(client: KinesisClient, stream: str, round_: int, keys: list[str]) -> None:
    records = [{"Data": f"{key}:{round_}".encode(), "PartitionKey": key} for key in keys]
    result = await client.call("PutRecords", {"StreamName": stream, "Records": records})
    assert result["FailedRecordCount"] == 0


async def test_faults_resubscribe_from_the_right_position(
    client: KinesisClient, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cut, an exception event, ResourceInUse on resubscribe and a silence past the
    watchdog, one after the other on one shard: nothing lost, nothing twice. (Renewals:
    the isolation test below.)"""
    await client.create_stream(stream_name, 1)
    faults = FaultySubscriptions(client, ["cut", "exception", "in_use", "stall"])
    monkeypatch.setattr(client, "subscribe_to_shard", faults)
    config = efo(efo_watchdog_timeout=2.5)
    seen: list[Row] = []
    rounds = 0
    async with Consumer(client, stream_name, config) as consumer:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:

                async def produce() -> None:
                    nonlocal rounds
                    # Keep writing until every fault happened and a clean subscription followed.
                    while len(faults.positions) < 5:
                        await put_round(client, stream_name, rounds, ["a", "b"])
                        rounds += 1
                        await anyio.sleep(0.2)
                    tg.cancel_scope.cancel()

                tg.start_soon(produce)
                async for batch in consumer:
                    seen.extend(rows(batch))
                    consumer.commit(batch)
            while len(seen) < 2 * rounds:
                batch = await consumer.__anext__()
                seen.extend(rows(batch))
        metrics = consumer.metrics["shards"][f"{stream_name}/shardId-000000000000"]
    assert len(seen) == 2 * rounds
    assert set(by_data(seen).values()) == {1}
    assert_in_shard_order(seen)
    causes = metrics["resubscriptions"]
    assert causes["error"] >= 2 and causes["watchdog"] >= 1, causes
    assert causes["resource_in_use"] >= 1, causes
    assert metrics["events"] >= metrics["batches"]
    # Every resubscription starts right after the last continuation the reader had.
    assert faults.positions[0] == {"Type": "TRIM_HORIZON"}
    assert all(p["Type"] == "AFTER_SEQUENCE_NUMBER" for p in faults.positions[1:])


async def test_a_stalled_shard_does_not_hold_back_the_others(
    client: KinesisClient, stream_name: str
) -> None:
    """FLINK-34071 isolation: under run(handler), one of 8 shards' handler blocks while records
    keep arriving on every shard, for longer than a subscription's lifetime (renewals happen
    meanwhile). The other shards deliver everything; the stalled shard stops
    reading its subscription once its prefetch is full (no event pulled, buffer at the bound);
    released, it catches up with nothing lost or repeated."""
    shards = 8
    await client.create_stream(stream_name, shards)
    smap: ShardMap = await shard_map(client, stream_name)
    keys: dict[str, str] = {}
    for i in range(1000):
        keys.setdefault(str(smap.shard_for(f"k{i}")), f"k{i}")
        if len(keys) == shards:
            break
    blocked_shard = "shardId-000000000000"
    assert blocked_shard in keys
    rounds = 25
    prefetch = 1
    seen: dict[str, list[Row]] = {shard: [] for shard in keys}
    release = anyio.Event()
    others_done = anyio.Event()
    all_done = anyio.Event()

    async def handler(batch: RecordBatch) -> None:
        if batch.shard_id == blocked_shard:
            await release.wait()
        seen[batch.shard_id].extend(rows(batch))
        if all(len(seen[s]) == rounds for s in keys if s != blocked_shard):
            others_done.set()
        if all(len(seen[s]) == rounds for s in keys):
            all_done.set()

    # Renewals every 3 s: the stall outlasts the other shards' subscriptions.
    config = efo(prefetch_batches=prefetch, efo_subscription_lifetime=3.0)
    async with Consumer(client, stream_name, config) as consumer:
        key = f"{stream_name}/{blocked_shard}"
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(consumer.run, handler)
                for round_ in range(rounds):
                    await put_round(client, stream_name, round_, list(keys.values()))
                    await anyio.sleep(0.2)
                await others_done.wait()
                others = consumer.metrics["shards"]
                stalled = others[key]
                release.set()
                await all_done.wait()
                consumer.stop()
        final = consumer.metrics["shards"][key]
    # While stalled: one batch in the handler's hand, the buffer at its bound, and the reader
    # parked on a credit, reading no event (its socket unread: TCP holds the backpressure).
    assert stalled["buffer_depth"] == prefetch
    assert stalled["batches"] == 1 + prefetch  # never more than the bound read ahead
    assert stalled["user_records"] < rounds  # the rest stayed on the server / in TCP
    assert stalled["backpressured_seconds"] > 0.5
    assert final["events"] > stalled["events"]
    renewed = [
        metrics["resubscriptions"].get("renewal", 0)
        for name, metrics in others.items()
        if not name.endswith(blocked_shard)
    ]
    assert all(count >= 1 for count in renewed), renewed
    for shard, got in seen.items():
        assert [row.data for row in got] == [
            f"{keys[shard]}:{r}".encode() for r in range(rounds)
        ], shard
        assert_in_shard_order(got)


async def test_a_split_parent_ends_with_its_children_and_is_never_resubscribed(
    client: KinesisClient, stream_name: str
) -> None:
    """Resharding in EFO mode: a split and a merge written before reading. Each parent's
    subscription ends with a null continuation (ChildShards): terminal, one subscription per
    parent; children are read after their parents, per-key order holds."""
    await client.create_stream(stream_name, 3)
    await produce_while_resharding(client, stream_name)
    total = len(KEYS) * ROUNDS
    seen: list[Row] = []
    async with Consumer(client, stream_name, efo()) as consumer:
        with anyio.fail_after(60):
            async for batch in consumer:
                seen.extend(rows(batch))
                consumer.commit(batch)
                if len(seen) >= total:
                    break
        metrics = consumer.metrics["shards"]
        positions = consumer.positions()["streams"][stream_name]
    check_per_key_order(seen)
    for parent in ("shardId-000000000000", "shardId-000000000001", "shardId-000000000002"):
        assert positions[parent] == {"finished": True}
        shard = metrics[f"{stream_name}/{parent}"]
        assert shard["state"] in ("ended", "finished")
        assert shard["subscriptions"] == 1, shard
        assert shard["resubscriptions"] == {}, shard
