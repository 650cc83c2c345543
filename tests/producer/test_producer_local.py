"""The Producer against the local Kinesis server, read back by independent code.

The read-back uses boto3 GetRecords and the ``aws-kinesis-agg`` deaggregator, not this
library's consumer, so a bug shared by our producer and our consumer cannot hide itself.
"""

from __future__ import annotations

import base64
import random
from collections import defaultdict
from typing import Any

import anyio

# aws_kinesis_agg.aggregator is imported first: it puts config_pb2 on sys.path for messages_pb2.
import aws_kinesis_agg.aggregator  # noqa: F401
import aws_kinesis_agg.deaggregator as agg_deaggregator
import pytest

from kinesis_actors import (
    KinesisClient,
    LocalKinesis,
    Producer,
    ProducerConfig,
    PutResult,
    errors,
)
from kinesis_actors.records import MAGIC, ShardMap
from tests.boto import read_back

pytestmark = pytest.mark.anyio


def payload(key: str, index: int, size: int) -> bytes:
    head = f"{key}|{index}|".encode()
    return head + b"." * max(0, size - len(head))


def mixed_size(rng: random.Random) -> int:
    """Mostly small records, some kilobytes, a few larger than an aggregate (sent alone)."""
    roll = rng.random()
    if roll < 0.94:
        return rng.randint(10, 200)
    if roll < 0.9995:
        return rng.randint(1_000, 4_000)
    return rng.randint(52_000, 60_000)


# One backend: this run measures the producer against the server, and costs ~30 s; every
# other test here runs on both backends.
@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_fifty_thousand_records_arrive_once_in_key_order_on_their_shards(
    local_kinesis: LocalKinesis, client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 4)
    rng = random.Random(4)
    keys = [f"user-{i}" for i in range(200)]
    next_index: dict[str, int] = defaultdict(int)
    sent: list[tuple[str, int, int]] = []
    handles = []
    async with Producer(client, stream_name, ProducerConfig(aggregation=True)) as producer:
        shard_map = producer.shard_map
        assert shard_map is not None and len(shard_map) == 4
        for _ in range(50_000):
            key = rng.choice(keys)
            index = next_index[key]
            next_index[key] += 1
            size = mixed_size(rng)
            sent.append((key, index, size))
            handles.append(await producer.put(payload(key, index, size), key))
        await producer.flush()
        metrics = producer.metrics
    results: list[PutResult] = [await handle for handle in handles]
    assert metrics.records_sent == 50_000 and metrics.records_failed == 0
    assert metrics.outstanding_records == 0
    assert metrics.records_per_kinesis_record > 10  # aggregation did happen
    positions = {}
    for (key, index, _), result in zip(sent, results, strict=True):
        assert result.shard_id == shard_map.shard_for(key)
        positions[key, index] = (result.sequence_number, result.sub_sequence_number)
    assert len({(r.sequence_number, r.sub_sequence_number) for r in results}) == 50_000

    by_shard = await anyio.to_thread.run_sync(read_back, local_kinesis, stream_name)
    seen: dict[str, list[int]] = defaultdict(list)
    aggregates = 0
    for shard_id, raw in by_shard.items():
        aggregates += sum(1 for record in raw if record["Data"].startswith(MAGIC))
        for user in agg_deaggregator.iter_deaggregate_records(raw, data_format="Boto3"):
            body = user["kinesis"]
            key = body["partitionKey"]
            # Every record of a container is on the shard its own key hashes to.
            assert shard_map.shard_for(key) == shard_id
            data = body["data"]
            if body.get("aggregated"):
                data = base64.b64decode(data)  # aws-kinesis-agg hands these out in base64
            found_key, index, _ = data.split(b"|", 2)
            assert found_key.decode() == key
            seen[key].append(int(index))
            # The handle told the truth about where the record is.
            position = (body["sequenceNumber"], body.get("subSequenceNumber", 0))
            assert position == positions[key, int(index)]
    assert aggregates > 0
    assert sum(len(indices) for indices in seen.values()) == 50_000
    for key in keys:
        assert seen[key] == list(range(next_index[key])), f"{key} out of order or incomplete"


async def test_results_carry_the_position_a_consumer_sees(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    async with Producer(client, stream_name) as producer:
        handles = [await producer.put(f"r{i}".encode(), "same-key") for i in range(5)]
    results = [await handle for handle in handles]
    assert len({r.sequence_number for r in results}) == 1  # one aggregate
    assert [r.sub_sequence_number for r in results] == [0, 1, 2, 3, 4]


async def test_aggregation_off_sends_plain_records(client: KinesisClient, stream_name: str) -> None:
    await client.create_stream(stream_name, 2)
    config = ProducerConfig(aggregation=False, linger=0.01)
    async with Producer(client, stream_name, config) as producer:
        handles = [await producer.put(f"r{i}".encode(), f"k{i % 7}") for i in range(300)]
        await producer.flush()
        assert producer.metrics.kinesis_records_sent == 300
    results = [await handle for handle in handles]
    assert all(r.sub_sequence_number == 0 for r in results)
    assert len({r.sequence_number for r in results}) == 300


async def test_flush_returns_only_when_every_earlier_record_is_settled(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    config = ProducerConfig(linger=30.0)  # without flush, nothing would go for 30 s
    async with Producer(client, stream_name, config) as producer:
        handles = [await producer.put(b"x", f"k{i}") for i in range(10)]
        assert not any(handle.done() for handle in handles)
        with anyio.fail_after(10):
            await producer.flush()
        assert all(handle.done() for handle in handles)
        assert producer.metrics.outstanding_records == 0


async def test_closing_flushes(client: KinesisClient, stream_name: str) -> None:
    await client.create_stream(stream_name, 1)
    async with Producer(client, stream_name, ProducerConfig(linger=30.0)) as producer:
        handle = await producer.put(b"last words", "k")
    assert isinstance(handle.result(), PutResult)
    with pytest.raises(errors.ProducerClosedError):
        await producer.put(b"too late", "k")


async def test_a_reshard_is_noticed_and_records_follow_the_new_shards(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
        assert producer.shard_map is not None and len(producer.shard_map) == 1
        await (await producer.put(b"before", "k0"))
        [shard] = (await client.call("ListShards", {"StreamName": stream_name}))["Shards"]
        middle = (int(shard["HashKeyRange"]["EndingHashKey"]) + 1) // 2
        await client.call(
            "SplitShard",
            {
                "StreamName": stream_name,
                "ShardToSplit": shard["ShardId"],
                "NewStartingHashKey": str(middle),
            },
        )
        await client.wait_for_stream(stream_name)
        results = []
        for i in range(40):
            results.append(await (await producer.put(f"after-{i}".encode(), f"k{i}")))
        with anyio.fail_after(10):
            while producer.metrics.shard_map_refreshes == 0:
                await anyio.sleep(0.01)
        assert producer.metrics.mispredicted >= 1
        shard_map = producer.shard_map
        assert shard_map is not None and len(shard_map) == 2
        landed = [await (await producer.put(f"late-{i}".encode(), f"k{i}")) for i in range(40)]
    assert {r.shard_id for r in landed} <= {h.shard_id for h in shard_map}
    for i, result in enumerate(landed):
        assert result.shard_id == shard_map.shard_for(f"k{i}")


async def test_max_record_size_and_auto_distribution_come_from_the_stream(
    client: KinesisClient, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local server reports neither field; inject them into its answer (a fault the
    server cannot produce) and check the producer honours both."""
    await client.create_stream(stream_name, 2)
    real_call = client.call

    async def call(operation: str, params: Any = None, **kwargs: Any) -> dict[str, Any]:
        result = await real_call(operation, params, **kwargs)
        if operation == "DescribeStreamSummary":
            summary = result["StreamDescriptionSummary"]
            summary["MaxRecordSizeInKiB"] = 2048
            summary["RecordDistributionStrategy"] = "AUTO"
        return result

    monkeypatch.setattr(client, "call", call)
    async with Producer(client, stream_name) as producer:
        assert producer.max_record_bytes == 2 * 1024 * 1024
        assert producer.shard_map is None
        handles = [await producer.put(b"x" * 100, f"k{i}") for i in range(20)]
        await producer.flush()
        assert producer.metrics.kinesis_records_sent == 1  # one aggregate for the stream
    assert len({(await h).sequence_number for h in handles}) == 1


def test_shard_map_lookup_is_the_services_rule() -> None:
    shards = [
        {
            "ShardId": "a",
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**127 - 1)},
            "SequenceNumberRange": {"StartingSequenceNumber": "1"},
        },
        {
            "ShardId": "b",
            "HashKeyRange": {"StartingHashKey": str(2**127), "EndingHashKey": str(2**128 - 1)},
            "SequenceNumberRange": {"StartingSequenceNumber": "1"},
        },
    ]
    shard_map = ShardMap.from_shards(shards)
    assert shard_map.shard_for("k", explicit_hash_key="0") == "a"
    assert shard_map.shard_for("k", explicit_hash_key=str(2**127)) == "b"


async def test_the_shard_map_reads_every_page(client: KinesisClient, stream_name: str) -> None:
    from kinesis_actors.producer._stream import list_open_shards

    await client.create_stream(stream_name, 5)
    shard_map = await list_open_shards(client, stream_name, page_size=2)
    assert len(shard_map) == 5 and not shard_map.gaps()


async def test_a_put_waiting_on_the_producers_own_pacing_is_said_as_pacing_not_throttling(
    client: KinesisClient, stream_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A full queue with no throttle at all used to read "the stream is not keeping up
    (throttled 0 times so far)", a contradiction; the pacing is the cause, and is named."""
    await client.create_stream(stream_name, 1)
    config = ProducerConfig(
        aggregation=False,
        # 5 records/s on the one shard, a queue of 2 s of that: once the bucket's first second
        # is spent, records wait on the pacing, not on an answer.
        rate_limit=0.005,
        queue_limit_records=10,
        linger=0.0,
        backpressure_warning_after=0.05,
        backpressure_warning_interval=60,
    )
    caplog.set_level("WARNING", "kinesis_actors.producer")
    async with Producer(client, stream_name, config) as producer:
        with anyio.fail_after(60):
            index = 0
            while not [r for r in caplog.records if "waited" in r.getMessage()]:
                await producer.put(b"x", str(index))
                index += 1
    (warning,) = [r.getMessage() for r in caplog.records if "waited" in r.getMessage()]
    assert "paces each shard" in warning and "1 shard(s) are at that pace" in warning, warning
    assert "throttled nothing" in warning and "not keeping up" not in warning, warning


async def test_the_default_queue_is_sized_by_the_streams_open_shards(
    client: KinesisClient, stream_name: str
) -> None:
    """ProducerConfig's queue limits are None until the producer opens: then 80 records and
    64 KiB a shard of the stream (above the floor from 126 and 129 shards), and the dispatcher's
    mailbox bounds what is outstanding at those numbers; a limit the caller set is kept."""
    await client.create_stream(stream_name, 200)
    async with Producer(client, stream_name) as producer:
        assert producer.config.queue_limit_records == 16_000
        assert producer.config.queue_limit_bytes == 200 * 64 * 1024
        (tree,) = producer.supervision
        (dispatcher,) = [child for child in tree.children if child.name == "dispatcher"]
        assert dispatcher.mailbox is not None
        assert (dispatcher.mailbox.capacity, dispatcher.mailbox.max_weight) == (
            16_000,
            200 * 64 * 1024,
        )
        await producer.put(b"x", "k")
    async with Producer(client, stream_name, ProducerConfig(queue_limit_records=500)) as producer:
        assert producer.config.queue_limit_records == 500
        assert producer.config.queue_limit_bytes == 200 * 64 * 1024
