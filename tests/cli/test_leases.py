"""``kinesis-actors leases``: a lease table written in the KCL's item format (by boto3, from
the KCL's documented schema) listed with owners, checkpoints and lags from a real stream."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from kinesis_actors import LocalDynamoDB, LocalKinesis
from kinesis_actors.cli._main import main
from kinesis_actors.leases import Lease, encode_lease
from tests.boto import create_stream

OTHER = "123456789012:other-stream:1700000000"


def _boto3_dynamodb(local: LocalDynamoDB) -> Any:
    return boto3.client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url=local.endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def _lease_table(local: LocalDynamoDB, name: str, items: list[dict[str, Any]]) -> None:
    ddb = _boto3_dynamodb(local)
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.1})
    for item in items:
        ddb.put_item(TableName=name, Item=item)


def _kcl_item(shard: str, checkpoint: str, **extra: dict[str, Any]) -> dict[str, Any]:
    """An item as the KCL's DynamoDBLeaseSerializer writes it."""
    return {
        "leaseKey": {"S": shard},
        "leaseCounter": {"N": "1"},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": "0"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        **extra,
    }


@pytest.fixture
def leases(
    local_kinesis: LocalKinesis, local_dynamodb: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., int]:
    """``kinesis-actors leases ARGS`` against the local servers (in this process): its status."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    connection = [
        "--endpoint-url",
        local_kinesis.endpoint_url,
        "--dynamodb-endpoint-url",
        local_dynamodb.endpoint_url,
    ]
    return lambda *args: main(["leases", *args, *connection])


@pytest.fixture
def kcl_table(
    local_kinesis: LocalKinesis,
    local_dynamodb: LocalDynamoDB,
    stream_name: str,
    lease_table_name: str,
) -> dict[str, str]:
    """A 3-shard stream with records in shards 0 and 1, and its lease table as a KCL
    application left it, plus a multi-stream lease of another stream and a broken item."""
    kinesis = create_stream(local_kinesis, stream_name, 3)
    shards = [s["ShardId"] for s in kinesis.list_shards(StreamName=stream_name)["Shards"]]
    last = ""
    for index in range(3):  # all in the first shard (hash key 0)
        put = kinesis.put_record(
            StreamName=stream_name, Data=b"%d" % index, PartitionKey="k", ExplicitHashKey="0"
        )
        last = put["SequenceNumber"]
        assert put["ShardId"] == shards[0]
    kinesis.put_record(
        StreamName=stream_name, Data=b"x", PartitionKey="k", ExplicitHashKey=str(2**127)
    )
    _lease_table(
        local_dynamodb,
        lease_table_name,
        [
            _kcl_item(
                shards[0],
                last,
                leaseOwner={"S": "worker-a"},
                leaseCounter={"N": "41"},
                ownerSwitchesSinceCheckpoint={"N": "2"},
            ),
            _kcl_item(shards[1], "TRIM_HORIZON", leaseOwner={"S": "worker-b"}),
            _kcl_item(
                shards[2],
                "SHARD_END",
                parentShardId={"SS": ["shardId-000000000098", "shardId-000000000099"]},
            ),
            _kcl_item("shardId-000000000007", "AT_TIMESTAMP", leaseOwner={"S": "worker-b"}),
            _kcl_item(
                f"{OTHER}:shardId-000000000000",
                "TRIM_HORIZON",
                streamName={"S": OTHER},
                shardId={"S": "shardId-000000000000"},
                leaseOwner={"S": "worker-z"},
            ),
            _kcl_item("shardId-000000000009", "LATEST", leaseCounter={"S": "not a number"}),
        ],
    )
    return {"stream": stream_name, "table": lease_table_name, "shard0": shards[0], "last": last}


def test_lists_a_kcl_table_with_owners_checkpoints_and_lags(
    leases: Callable[..., int],
    kcl_table: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert leases("--table", kcl_table["table"], "--stream", kcl_table["stream"], "--json") == 0
    rows = {row["lease_key"]: row for row in json.loads(capsys.readouterr().out)}
    # The other stream's multi-stream lease is not this stream's; the broken item is listed.
    assert len(rows) == 5
    assert not any(key.startswith(OTHER) for key in rows)
    first = rows[kcl_table["shard0"]]
    assert first["stream"] == kcl_table["stream"]
    assert (first["owner"], first["counter"], first["owner_switches"]) == ("worker-a", 41, 2)
    assert (first["checkpoint"], first["sub_sequence"]) == (kcl_table["last"], 0)
    assert first["lag_millis"] == 0  # checkpointed at the shard's last record: caught up
    second = rows["shardId-000000000001"]
    assert second["checkpoint"] == "TRIM_HORIZON"
    assert isinstance(second["lag_millis"], int)  # measured from the oldest record
    assert second["lag_error"] is None
    finished = rows["shardId-000000000002"]
    assert finished["owner"] is None
    assert finished["parents"] == ["shardId-000000000098", "shardId-000000000099"]
    assert finished["lag_millis"] == 0
    timestamp = rows["shardId-000000000007"]
    assert (timestamp["lag_millis"], timestamp["lag_error"]) == (None, None)
    broken = rows["shardId-000000000009"]
    assert "leaseCounter" in broken["item_error"]


def test_the_human_listing_counts_the_leases_per_owner_across_streams(
    leases: Callable[..., int],
    kcl_table: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert leases("--table", kcl_table["table"], "--no-lag") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "stream",
        "shard",
        "owner",
        "counter",
        "checkpoint",
        "sub",
        "parents",
        "switches",
        "lag",
    ]
    assert lines[-1] == (
        f"6 leases in {kcl_table['table']} ((free): 1, worker-a: 1, worker-b: 2, worker-z: 1)"
    )
    other = next(line for line in lines if line.startswith("other-stream"))
    assert other.split()[:5] == [
        "other-stream",
        "shardId-000000000000",
        "worker-z",
        "1",
        "TRIM_HORIZON",
    ]
    # Without --stream, a KCL single-stream lease does not say its stream.
    first = next(line for line in lines if kcl_table["shard0"] in line)
    assert first.split()[:3] == ["?", kcl_table["shard0"], "worker-a"]
    assert "unreadable" in next(line for line in lines if "shardId-000000000009" in line)


def test_the_items_this_library_writes_list_the_same_way(
    leases: Callable[..., int],
    local_dynamodb: LocalDynamoDB,
    lease_table_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lease = Lease(
        key="shardId-000000000004",
        shard_id="shardId-000000000004",
        counter=3,
        owner="worker-c",
        checkpoint="49590338271490256608559692538361571095921575989136588898",
        sub_sequence=2,
        parent_shard_ids=("shardId-000000000001",),
    )
    _lease_table(local_dynamodb, lease_table_name, [encode_lease(lease)])
    assert leases("--table", lease_table_name, "--json", "--no-lag") == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["owner"] == "worker-c"
    assert (row["counter"], row["checkpoint"], row["sub_sequence"]) == (
        3,
        lease.checkpoint,
        2,
    )
    assert row["parents"] == ["shardId-000000000001"]


def test_a_missing_table_or_one_that_is_no_lease_table_is_one_line(
    leases: Callable[..., int],
    local_dynamodb: LocalDynamoDB,
    lease_table_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert leases("--table", lease_table_name) == 2
    err = capsys.readouterr().err
    assert f"table {lease_table_name!r} not found" in err
    assert "--dynamodb-endpoint-url" in err
    ddb = _boto3_dynamodb(local_dynamodb)
    ddb.create_table(
        TableName=lease_table_name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.get_waiter("table_exists").wait(TableName=lease_table_name, WaiterConfig={"Delay": 0.1})
    assert leases("--table", lease_table_name) == 2
    err = capsys.readouterr().err
    assert "is not a lease table" in err
    assert err.count("\n") == 1
