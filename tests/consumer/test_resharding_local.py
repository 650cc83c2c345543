"""Resharding while consuming: a split and a merge, keyed records, per-key order kept."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis
from kinesis_actors.consumer import Consumer, ConsumerConfig, RecordBatch, StartingPosition

from .helpers import Row, rows

pytestmark = pytest.mark.anyio

KEYS = [f"key-{k}" for k in range(30)]
ROUNDS = 15
SPLIT_AFTER = 4
MERGE_AFTER = 9


@pytest.fixture(params=["polling", "efo"])
async def reading(
    request: pytest.FixtureRequest, local_kinesis: LocalKinesis
) -> AsyncIterator[tuple[Literal["polling", "efo"], KinesisClient]]:
    """(read mode, client): polling over plain HTTP, EFO over the TLS port (HTTP/2)."""
    mode: Literal["polling", "efo"] = "efo" if request.param == "efo" else "polling"
    async with local_kinesis.client(tls=mode == "efo") as kinesis:
        yield mode, kinesis


async def produce_while_resharding(client: KinesisClient, stream: str) -> None:
    """One PutRecords per round with every key; split shard 0, later merge shards 1 and 2."""
    for round_ in range(ROUNDS):
        result = await client.call(
            "PutRecords",
            {
                "StreamName": stream,
                "Records": [
                    {"Data": f"{key}:{round_}".encode(), "PartitionKey": key} for key in KEYS
                ],
            },
        )
        assert result["FailedRecordCount"] == 0
        if round_ == SPLIT_AFTER:
            listed = await client.call("ListShards", {"StreamName": stream})
            first = listed["Shards"][0]["HashKeyRange"]
            middle = (int(first["StartingHashKey"]) + int(first["EndingHashKey"])) // 2
            await client.call(
                "SplitShard",
                {
                    "StreamName": stream,
                    "ShardToSplit": "shardId-000000000000",
                    "NewStartingHashKey": str(middle),
                },
            )
            await client.wait_for_stream(stream)
        if round_ == MERGE_AFTER:
            await client.call(
                "MergeShards",
                {
                    "StreamName": stream,
                    "ShardToMerge": "shardId-000000000001",
                    "AdjacentShardToMerge": "shardId-000000000002",
                },
            )
            await client.wait_for_stream(stream)


def check_per_key_order(seen: list[Row]) -> None:
    rounds: dict[str, list[int]] = {}
    for row in seen:
        key, round_ = row.data.decode().split(":")
        assert row.partition_key == key
        rounds.setdefault(key, []).append(int(round_))
    assert set(rounds) == set(KEYS)
    for key, numbers in rounds.items():
        assert numbers == list(range(ROUNDS)), f"{key}: {numbers}"


@pytest.mark.parametrize(
    ("mode", "backlog"), [("iterate", False), ("iterate", True), ("run", True)]
)
async def test_split_and_merge_while_consuming_keep_per_key_order(
    reading: tuple[Literal["polling", "efo"], KinesisClient],
    stream_name: str,
    mode: str,
    backlog: bool,
) -> None:
    """With ``backlog``, everything (split and merge included) is written before reading
    starts, so parents and children all have data waiting: only the parent gate keeps a key's
    later records (in a child) from overtaking its earlier ones (in a parent). Small reads make
    many batches per shard, so an ungated child would interleave with its parent."""
    read_mode, plain_client = reading
    await plain_client.create_stream(stream_name, 3)
    if backlog:
        await produce_while_resharding(plain_client, stream_name)
    config = ConsumerConfig(
        mode=read_mode,
        start=StartingPosition.trim_horizon(),
        idle_backoff_initial=0.05,
        idle_backoff_max=0.1,
        shard_discovery_interval=0.5,
        max_records_per_call=15,
    )
    total = len(KEYS) * ROUNDS
    seen: list[Row] = []
    async with Consumer(plain_client, stream_name, config) as consumer:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                if not backlog:
                    tg.start_soon(produce_while_resharding, plain_client, stream_name)
                if mode == "iterate":
                    async for batch in consumer:
                        seen.extend(rows(batch))
                        consumer.commit(batch)
                        if len(seen) >= total:
                            break
                else:

                    async def handler(batch: RecordBatch) -> None:
                        seen.extend(rows(batch))
                        if len(seen) >= total:
                            consumer.stop()

                    await consumer.run(handler)
        positions = consumer.positions()
    check_per_key_order(seen)
    shards = positions["streams"][stream_name]
    # The split parent and both merge parents were read to the end and committed.
    for parent in ("shardId-000000000000", "shardId-000000000001", "shardId-000000000002"):
        assert shards[parent] == {"finished": True}
    assert set(shards) >= {"shardId-000000000003", "shardId-000000000004", "shardId-000000000005"}


async def test_a_restore_across_a_split_and_a_merge_repeats_and_skips_nothing(
    reading: tuple[Literal["polling", "efo"], KinesisClient], stream_name: str
) -> None:
    """FLINK-37627: positions taken mid-way through resharded data, with parents
    finished and children part-read, resume without re-reading a parent or skipping a child."""
    read_mode, plain_client = reading
    await plain_client.create_stream(stream_name, 3)
    await produce_while_resharding(plain_client, stream_name)
    total = len(KEYS) * ROUNDS
    options: dict[str, Any] = {
        "mode": read_mode,
        "idle_backoff_initial": 0.05,
        "idle_backoff_max": 0.1,
        "shard_discovery_interval": 0.5,
        "max_records_per_call": 15,
    }
    first = ConsumerConfig(start=StartingPosition.trim_horizon(), **options)
    first_run: list[Row] = []
    async with Consumer(plain_client, stream_name, first) as consumer:
        with anyio.fail_after(60):
            async for batch in consumer:
                first_run.extend(rows(batch))
                consumer.commit(batch)
                if len(first_run) >= total * 2 // 3:
                    break
        saved = consumer.positions()
    shards = saved["streams"][stream_name]
    assert {"finished": True} in shards.values()  # some parent is done...
    assert any("sequence_number" in entry for entry in shards.values())  # ...others part-read
    second = ConsumerConfig(positions=saved, **options)
    async with Consumer(plain_client, stream_name, second) as consumer:
        with anyio.fail_after(60):
            second_run: list[Row] = []
            async for batch in consumer:
                second_run.extend(rows(batch))
                if len(first_run) + len(second_run) >= total:
                    break
    check_per_key_order(first_run + second_run)
