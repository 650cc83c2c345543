"""Writing test data (plain and KPL-aggregated by aws-kinesis-agg) and reading it back."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio

# aws_kinesis_agg.aggregator is imported first: it puts config_pb2 on sys.path for messages_pb2.
import aws_kinesis_agg.aggregator as agg_aggregator

from kinesis_actors import KinesisClient
from kinesis_actors.consumer import Consumer, RecordBatch
from kinesis_actors.records import ShardMap, hash_key

PUT_BATCH = 500


@dataclass(frozen=True)
class Row:
    """One consumed user record, as the tests compare them."""

    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    data: bytes

    @property
    def order(self) -> tuple[int, int]:
        return int(self.sequence_number), self.sub_sequence_number


def rows(batch: RecordBatch) -> list[Row]:
    table = batch.arrow.to_pydict()
    return [
        Row(shard, seq, sub, pk, data)
        for shard, seq, sub, pk, data in zip(
            table["shard_id"],
            table["sequence_number"],
            table["sub_sequence_number"],
            table["partition_key"],
            table["data"],
            strict=True,
        )
    ]


async def shard_map(client: KinesisClient, stream: str) -> ShardMap:
    """The open shards of ``stream`` by hash range."""
    listed = await client.call("ListShards", {"StreamName": stream})
    return ShardMap.from_shards(listed["Shards"])


async def put_plain(
    client: KinesisClient, stream: str, records: Iterable[tuple[bytes, str]], concurrency: int = 4
) -> None:
    """PutRecords in batches of 500, a few calls at a time; fails on any failed record."""
    pending = list(records)
    chunks = [pending[i : i + PUT_BATCH] for i in range(0, len(pending), PUT_BATCH)]
    limiter = anyio.CapacityLimiter(concurrency)

    async def put(chunk: list[tuple[bytes, str]]) -> None:
        async with limiter:
            result = await client.call(
                "PutRecords",
                {
                    "StreamName": stream,
                    "Records": [{"Data": data, "PartitionKey": key} for data, key in chunk],
                },
            )
        assert result["FailedRecordCount"] == 0

    async with anyio.create_task_group() as tg:
        for chunk in chunks:
            tg.start_soon(put, chunk)


def aggregate_per_shard(
    records: Iterable[tuple[bytes, str]], shards: ShardMap, per_aggregate: int
) -> list[tuple[bytes, str, str]]:
    """Aggregate with aws-kinesis-agg, only records predicted for one shard together.

    Returns (data, partition_key, explicit_hash_key) for PutRecords; the explicit hash key is
    the first user record's hash, so the aggregate lands on that record's shard.
    """
    by_shard: dict[str, list[tuple[bytes, str]]] = {}
    for data, key in records:
        by_shard.setdefault(str(shards.shard_for(key)), []).append((data, key))
    out: list[tuple[bytes, str, str]] = []
    for group in by_shard.values():
        for start in range(0, len(group), per_aggregate):
            aggregator = agg_aggregator.RecordAggregator()
            chunk = group[start : start + per_aggregate]
            for data, key in chunk:
                assert aggregator.add_user_record(key, data) is None
            record = aggregator.clear_and_get()
            pk, _, blob = record.get_contents()
            out.append((blob, pk, str(hash_key(chunk[0][1]))))
    return out


async def put_aggregated(
    client: KinesisClient, stream: str, aggregates: list[tuple[bytes, str, str]]
) -> None:
    for start in range(0, len(aggregates), PUT_BATCH):
        chunk = aggregates[start : start + PUT_BATCH]
        result = await client.call(
            "PutRecords",
            {
                "StreamName": stream,
                "Records": [
                    {"Data": blob, "PartitionKey": pk, "ExplicitHashKey": ehk}
                    for blob, pk, ehk in chunk
                ],
            },
        )
        assert result["FailedRecordCount"] == 0


async def consume(consumer: Consumer, count: int, *, commit: bool = True) -> list[Row]:
    """Iterate until ``count`` user records arrived (the caller bounds it in time)."""
    seen: list[Row] = []
    async for batch in consumer:
        seen.extend(rows(batch))
        if commit:
            consumer.commit(batch)
        if len(seen) >= count:
            break
    return seen


def assert_in_shard_order(seen: list[Row]) -> None:
    last: dict[str, tuple[int, int]] = {}
    for row in seen:
        previous = last.get(row.shard_id)
        assert previous is None or row.order > previous, f"out of order in {row.shard_id}"
        last[row.shard_id] = row.order


def by_data(seen: list[Row]) -> dict[bytes, int]:
    counts: dict[bytes, int] = {}
    for row in seen:
        counts[row.data] = counts.get(row.data, 0) + 1
    return counts


def describe(value: Any) -> str:
    return repr(value)[:200]
