"""The library's own producer and consumer together: what one writes, the other reads once."""

from __future__ import annotations

from collections import defaultdict

import anyio
import pytest

from kinesis_actors import (
    RECORD_SCHEMA,
    Consumer,
    ConsumerConfig,
    KinesisClient,
    Producer,
    ProducerConfig,
    StartingPosition,
)

pytestmark = pytest.mark.anyio


async def test_produced_records_are_consumed_once_in_key_order(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 3)
    total, keys = 3_000, 40
    async with Producer(client, stream_name, ProducerConfig(linger=0.02)) as producer:
        handles = [
            await producer.put(f"{i % keys}|{i // keys}".encode(), f"key-{i % keys}")
            for i in range(total)
        ]
    positions = {(await h).sequence_number + f"/{(await h).sub_sequence_number}" for h in handles}
    assert len(positions) == total

    config = ConsumerConfig(start=StartingPosition.trim_horizon(), idle_backoff_initial=0.05)
    seen: dict[str, list[int]] = defaultdict(list)
    count = 0
    async with Consumer(client, stream_name, config) as consumer:
        with anyio.fail_after(60):
            async for batch in consumer:
                assert batch.arrow.schema == RECORD_SCHEMA
                table = batch.arrow.to_pydict()
                for key, data in zip(table["partition_key"], table["data"], strict=True):
                    index = int(data.split(b"|")[1])
                    seen[key].append(index)
                count += len(batch)
                consumer.commit(batch)
                if count >= total:
                    break
    assert count == total
    for key, indices in seen.items():
        assert indices == list(range(total // keys)), key
