"""Shared pieces of the lease tests that run against the local DynamoDB and Kinesis."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio

from kinesis_actors import DynamoDBClient, LocalDynamoDB
from kinesis_actors.leases import LATEST, LeaseConfig, LeaseCoordinator, LeaseEvent
from kinesis_actors.leases._holder import LeaseHolder
from kinesis_actors.leases._items import Lease
from kinesis_actors.leases._streams import LeasedStream, Streams
from kinesis_actors.leases._table import LeaseTable
from kinesis_actors.leases._taker import LeaseTaker
from tests.faults import FaultProxy

#: A fast protocol for tests: fail over after 1 s; renew, scan and sync often. Steals take
#: (the KCL 2.x's way), so that these tests see the steal itself; HANDOFF asks the owner.
FAST = LeaseConfig(
    failover_time=1.0,
    renew_interval=0.25,
    take_interval=0.1,
    shard_sync_interval=0.3,
    graceful_handoff=False,
)
HANDOFF = replace(FAST, graceful_handoff=True, handoff_timeout=2.0)
#: Bound on any wait for the protocol to converge (not a timing assertion: a hang guard).
PATIENCE = 30.0


def coordinator(
    dynamodb: Any,
    kinesis: Any,
    table: str,
    streams: str | list[str],
    worker_id: str,
    config: LeaseConfig = FAST,
    **options: Any,
) -> LeaseCoordinator:
    return LeaseCoordinator(
        dynamodb, kinesis, table, streams, worker_id=worker_id, config=config, **options
    )


def proxied(local: LocalDynamoDB, proxy: FaultProxy) -> DynamoDBClient:
    """A DynamoDB client on the local server through the fault proxy."""
    return DynamoDBClient(
        region=local.region,
        endpoint_url=proxy.endpoint_url,
        verify=False,
        credentials=local.credentials,
    )


async def events_until(
    coordinator: LeaseCoordinator,
    done: Callable[[list[LeaseEvent]], bool],
    seen: list[LeaseEvent] | None = None,
) -> list[LeaseEvent]:
    """Receive events into ``seen`` until ``done(seen)``."""
    seen = [] if seen is None else seen
    with anyio.fail_after(PATIENCE):
        while not done(seen):
            seen.append(await coordinator.next_event())
    return seen


async def put_items(dynamodb: Any, table: str, items: list[dict[str, Any]]) -> None:
    for item in items:
        await dynamodb.call("PutItem", {"TableName": table, "Item": item})


async def scan(dynamodb: Any, table: str) -> list[dict[str, Any]]:
    reply = await dynamodb.call("Scan", {"TableName": table, "ConsistentRead": True})
    return sorted(reply["Items"], key=lambda item: item["leaseKey"]["S"])


# -- take rounds and holders driven by hand, on a clock set by hand --------------------------

STREAM = LeasedStream(
    name="orders",
    arn="arn:aws:kinesis:us-east-1:123456789012:stream/orders",
    created=1_700_000_000,
    identifier="123456789012:orders:1700000000",
    given="orders",
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class NoKinesis:
    """Nothing here pins a LATEST start (the leases are at TRIM_HORIZON)."""

    async def call(self, operation: str, params: object) -> object:
        raise AssertionError(f"no Kinesis call expected, got {operation}")


async def watcher_a(
    dynamodb: DynamoDBClient,
    name: str,
    config: LeaseConfig,
    table_type: type[LeaseTable] = LeaseTable,
) -> tuple[LeaseTable, Clock, LeaseHolder, LeaseTaker]:
    """A new table, and the take rounds of worker "a" on it, on a clock set by hand."""
    table = table_type(dynamodb, name)
    await table.ensure(create=True)
    clock = Clock()
    holder = LeaseHolder(table, "a", config, clock, on_shard_end=lambda: None)
    streams = Streams([STREAM], multi=False, table=name)
    taker = LeaseTaker(
        table,
        holder,
        "a",
        config,
        clock,
        known=lambda: streams,
        kinesis=NoKinesis(),  # type: ignore[arg-type]
        initial_position=LATEST,
        rng=random.Random(7),
    )
    return table, clock, holder, taker


class HeldUpReplies(LeaseTable):
    """The table, of which some replies arrive only once ``reply`` is set (a reply still on
    its way: a fault no real server produces on cue); ``sent`` is set once such a write has
    landed. Subclasses say which writes, through :meth:`held_up`."""

    def __init__(self, client: DynamoDBClient, name: str) -> None:
        super().__init__(client, name)
        self.sent = anyio.Event()
        self.reply = anyio.Event()

    async def held_up(self, new: Lease | None) -> Lease | None:
        self.sent.set()
        await self.reply.wait()
        return new


class HeldUpTakes(HeldUpReplies):
    """Take replies held up."""

    async def take(self, lease: Lease, owner: str) -> Lease | None:
        return await self.held_up(await super().take(lease, owner))


async def release_all_begins_during_a_take(
    table: HeldUpTakes, taker: LeaseTaker, take_round: Callable[[], Awaitable[None]]
) -> None:
    """Run ``take_round`` and begin ``release_all`` (``stop_taking``) while the reply to its
    take is on its way; return when the round ended."""
    async with anyio.create_task_group() as group:
        group.start_soon(take_round)
        await table.sent.wait()
        taker.stop_taking()
        table.reply.set()
