"""A KCL table resumed as it is, and bad input met with typed errors and nothing written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from kinesis_actors import DynamoDBClient, KinesisClient
from kinesis_actors.errors import ConfigError, ResourceNotFoundError
from kinesis_actors.leases import (
    LATEST,
    TRIM_HORIZON,
    LeaseAcquired,
    LeaseConfig,
    LeaseCoordinator,
    LeaseTableError,
    WorkerIdConflictError,
    decode_lease,
)

from .helpers import FAST, PATIENCE, coordinator, events_until, put_items, scan

pytestmark = pytest.mark.anyio

SEQUENCE_0 = "49590338271490256608559692538361571095921575989136588801"
SEQUENCE_1 = "49590338271490256608559692538361571095921575989136588802"


@pytest.fixture
async def stream(client: KinesisClient, stream_name: str) -> AsyncIterator[str]:
    with anyio.fail_after(PATIENCE):
        await client.create_stream(stream_name, 4)
    yield stream_name


async def create_kcl_table(dynamodb: DynamoDBClient, table: str, **schema: Any) -> None:
    params: dict[str, Any] = {
        "TableName": table,
        "KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "leaseKey", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
        **schema,
    }
    with anyio.fail_after(PATIENCE):
        await dynamodb.create_table(params)


def kcl_item(shard: int, checkpoint: str, sub: int, counter: int) -> dict[str, Any]:
    """A lease as a KCL 2.x single-stream application leaves it (its documented schema)."""
    return {
        "leaseKey": {"S": f"shardId-00000000000{shard}"},
        "leaseOwner": {"S": "kcl-host-1:7f3a"},
        "leaseCounter": {"N": str(counter)},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": str(sub)},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
    }


async def test_a_kcl_table_is_resumed_exactly_and_keeps_its_format(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    await create_kcl_table(dynamodb, lease_table_name)
    items = [
        kcl_item(0, SEQUENCE_0, 0, 311),
        kcl_item(1, SEQUENCE_1, 7, 12),  # in the middle of a KPL aggregate
        kcl_item(2, LATEST, 0, 5),
        # Finished, and expired out of the stream's listing: never handed out again. (A
        # SHARD_END on a shard the stream lists as open is refused: see the fault tests.)
        kcl_item(9, "SHARD_END", 0, 40),
    ]
    await put_items(dynamodb, lease_table_name, items)
    async with coordinator(dynamodb, client, lease_table_name, stream, "ours") as ours:
        events = await events_until(ours, lambda seen: len(seen) == 4)
        resumed = {
            e.shard_id: (e.checkpoint, e.sub_sequence, e.previous_owner)
            for e in events
            if isinstance(e, LeaseAcquired)
        }
        assert resumed == {
            "shardId-000000000000": (SEQUENCE_0, 0, "kcl-host-1:7f3a"),
            "shardId-000000000001": (SEQUENCE_1, 7, "kcl-host-1:7f3a"),
            "shardId-000000000002": (LATEST, 0, "kcl-host-1:7f3a"),
            "shardId-000000000003": (TRIM_HORIZON, 0, None),  # a shard without a lease yet
        }
        assert ours.statistics().leases_created == 1
        await ours.checkpoint(stream, "shardId-000000000001", SEQUENCE_1, 9)
    after = {item["leaseKey"]["S"]: item for item in await scan(dynamodb, lease_table_name)}
    for before in items:  # the same attributes, none added: a KCL application reads it back
        assert set(after[before["leaseKey"]["S"]]) == set(before)
    assert after["shardId-000000000009"] == items[3]
    lease = decode_lease(after["shardId-000000000001"])
    assert (lease.checkpoint, lease.sub_sequence, lease.owner) == (SEQUENCE_1, 9, "ours")
    assert lease.owner_switches_since_checkpoint == 0


async def test_a_table_with_another_key_schema_is_refused_and_left_alone(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    await create_kcl_table(
        dynamodb,
        lease_table_name,
        KeySchema=[
            {"AttributeName": "id", "KeyType": "HASH"},
            {"AttributeName": "at", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "at", "AttributeType": "N"},
        ],
    )
    with pytest.raises(LeaseTableError) as raised:
        async with coordinator(dynamodb, client, lease_table_name, stream, "w"):
            pass
    assert raised.value.table == lease_table_name
    assert lease_table_name in str(raised.value)
    assert "id HASH S, at RANGE N" in str(raised.value)
    assert await scan_any(dynamodb, lease_table_name) == []


async def scan_any(dynamodb: DynamoDBClient, table: str) -> list[dict[str, Any]]:
    reply = await dynamodb.call("Scan", {"TableName": table})
    return list(reply["Items"])


async def test_a_missing_table_is_an_error_when_it_may_not_be_created(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    config = LeaseConfig(failover_time=1.0, create_table=False)
    with pytest.raises(LeaseTableError, match="does not exist"):
        async with coordinator(dynamodb, client, lease_table_name, stream, "w", config):
            pass
    with pytest.raises(ResourceNotFoundError):
        await dynamodb.call("DescribeTable", {"TableName": lease_table_name})


async def test_leases_of_another_stream_are_refused_and_left_alone(
    dynamodb: DynamoDBClient,
    client: KinesisClient,
    stream: str,
    stream_name: str,
    lease_table_name: str,
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "w") as first:
        await events_until(first, lambda seen: len(seen) == 4)
    before = await scan(dynamodb, lease_table_name)
    other = f"{stream_name}-other"
    with anyio.fail_after(PATIENCE):
        await client.create_stream(other, 4)
    with pytest.raises(LeaseTableError, match="is for a shard of stream") as raised:
        async with coordinator(dynamodb, client, lease_table_name, other, "w"):
            pass
    assert stream in str(raised.value) and other in str(raised.value)
    assert await scan(dynamodb, lease_table_name) == before


async def test_a_worker_id_used_twice_is_a_typed_error(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    async with coordinator(dynamodb, client, lease_table_name, stream, "twin") as first:
        await events_until(first, lambda seen: len(seen) == 4)
        with pytest.raises(WorkerIdConflictError) as raised:
            async with coordinator(dynamodb, client, lease_table_name, stream, "twin") as second:
                with anyio.fail_after(PATIENCE):
                    while True:
                        await second.next_event()
        assert raised.value.worker_id == "twin"
        assert "worker_id" in str(raised.value)
        assert first.statistics().lost == 0  # the impostor wrote nothing
    owners = {item["leaseOwner"]["S"] for item in await scan(dynamodb, lease_table_name)}
    assert owners == {"twin"}


async def test_several_streams_use_the_kcl_multi_stream_keys(
    dynamodb: DynamoDBClient,
    client: KinesisClient,
    stream: str,
    stream_name: str,
    lease_table_name: str,
) -> None:
    second = f"{stream_name}-b"
    with anyio.fail_after(PATIENCE):
        await client.create_stream(second, 2)
    async with coordinator(dynamodb, client, lease_table_name, [stream, second], "w") as both:
        events = await events_until(both, lambda seen: len(seen) == 6)
        assert {(e.stream, e.shard_id) for e in events} == {
            *((stream, f"shardId-00000000000{n}") for n in range(4)),
            *((second, f"shardId-00000000000{n}") for n in range(2)),
        }
        await both.checkpoint(second, "shardId-000000000001", SEQUENCE_0)
    items = await scan(dynamodb, lease_table_name)
    for item in items:
        account, name, epoch, shard = item["leaseKey"]["S"].split(":")
        assert name in (stream, second) and epoch.isdigit() and account
        assert item["streamName"] == {"S": f"{account}:{name}:{epoch}"}
        assert item["shardId"] == {"S": shard}
        assert "streamArn" not in item
    assert any(item["checkpoint"] == {"S": SEQUENCE_0} for item in items)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"streams": []}, "streams"),
        ({"worker_id": ""}, "worker_id"),
        ({"initial_position": "AT_SEQUENCE_NUMBER"}, "initial_position"),
        ({"streams": ["a", "b"], "multi_stream": False}, "multi_stream"),
    ],
)
def test_bad_coordinator_arguments_fail_before_any_call(
    options: dict[str, Any], named: str
) -> None:
    arguments: dict[str, Any] = {"streams": "s", "worker_id": "w", **options}
    streams = arguments.pop("streams")
    with pytest.raises(ConfigError, match=named):
        LeaseCoordinator(None, None, "table", streams, config=FAST, **arguments)  # type: ignore[arg-type]


async def test_a_kcl_3_table_with_rows_that_are_not_leases_is_resumed_and_they_are_left_alone(
    dynamodb: DynamoDBClient, client: KinesisClient, stream: str, lease_table_name: str
) -> None:
    # The KCL 3.x's table: its GSI from owner to lease key, and rows of other kinds.
    await create_kcl_table(
        dynamodb,
        lease_table_name,
        AttributeDefinitions=[
            {"AttributeName": "leaseKey", "AttributeType": "S"},
            {"AttributeName": "leaseOwner", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "LeaseOwnerToLeaseKeyIndex",
                "KeySchema": [
                    {"AttributeName": "leaseOwner", "KeyType": "HASH"},
                    {"AttributeName": "leaseKey", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )
    leases = [
        {
            **kcl_item(n, SEQUENCE_0, 0, 5),
            "entityType": {"S": "LEASE"},
            "throughputKBps": {"N": "1.5"},
        }
        for n in range(4)
    ]
    others = [  # the KCL 3.5's leader row and a worker's metrics, beside the leases
        {"leaseKey": {"S": "Leader"}, "entityType": {"S": "LEADER"}, "leaseCounter": {"N": "3"}},
        {
            "leaseKey": {"S": "kcl-host-1:7f3a"},
            "entityType": {"S": "WORKER_METRIC_STATS"},
            "throughputKBps": {"N": "12.5"},
        },
    ]
    await put_items(dynamodb, lease_table_name, leases + others)
    async with coordinator(dynamodb, client, lease_table_name, stream, "ours") as ours:
        events = await events_until(ours, lambda seen: len(seen) == 4)
        assert {e.shard_id for e in events} == {f"shardId-00000000000{n}" for n in range(4)}
        assert {(e.checkpoint, e.sub_sequence) for e in events if isinstance(e, LeaseAcquired)} == {
            (SEQUENCE_0, 0)
        }
        assert ours.statistics().leases == 4
    after = {item["leaseKey"]["S"]: item for item in await scan(dynamodb, lease_table_name)}
    assert [after[o["leaseKey"]["S"]] for o in others] == others  # untouched
    for lease in leases:  # the KCL 3.x's own attributes kept through our writes
        item = after[lease["leaseKey"]["S"]]
        assert item["entityType"] == {"S": "LEASE"} and item["throughputKBps"] == {"N": "1.5"}
        assert item["leaseOwner"] == {"S": "ours"}
    query = await dynamodb.call(
        "Query",
        {
            "TableName": lease_table_name,
            "IndexName": "LeaseOwnerToLeaseKeyIndex",
            "KeyConditionExpression": "leaseOwner = :owner",
            "ExpressionAttributeValues": {":owner": {"S": "ours"}},
        },
    )
    assert len(query["Items"]) == 4  # what a KCL 3.x worker finds its leases by
