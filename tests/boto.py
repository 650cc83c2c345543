"""boto3 against the local server: the independent reader and writer the tests check us with."""

from __future__ import annotations

from typing import Any

import boto3

from kinesis_actors import LocalKinesis


def boto3_kinesis(local: LocalKinesis) -> Any:
    """A boto3 Kinesis client on the local server's plain port."""
    return boto3.client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url=local.endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def create_stream(local: LocalKinesis, stream: str, shards: int) -> Any:
    """Create ``stream`` and wait until it is ACTIVE (blocking); returns the boto3 client."""
    kinesis = boto3_kinesis(local)
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(
        StreamName=stream, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )
    return kinesis


def read_back(local: LocalKinesis, stream: str) -> dict[str, list[dict[str, Any]]]:
    """Every raw Kinesis record of every shard, in shard order, with boto3 (blocking)."""
    kinesis = boto3_kinesis(local)
    by_shard: dict[str, list[dict[str, Any]]] = {}
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        shard_id = shard["ShardId"]
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records: list[dict[str, Any]] = []
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            records.extend(page["Records"])
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                break
            iterator = page.get("NextShardIterator")
        by_shard[shard_id] = records
    return by_shard
