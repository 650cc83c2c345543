"""A hostile table: lost replies, hand edits, a table deleted, denied or re-created, a worker
restarted under its own id. Against the local DynamoDB, through the fault proxy where the
server cannot produce the fault itself.

Transient faults cost a lease at most, never a worker; permanent ones are the coordinator's
typed error (never an ExceptionGroup) within three failover times.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import anyio
import pytest

from kinesis_actors import DynamoDBClient, KinesisClient, LocalDynamoDB
from kinesis_actors.errors import AccessDeniedError
from kinesis_actors.leases import (
    LeaseAcquired,
    LeaseCoordinator,
    LeaseEvent,
    LeaseLost,
    LeaseTableError,
)
from tests.faults import FaultProxy, LoseReply, Reply, Request

from .helpers import FAST, PATIENCE, coordinator, events_until, proxied

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stream(client: KinesisClient, stream_name: str) -> AsyncIterator[str]:
    with anyio.fail_after(PATIENCE):
        await client.create_stream(stream_name, 4)
    yield stream_name


def acquired(events: list[LeaseEvent]) -> set[str]:
    held: set[str] = set()
    for event in events:
        if isinstance(event, LeaseAcquired):
            held.add(event.shard_id)
        else:
            held.discard(event.shard_id)
    return held


async def fails_with(worker: LeaseCoordinator) -> BaseException:
    """Receive events until the coordinator raises; the error it raised."""
    with anyio.fail_after(3 * FAST.failover_time + 1.0):
        while True:
            try:
                await worker.next_event()
            except BaseException as error:
                return error


async def test_every_first_update_reply_lost_is_settled_by_reading_the_lease_back(
    local_dynamodb: LocalDynamoDB, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    seen: set[str] = set()

    def decide(request: Request) -> LoseReply | None:
        # The first attempt of every write lands and loses its reply; the client's retry
        # (the same body) then fails the condition the first attempt moved.
        if request.target != "UpdateItem":
            return None
        digest = hashlib.sha256(request.body).hexdigest()
        if digest in seen:
            return None
        seen.add(digest)
        return LoseReply()

    with FaultProxy(local_dynamodb.port, decide) as proxy:
        async with (
            proxied(local_dynamodb, proxy) as dynamodb,
            coordinator(dynamodb, client, lease_table_name, stream, "w") as worker,
        ):
            await events_until(worker, lambda seen: len(acquired(seen)) == 4)
            with anyio.fail_after(PATIENCE):
                while worker.statistics().renewals < 20:
                    await anyio.sleep(0.05)
            stats = worker.statistics()
    assert proxy.stats.faults["lost-reply"] >= 20
    assert stats.replies_settled >= 20  # takes and renewals, each settled by one read
    assert (stats.held, stats.lost) == (4, 0)  # not one lease lost, and the worker lives


async def test_an_operators_edit_that_keeps_the_owner_ends_the_lease_not_the_worker(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "w") as worker:
        events = await events_until(worker, lambda seen: len(acquired(seen)) == 4)
        shard = sorted(acquired(events))[0]
        # The counter set back by hand, the owner kept: not a write of ours.
        await dynamodb.call(
            "UpdateItem",
            {
                "TableName": lease_table_name,
                "Key": {"leaseKey": {"S": shard}},
                "UpdateExpression": "SET leaseCounter = :zero",
                "ExpressionAttributeValues": {":zero": {"N": "0"}},
            },
        )
        events = await events_until(
            worker, lambda seen: any(isinstance(e, LeaseLost) for e in seen)
        )
        assert events == [LeaseLost(stream, shard, "taken")]
        # It stands still under our id: taken back, no conflict, no death.
        events = await events_until(worker, lambda seen: len(seen) == 1)
        assert isinstance(events[0], LeaseAcquired) and events[0].shard_id == shard
        assert worker.statistics().held == 4


async def test_a_lease_table_deleted_mid_run_is_a_lease_table_error_not_a_group(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    with pytest.raises(LeaseTableError) as raised:
        async with coordinator(dynamodb, client, lease_table_name, stream, "w") as worker:
            await events_until(worker, lambda seen: len(acquired(seen)) == 4)
            await dynamodb.delete_table(lease_table_name)
            error = await fails_with(worker)
            assert type(error) is LeaseTableError, repr(error)
    assert raised.value is error  # the ``async with`` raises it too, as itself
    assert raised.value.table == lease_table_name
    assert "does not exist any more" in str(raised.value)


async def test_a_lease_table_recreated_with_another_key_schema_is_a_lease_table_error(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    with pytest.raises(LeaseTableError) as raised:
        async with coordinator(dynamodb, client, lease_table_name, stream, "w") as worker:
            await events_until(worker, lambda seen: len(acquired(seen)) == 4)
            await dynamodb.delete_table(lease_table_name)
            await dynamodb.create_table(
                {
                    "TableName": lease_table_name,
                    "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
                    "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
                    "BillingMode": "PAY_PER_REQUEST",
                }
            )
            await fails_with(worker)
    assert raised.value.table == lease_table_name
    # Most often a write meets the new key schema; on a loaded machine a take round's Scan
    # can fall between the delete and the create and find no table: the same error, sooner.
    assert raised.value.operation in ("UpdateItem", "PutItem", "GetItem", "Scan")


async def test_access_denied_mid_run_is_an_access_denied_error_naming_the_table(
    local_dynamodb: LocalDynamoDB, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    denied = False

    def decide(request: Request) -> Reply | None:
        return Reply.error("AccessDeniedException", "not authorized") if denied else None

    with (
        FaultProxy(local_dynamodb.port, decide) as proxy,
        pytest.raises(AccessDeniedError) as raised,
    ):
        async with (
            proxied(local_dynamodb, proxy) as dynamodb,
            coordinator(dynamodb, client, lease_table_name, stream, "w") as worker,
        ):
            await events_until(worker, lambda seen: len(acquired(seen)) == 4)
            denied = True
            error = await fails_with(worker)
            assert type(error) is AccessDeniedError, repr(error)
    assert lease_table_name in str(raised.value)


async def test_a_worker_restarted_with_its_own_id_takes_its_leases_back_and_steals_nothing(
    dynamodb: DynamoDBClient, client: KinesisClient, stream_name: str, lease_table_name: str
) -> None:
    six = f"{stream_name}-six"
    # The restart must come back before the survivors may take c's leases: it reclaims them
    # after two renewals (0.5 s), they take them after the failover time. A loaded machine
    # delays the restart by seconds, so the failover time here is far from 0.5 s.
    config = replace(FAST, failover_time=5.0)
    with anyio.fail_after(PATIENCE):
        await client.create_stream(six, 6)
    seen: dict[str, list[LeaseEvent]] = {"a": [], "b": []}

    async def collect(worker: LeaseCoordinator, into: list[LeaseEvent]) -> None:
        while True:
            into.append(await worker.next_event())

    async def until(predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(PATIENCE):
            while not predicate():
                await anyio.sleep(0.02)

    async with (
        coordinator(dynamodb, client, lease_table_name, six, "a", config) as a,
        coordinator(dynamodb, client, lease_table_name, six, "b", config) as b,
        anyio.create_task_group() as group,
    ):
        group.start_soon(collect, a, seen["a"])
        group.start_soon(collect, b, seen["b"])
        await until(lambda: len(acquired(seen["a"]) | acquired(seen["b"])) == 6)
        async with coordinator(dynamodb, client, lease_table_name, six, "c", config) as c:
            first = await events_until(c, lambda events: len(acquired(events)) == 2)
            await until(lambda: len(acquired(seen["a"])) == len(acquired(seen["b"])) == 2)
        # "c" left without releasing, like a SIGKILL, and comes straight back under its id.
        kept = {name: (len(events), acquired(events)) for name, events in seen.items()}
        async with coordinator(dynamodb, client, lease_table_name, six, "c", config) as again:
            back = await events_until(again, lambda events: len(acquired(events)) == 2)
            assert acquired(back) == acquired(first)
            assert again.statistics().stolen == 0
        group.cancel_scope.cancel()
    # The survivors kept their leases throughout: not one taken from them, none of c's taken.
    assert {name: (len(events), acquired(events)) for name, events in seen.items()} == kept


async def test_a_hand_set_shard_end_on_an_open_shard_is_a_lease_table_error_naming_it(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    with pytest.raises(LeaseTableError) as raised:
        async with coordinator(dynamodb, client, lease_table_name, stream, "w") as worker:
            events = await events_until(worker, lambda seen: len(acquired(seen)) == 4)
            shard = sorted(acquired(events))[0]
            await dynamodb.call(
                "UpdateItem",
                {
                    "TableName": lease_table_name,
                    "Key": {"leaseKey": {"S": shard}},
                    "UpdateExpression": "SET checkpoint = :end ADD leaseCounter :one",
                    "ExpressionAttributeValues": {":end": {"S": "SHARD_END"}, ":one": {"N": "1"}},
                },
            )
            await fails_with(worker)
    assert shard in str(raised.value) and "open" in str(raised.value)
    # Nothing was skipped behind the user's back: the next start says the same, at once.
    with pytest.raises(LeaseTableError, match=shard):
        async with coordinator(dynamodb, client, lease_table_name, stream, "w2"):
            pass


async def test_throttles_and_server_errors_are_retried_counted_and_survived(
    local_dynamodb: LocalDynamoDB, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    hostile = False
    turn = 0

    def decide(request: Request) -> Reply | None:
        nonlocal turn
        turn += 1
        if not hostile or turn % 2:
            return None
        if turn % 4:
            return Reply.error("ProvisionedThroughputExceededException", "slow down", 400)
        return Reply.error("InternalServerError", "injected", 500)

    with FaultProxy(local_dynamodb.port, decide) as proxy:
        async with (
            proxied(local_dynamodb, proxy) as dynamodb,
            coordinator(dynamodb, client, lease_table_name, stream, "w") as worker,
        ):
            await events_until(worker, lambda seen: len(acquired(seen)) == 4)
            hostile = True
            with anyio.fail_after(PATIENCE):
                while proxy.stats.faults.get("reply-500", 0) < 20:
                    await anyio.sleep(0.05)
            hostile = False
            with anyio.fail_after(PATIENCE):  # still alive, and holding every lease
                while worker.statistics().held < 4:
                    await anyio.sleep(0.05)
            stats = worker.statistics()
    assert stats.table_throttled > 0 and stats.table_retries > 0
