"""Graceful handoff (the KCL 3.x's ``checkpointOwner``): a worker that evens the shares asks
the owner for a lease through the table, the owner checkpoints and hands it over, and the
taker resumes exactly there - no record delivered twice."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest

from kinesis_actors import DynamoDBClient, KinesisClient, LocalDynamoDB
from kinesis_actors.leases import (
    LeaseAcquired,
    LeaseCoordinator,
    LeaseEvent,
    LeaseHandoff,
    LeaseLost,
    decode_lease,
)
from tests.faults import Delay, FaultProxy, Reply, Request

from .helpers import HANDOFF, PATIENCE, coordinator, events_until, proxied, scan

pytestmark = pytest.mark.anyio

SEQUENCE = "49590338271490256608559692538361571095921575989136588801"


@pytest.fixture
async def stream(client: KinesisClient, stream_name: str) -> AsyncIterator[str]:
    with anyio.fail_after(PATIENCE):
        await client.create_stream(stream_name, 4)
    yield stream_name


def acquired(events: list[LeaseEvent]) -> dict[str, LeaseAcquired]:
    return {e.shard_id: e for e in events if isinstance(e, LeaseAcquired)}


async def answer_handoffs(worker: LeaseCoordinator, seen: list[LeaseEvent]) -> None:
    """A reader that stops at once and hands over at a checkpoint of its own."""
    while True:
        event = await worker.next_event()
        seen.append(event)
        if isinstance(event, LeaseHandoff):
            await worker.hand_over(event.stream, event.shard_id, (SEQUENCE, 3))


async def test_a_new_worker_is_handed_its_share_at_the_owners_checkpoint_without_a_take(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    config = HANDOFF
    seen_a: list[LeaseEvent] = []
    async with (
        coordinator(dynamodb, client, lease_table_name, stream, "a", config) as a,
        anyio.create_task_group() as group,
    ):
        await events_until(a, lambda seen: len(seen) == 4, seen_a)
        group.start_soon(answer_handoffs, a, seen_a)
        async with coordinator(dynamodb, client, lease_table_name, stream, "b", config) as b:
            events = await events_until(b, lambda seen: len(acquired(seen)) == 2)
            handed = {e.shard_id for e in seen_a if isinstance(e, LeaseHandoff)}
            assert handed == set(acquired(events))
            assert all(e.to == "b" for e in seen_a if isinstance(e, LeaseHandoff))
            # The taker resumes exactly where the owner checkpointed when it handed over.
            assert {(e.checkpoint, e.sub_sequence, e.previous_owner) for e in events} == {
                (SEQUENCE, 3, "a")
            }
            stats_a, stats_b = a.statistics(), b.statistics()
            group.cancel_scope.cancel()
    assert not any(isinstance(e, LeaseLost) for e in seen_a)  # nothing was taken from it
    assert (stats_a.handoffs_given, stats_a.lost, stats_a.held) == (2, 0, 2)
    assert (stats_b.handoffs_asked, stats_b.handoffs_received, stats_b.stolen) == (2, 2, 0)
    for item in await scan(dynamodb, lease_table_name):
        assert "checkpointOwner" not in item  # every handoff completed and cleaned up


async def test_an_owner_that_does_not_answer_hands_over_by_itself_after_the_timeout(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    config = HANDOFF
    async with coordinator(dynamodb, client, lease_table_name, stream, "a", config) as a:
        await events_until(a, lambda seen: len(seen) == 4)
        async with coordinator(dynamodb, client, lease_table_name, stream, "b", config) as b:
            asked_at = anyio.current_time()
            seen = await events_until(
                a, lambda seen: sum(isinstance(e, LeaseLost) for e in seen) == 2
            )
            waited = anyio.current_time() - asked_at
            events = await events_until(b, lambda seen: len(acquired(seen)) == 2)
    assert sum(isinstance(e, LeaseHandoff) for e in seen) == 2
    assert {e.reason for e in seen if isinstance(e, LeaseLost)} == {"handed over"}
    assert waited >= config.handoff_timeout  # it had its time to answer
    assert {e.previous_owner for e in events} == {"a"}


async def test_a_handoff_asked_the_kcl_3_way_is_answered_and_left_as_the_kcl_reads_it(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "ours", HANDOFF) as ours:
        events = await events_until(ours, lambda seen: len(seen) == 4)
        shard = sorted(acquired(events))[0]
        # A KCL 3.x leader assigns the lease to one of its workers: leaseOwner the new
        # owner, checkpointOwner the current one, the counter left as it is.
        await dynamodb.call(
            "UpdateItem",
            {
                "TableName": lease_table_name,
                "Key": {"leaseKey": {"S": shard}},
                "UpdateExpression": "SET leaseOwner = :next, checkpointOwner = :current",
                "ConditionExpression": "leaseOwner = :current AND "
                "attribute_not_exists(checkpointOwner)",
                "ExpressionAttributeValues": {
                    ":next": {"S": "kcl-worker-2"},
                    ":current": {"S": "ours"},
                },
            },
        )
        (asked,) = await events_until(ours, lambda seen: len(seen) == 1)
        assert asked == LeaseHandoff(stream, shard, "kcl-worker-2")
        before = {
            decode_lease(i).key: decode_lease(i) for i in await scan(dynamodb, lease_table_name)
        }
        await ours.hand_over(stream, shard, (SEQUENCE, 0))
        assert shard not in {key for _, key in ours.held()}
    lease = {decode_lease(i).key: decode_lease(i) for i in await scan(dynamodb, lease_table_name)}[
        shard
    ]
    # What the KCL 3.x's taker waits for: its own name as leaseOwner, no checkpointOwner,
    # the counter moved, and the checkpoint to resume from.
    assert (lease.owner, lease.checkpoint_owner) == ("kcl-worker-2", None)
    assert lease.counter > before[shard].counter
    assert (lease.checkpoint, lease.sub_sequence) == (SEQUENCE, 0)


async def test_a_worker_that_stops_with_asks_pending_leaves_no_lease_named_after_it(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    config = replace(HANDOFF, handoff_timeout=PATIENCE)  # "a" answers when the test says
    async with coordinator(dynamodb, client, lease_table_name, stream, "a", config) as a:
        await events_until(a, lambda seen: len(seen) == 4)
        async with coordinator(dynamodb, client, lease_table_name, stream, "b", config) as b:
            # "b" asks for its share; "a" stops reading the first lease asked for...
            (told,) = await events_until(a, lambda seen: len(seen) == 1)
            assert isinstance(told, LeaseHandoff)
            await b.release_all()  # ...and "b" leaves before "a" has answered
            stats_b = b.statistics()
        assert stats_b.handoffs_asked >= 1 and stats_b.handoffs_received == 0
        assert stats_b.handoffs_withdrawn == stats_b.handoffs_asked
        # Each answer (a second ask may have been seen too) finds nobody to hand the lease
        # to: it is released at the answer's checkpoint, and "a" takes it back as a free
        # lease, no failover time waited; a lease whose ask it had not seen it kept.
        answered: set[str] = set()
        back: dict[str, LeaseAcquired] = {}
        seen: list[LeaseEvent] = [told]
        with anyio.fail_after(PATIENCE):
            while not answered or set(back) != answered:
                event = seen.pop() if seen else await a.next_event()
                if isinstance(event, LeaseHandoff):
                    await a.hand_over(stream, event.shard_id, (SEQUENCE, 3))
                    answered.add(event.shard_id)
                else:
                    assert isinstance(event, LeaseAcquired), event  # nothing lost
                    back[event.shard_id] = event
        assert {(e.checkpoint, e.sub_sequence, e.previous_owner) for e in back.values()} == {
            (SEQUENCE, 3, None)
        }
        assert len(a.held()) == 4
        items = await scan(dynamodb, lease_table_name)
    for item in items:
        assert {"b"}.isdisjoint(
            {item.get(name, {}).get("S") for name in ("leaseOwner", "checkpointOwner")}
        )


def is_ask(request: Request) -> bool:
    """An UpdateItem that sets ``checkpointOwner``: an ask for a handoff."""
    if request.target != "UpdateItem":
        return False
    names = json.loads(request.body).get("ExpressionAttributeNames", {})
    return any(k.startswith("#s") and v == "checkpointOwner" for k, v in names.items())


async def test_an_ask_on_its_way_when_its_worker_stops_is_withdrawn_before_it_closes(
    dynamodb: DynamoDBClient,
    local_dynamodb: LocalDynamoDB,
    client: KinesisClient,
    stream: str,
    lease_table_name: str,
) -> None:
    opened, asked = threading.Event(), threading.Event()

    def decide(request: Request) -> Reply | Delay | None:
        if not is_ask(request):
            return None
        if not opened.is_set():  # the asks of the round that opens "b": lost to a renewal
            return Reply.error("ConditionalCheckFailedException", "lost to a renewal")
        if asked.is_set():
            return None
        asked.set()
        return Delay(0.3, reply=True)  # landed, its reply on its way as "b" stops

    async with coordinator(dynamodb, client, lease_table_name, stream, "a", HANDOFF) as a:
        await events_until(a, lambda seen: len(seen) == 4)
        with FaultProxy(local_dynamodb.port, decide) as proxy:
            async with (
                proxied(local_dynamodb, proxy) as through_proxy,
                coordinator(through_proxy, client, lease_table_name, stream, "b", HANDOFF) as b,
            ):
                opened.set()
                with anyio.fail_after(PATIENCE):
                    while not asked.is_set():  # set on the proxy's thread
                        await anyio.sleep(0.01)
                await b.release_all()  # then the coordinator closes at once
            with anyio.fail_after(PATIENCE):  # the held reply, if "b" did not wait for it
                while proxy.stats.forwarded + proxy.stats.faults.get("reply-400", 0) < (
                    proxy.stats.requests
                ):
                    await anyio.sleep(0.05)
        items = await scan(dynamodb, lease_table_name)
    for item in items:
        assert {"b"}.isdisjoint(
            {item.get(name, {}).get("S") for name in ("leaseOwner", "checkpointOwner")}
        )
