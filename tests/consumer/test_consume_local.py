"""The consumer against the local Kinesis server: volume, aggregation, restarts, workers."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Literal

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition
from kinesis_actors.consumer._shards import owner
from kinesis_actors.records import RECORD_SCHEMA

from .helpers import (
    Row,
    aggregate_per_shard,
    assert_in_shard_order,
    by_data,
    consume,
    put_aggregated,
    put_plain,
    rows,
    shard_map,
)

pytestmark = pytest.mark.anyio

PLAIN = 10_000
AGGREGATED = 10_000
PER_AGGREGATE = 50
FAST = ConsumerConfig(
    start=StartingPosition.trim_horizon(),
    idle_backoff_initial=0.05,
    idle_backoff_max=0.2,
    shard_discovery_interval=1.0,
)


@pytest.fixture
async def plain_client(local_kinesis: LocalKinesis) -> AsyncIterator[KinesisClient]:
    """Plain HTTP/1.1: the consumer's unary calls, without TLS cost on a 2-core machine."""
    async with local_kinesis.client(tls=False) as kinesis:
        yield kinesis


@pytest.fixture(params=["polling", "efo"])
async def mode_client(
    request: pytest.FixtureRequest, local_kinesis: LocalKinesis
) -> AsyncIterator[tuple[Literal["polling", "efo"], KinesisClient]]:
    """(mode, client): polling over plain HTTP, EFO over the TLS port (HTTP/2 subscriptions)."""
    mode: Literal["polling", "efo"] = "efo" if request.param == "efo" else "polling"
    async with local_kinesis.client(tls=mode == "efo") as kinesis:
        yield mode, kinesis


@pytest.fixture(scope="module")
def mixed_stream(local_kinesis: LocalKinesis) -> Iterator[tuple[str, int]]:
    """4 shards: 10,000 plain records, then 10,000 user records in 200 KPL aggregates.

    Written once for the module (kinesis-mock takes ~10 s for 10,000 PutRecords entries) and
    read by the tests on both backends; reading never changes a stream. Yields the stream
    name and the number of aggregates.
    """
    name = f"mixed-{uuid.uuid4().hex[:8]}"
    written: list[int] = []

    async def populate() -> None:
        async with local_kinesis.client(tls=False) as client:
            await client.create_stream(name, 4)
            await put_plain(client, name, ((b"p%05d" % i, f"key-{i}") for i in range(PLAIN)))
            shards = await shard_map(client, name)
            aggregates = aggregate_per_shard(
                ((b"a%05d" % i, f"agg-{i}") for i in range(AGGREGATED)), shards, PER_AGGREGATE
            )
            await put_aggregated(client, name, aggregates)
            written.append(len(aggregates))

    anyio.run(populate)
    yield name, written[0]


async def test_20k_plain_and_aggregated_records_exactly_once_in_order(
    mode_client: tuple[Literal["polling", "efo"], KinesisClient], mixed_stream: tuple[str, int]
) -> None:
    mode, client = mode_client
    stream, aggregates = mixed_stream
    config = dataclasses.replace(FAST, mode=mode)
    async with Consumer(client, stream, config) as consumer:
        with anyio.fail_after(60):
            seen: list[Row] = []
            async for batch in consumer:
                assert batch.arrow.schema == RECORD_SCHEMA
                assert batch.stream == stream
                assert len(batch) == batch.arrow.num_rows > 0
                assert batch.millis_behind_latest is not None
                last = rows(batch)[-1]
                assert (last.sequence_number, last.sub_sequence_number) == batch.last_position
                seen.extend(rows(batch))
                consumer.commit(batch)
                if len(seen) >= PLAIN + AGGREGATED:
                    break
        metrics = consumer.statistics()
    assert len(seen) == PLAIN + AGGREGATED
    counts = by_data(seen)
    assert set(counts.values()) == {1}
    assert set(counts) == {b"p%05d" % i for i in range(PLAIN)} | {
        b"a%05d" % i for i in range(AGGREGATED)
    }
    assert_in_shard_order(seen)
    assert {row.shard_id for row in seen} == {f"shardId-{i:012d}" for i in range(4)}
    # Plain records have sub-sequence 0; an aggregate's user records 0..n-1 under one number.
    subs: dict[str, list[int]] = {}
    for row in seen:
        if row.data.startswith(b"p"):
            assert row.sub_sequence_number == 0
        else:
            subs.setdefault(row.sequence_number, []).append(row.sub_sequence_number)
    assert len(subs) == aggregates
    for numbers in subs.values():
        assert numbers == list(range(len(numbers)))
    shards = metrics.shards.values()
    assert sum(shard.user_records for shard in shards) == PLAIN + AGGREGATED
    assert sum(shard.records for shard in shards) == PLAIN + len(subs)
    assert sum(shard.aggregated_records for shard in shards) == len(subs)


async def test_restart_in_the_middle_of_an_aggregate_resumes_exactly(
    mode_client: tuple[Literal["polling", "efo"], KinesisClient], stream_name: str
) -> None:
    mode, plain_client = mode_client
    await plain_client.create_stream(stream_name, 1)
    shards = await shard_map(plain_client, stream_name)
    await put_plain(plain_client, stream_name, [(b"before-%d" % i, "k") for i in range(5)])
    aggregates = aggregate_per_shard(((b"agg-%02d" % i, f"k{i}") for i in range(30)), shards, 10)
    await put_aggregated(plain_client, stream_name, aggregates)
    await put_plain(plain_client, stream_name, [(b"after-%d" % i, "k") for i in range(5)])
    everything = 5 + 30 + 5

    async with Consumer(
        plain_client, stream_name, dataclasses.replace(FAST, mode=mode)
    ) as consumer:
        with anyio.fail_after(30):
            batch = await consumer.__anext__()
        assert len(batch) == everything  # one GetRecords answer, or one EFO event
        # Commit up to the 4th user record of the second aggregate (row 5 + 10 + 3).
        cut = 5 + 10 + 4
        consumer.commit(batch.slice(0, cut))
        first_run = rows(batch)[:cut]
        assert first_run[-1].sub_sequence_number == 3
        saved = consumer.positions()

    assert saved["version"] == 1
    entry = saved["streams"][stream_name]["shardId-000000000000"]
    assert entry["sub_sequence_number"] == 3
    resumed = ConsumerConfig(
        mode=mode, positions=saved, idle_backoff_initial=0.05, idle_backoff_max=0.2
    )
    async with Consumer(plain_client, stream_name, resumed) as consumer:
        with anyio.fail_after(30):
            second_run = await consume(consumer, everything - cut)
    union = first_run + second_run
    assert [row.data for row in union] == [row.data for row in rows(batch)]
    assert set(by_data(union).values()) == {1}
    assert second_run[0].sub_sequence_number == 4


async def test_two_workers_split_the_shards_without_overlap_or_gap(
    mode_client: tuple[Literal["polling", "efo"], KinesisClient], stream_name: str
) -> None:
    mode, plain_client = mode_client
    # Assignment hashes the stream's name, so a random name leaves one worker without a shard
    # in 1 run of 32; pick a name whose split gives each worker some shards.
    stream_name = next(
        name
        for name in (f"{stream_name}-{attempt}" for attempt in range(100))
        if {owner(name, f"shardId-{i:012d}", 2) for i in range(6)} == {0, 1}
    )
    await plain_client.create_stream(stream_name, 6)
    total = 600
    await put_plain(plain_client, stream_name, [(b"r%04d" % i, f"k{i}") for i in range(total)])
    per_worker: list[list[Row]] = [[], []]
    shard_sets: list[set[str]] = [set(), set()]
    all_seen = anyio.Event()

    async def worker(index: int) -> None:
        config = ConsumerConfig(
            mode=mode,
            start=StartingPosition.trim_horizon(),
            worker_index=index,
            worker_count=2,
            idle_backoff_initial=0.05,
            idle_backoff_max=0.2,
        )
        async with (
            Consumer(plain_client, stream_name, config) as consumer,
            anyio.create_task_group() as tg,
        ):

            async def stop_when_all_seen() -> None:
                await all_seen.wait()
                consumer.stop()

            tg.start_soon(stop_when_all_seen)
            async for batch in consumer:
                per_worker[index].extend(rows(batch))
                if sum(len(seen) for seen in per_worker) >= total:
                    all_seen.set()
            shard_sets[index] = set(consumer.statistics().shards)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker, 0)
            tg.start_soon(worker, 1)
    assert shard_sets[0].isdisjoint(shard_sets[1])
    assert shard_sets[0] | shard_sets[1] == {(stream_name, f"shardId-{i:012d}") for i in range(6)}
    for index in (0, 1):
        assert shard_sets[index] == {
            (stream_name, f"shardId-{i:012d}")
            for i in range(6)
            if owner(stream_name, f"shardId-{i:012d}", 2) == index
        }
    union = per_worker[0] + per_worker[1]
    assert set(by_data(union).values()) == {1}
    assert len(union) == total
    for index in (0, 1):
        assert {(stream_name, row.shard_id) for row in per_worker[index]} <= shard_sets[index]


async def test_several_streams_in_one_consumer(
    mode_client: tuple[Literal["polling", "efo"], KinesisClient],
) -> None:
    mode, plain_client = mode_client
    names = [f"multi-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        await plain_client.create_stream(name, 2)
        await put_plain(
            plain_client, name, [(name.encode() + b"-%d" % i, str(i)) for i in range(50)]
        )
    async with Consumer(plain_client, names, dataclasses.replace(FAST, mode=mode)) as consumer:
        with anyio.fail_after(30):
            seen: list[tuple[str, bytes]] = []
            async for batch in consumer:
                seen.extend((batch.stream, data) for data in batch.arrow.column("data").to_pylist())
                if len(seen) >= 100:
                    break
        saved = consumer.positions()
    assert sorted(seen) == sorted(
        (name, name.encode() + b"-%d" % i) for name in names for i in range(50)
    )
    assert set(saved["streams"]) == set(names)
