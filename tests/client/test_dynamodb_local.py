"""The DynamoDB client against the real local DynamoDB (dynalite), and through the fault proxy
for what that server never does (throttle, drop a connection, garble a reply)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from kinesis_actors import ClientConfig, DynamoDBClient, LocalDynamoDB, errors
from kinesis_actors.client import RetryPolicy, RetrySettings
from tests.faults import Cut, FaultProxy, Reply, Request, Rewrite

pytestmark = pytest.mark.anyio

FAST = RetrySettings(max_retries=3, base=0.001, max=0.005)

LEASE_TABLE = {
    "KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}],
    "AttributeDefinitions": [{"AttributeName": "leaseKey", "AttributeType": "S"}],
    "BillingMode": "PAY_PER_REQUEST",
}


def _table(name: str) -> dict[str, Any]:
    return {"TableName": name, **LEASE_TABLE}


def _lease(key: str, counter: int = 1, owner: str = "worker-a") -> dict[str, Any]:
    return {
        "leaseKey": {"S": key},
        "leaseOwner": {"S": owner},
        "leaseCounter": {"N": str(counter)},
        "checkpoint": {"S": "TRIM_HORIZON"},
        "checkpointSubSequenceNumber": {"N": "0"},
    }


def _take(table: str, key: str, expected: int, owner: str) -> dict[str, Any]:
    """The KCL's way of taking a lease: a write conditional on the counter it last saw."""
    return {
        "TableName": table,
        "Key": {"leaseKey": {"S": key}},
        "UpdateExpression": "SET leaseOwner = :owner, leaseCounter = leaseCounter + :one",
        "ConditionExpression": "leaseCounter = :expected",
        "ExpressionAttributeValues": {
            ":owner": {"S": owner},
            ":one": {"N": "1"},
            ":expected": {"N": str(expected)},
        },
        "ReturnValues": "ALL_NEW",
    }


async def test_create_then_describe_list_and_delete_a_table(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    with anyio.fail_after(10):
        table = await dynamodb.create_table(_table(lease_table_name))
    assert table["TableStatus"] == "ACTIVE"
    assert table["KeySchema"] == LEASE_TABLE["KeySchema"]
    assert lease_table_name in (await dynamodb.call("ListTables", {}))["TableNames"]
    with pytest.raises(errors.ResourceInUseError):
        await dynamodb.create_table(_table(lease_table_name))
    with anyio.fail_after(10):
        await dynamodb.delete_table(lease_table_name)
    with pytest.raises(errors.ResourceNotFoundError):
        await dynamodb.describe_table(lease_table_name)


async def test_conditional_writes_take_a_lease_once_and_fail_typed_after(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    await dynamodb.create_table(_table(lease_table_name))
    await dynamodb.call("PutItem", {"TableName": lease_table_name, "Item": _lease("shard-0")})
    taken = await dynamodb.call("UpdateItem", _take(lease_table_name, "shard-0", 1, "worker-b"))
    assert taken["Attributes"]["leaseCounter"] == {"N": "2"}
    assert taken["Attributes"]["leaseOwner"] == {"S": "worker-b"}
    before = dynamodb.statistics().attempts
    with pytest.raises(errors.ConditionalCheckFailedError) as caught:
        await dynamodb.call("UpdateItem", _take(lease_table_name, "shard-0", 1, "worker-c"))
    assert dynamodb.statistics().attempts == before + 1  # an answer, not retried
    assert caught.value.retried is False
    stored = await dynamodb.call(
        "GetItem",
        {
            "TableName": lease_table_name,
            "Key": {"leaseKey": {"S": "shard-0"}},
            "ConsistentRead": True,
        },
    )
    assert stored["Item"]["leaseOwner"] == {"S": "worker-b"}
    with pytest.raises(errors.ConditionalCheckFailedError):
        await dynamodb.call(
            "PutItem",
            {
                "TableName": lease_table_name,
                "Item": _lease("shard-0"),
                "ConditionExpression": "attribute_not_exists(leaseKey)",
            },
        )


async def test_scan_reads_every_item_across_pages(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    await dynamodb.create_table(_table(lease_table_name))
    keys = {f"shardId-{index:012d}" for index in range(23)}
    for key in keys:
        await dynamodb.call("PutItem", {"TableName": lease_table_name, "Item": _lease(key)})
    calls = dynamodb.statistics().calls
    items = [item async for item in dynamodb.scan({"TableName": lease_table_name, "Limit": 5})]
    assert {item["leaseKey"]["S"] for item in items} == keys
    assert len(items) == len(keys)
    assert dynamodb.statistics().calls - calls >= 5  # 23 items in pages of 5


async def test_a_missing_table_and_a_bad_request_are_typed(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    with pytest.raises(errors.ResourceNotFoundError) as missing:
        await dynamodb.call("GetItem", {"TableName": lease_table_name, "Key": _lease("x")})
    assert missing.value.operation == "GetItem"
    await dynamodb.create_table(_table(lease_table_name))
    with pytest.raises(errors.ValidationError):  # the server's check: not the table's key
        await dynamodb.call(
            "GetItem", {"TableName": lease_table_name, "Key": {"wrong": {"S": "x"}}}
        )


@pytest.fixture
def dynamodb_proxy(local_dynamodb: LocalDynamoDB) -> Iterator[FaultProxy]:
    with FaultProxy(local_dynamodb.port) as running:
        yield running


def _through(proxy: FaultProxy, local: LocalDynamoDB) -> DynamoDBClient:
    return DynamoDBClient(
        region=local.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local.credentials,
        config=ClientConfig(retry=RetryPolicy(default=FAST, overrides={"PutItem": FAST})),
    )


def _first(n: int, fault: Cut | Reply | Rewrite) -> Any:
    seen = 0

    def decide(request: Request) -> Cut | Reply | Rewrite | None:
        nonlocal seen
        if request.target != "PutItem":
            return None
        seen += 1
        return fault if seen <= n else None

    return decide


@pytest.mark.parametrize(
    "code",
    ["ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"],
)
async def test_throttling_is_retried_then_raised_typed(
    dynamodb_proxy: FaultProxy, local_dynamodb: LocalDynamoDB, lease_table_name: str, code: str
) -> None:
    async with _through(dynamodb_proxy, local_dynamodb) as ddb:
        await ddb.create_table(_table(lease_table_name))
        dynamodb_proxy.decide = _first(2, Reply.error(code))
        await ddb.call("PutItem", {"TableName": lease_table_name, "Item": _lease("a")})
        assert ddb.statistics().throttled == 2
        dynamodb_proxy.decide = _first(99, Reply.error(code))
        with pytest.raises(errors.ThrottlingError) as caught:
            await ddb.call("PutItem", {"TableName": lease_table_name, "Item": _lease("b")})
    assert caught.value.code == code
    assert ddb.statistics().retries == 2 + FAST.max_retries


async def test_a_condition_failing_on_a_retry_says_the_first_write_may_have_landed(
    dynamodb_proxy: FaultProxy, local_dynamodb: LocalDynamoDB, lease_table_name: str
) -> None:
    """The first attempt is applied and its reply garbled on the way back: the retry meets
    the item it wrote itself."""
    async with _through(dynamodb_proxy, local_dynamodb) as ddb:
        await ddb.create_table(_table(lease_table_name))
        dynamodb_proxy.decide = _first(1, Rewrite(lambda body: body[:1]))
        with pytest.raises(errors.ConditionalCheckFailedError) as caught:
            await ddb.call(
                "PutItem",
                {
                    "TableName": lease_table_name,
                    "Item": _lease("a"),
                    "ConditionExpression": "attribute_not_exists(leaseKey)",
                },
            )
        assert caught.value.retried is True
        assert ddb.statistics().malformed_replies == 1
        stored = await ddb.call(
            "GetItem", {"TableName": lease_table_name, "Key": {"leaseKey": {"S": "a"}}}
        )
    assert stored["Item"]["leaseOwner"] == {"S": "worker-a"}


async def test_a_dropped_connection_is_retried(
    dynamodb_proxy: FaultProxy, local_dynamodb: LocalDynamoDB, lease_table_name: str
) -> None:
    async with _through(dynamodb_proxy, local_dynamodb) as ddb:
        await ddb.create_table(_table(lease_table_name))
        dynamodb_proxy.decide = _first(2, Cut())
        await ddb.call("PutItem", {"TableName": lease_table_name, "Item": _lease("a")})
        assert ddb.statistics().transport_errors == 2
    assert dynamodb_proxy.stats.faults == {"cut": 2}
