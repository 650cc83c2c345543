"""``kinesis-actors demo``: the product end to end on the embedded local Kinesis.

It creates a stream, writes a keyed workload through the :class:`~kinesis_actors.Producer`
(bounded queue, KPL aggregation per shard), reads it back with the
:class:`~kinesis_actors.Consumer` as Arrow batches, and checks that every record arrived
exactly once, in order per key. The Spark stage joins it with the Spark bridge.
"""

from __future__ import annotations

import time

import anyio

from ..client import KinesisClient
from ..consumer import Consumer, ConsumerConfig, StartingPosition
from ..local import LocalKinesis
from ..producer import Producer, ProducerConfig

_KEYS = 50


async def _write(
    client: KinesisClient, stream: str, records: int
) -> tuple[dict[str, list[int]], str]:
    sent: dict[str, list[int]] = {}
    async with Producer(client, stream, ProducerConfig(linger=0.02)) as producer:
        for i in range(records):
            key = f"user-{i % _KEYS}"
            sent.setdefault(key, []).append(i)
            await producer.put(f"{key}:{i}".encode(), key)
    metrics = producer.metrics
    summary = (
        f"{metrics.records_sent:,} acknowledged in {metrics.calls} PutRecords calls, "
        f"{metrics.records_per_kinesis_record:.0f} records per aggregate, "
        f"{metrics.backpressure_cycles} backpressure waits, {metrics.records_failed} failed"
    )
    return sent, summary


async def _read(client: KinesisClient, stream: str, records: int) -> dict[str, list[int]]:
    received: dict[str, list[int]] = {}
    count = 0
    config = ConsumerConfig(start=StartingPosition.trim_horizon(), idle_backoff_initial=0.05)
    async with Consumer(client, stream, config) as consumer:
        async for batch in consumer:
            for data in batch.arrow.column("data").to_pylist():
                key, index = data.decode().split(":")
                received.setdefault(key, []).append(int(index))
            count += len(batch)
            consumer.commit(batch)
            if count >= records:
                break
    return received


async def run_demo(records: int, shards: int) -> int:
    print("starting the embedded local Kinesis ...", flush=True)
    async with LocalKinesis() as server, server.client(tls=True) as client:
        stream = "demo"
        await client.create_stream(stream, shards)
        started = time.perf_counter()
        sent, produced = await _write(client, stream, records)
        write_seconds = time.perf_counter() - started
        started = time.perf_counter()
        with anyio.fail_after(120):
            received = await _read(client, stream, records)
        read_seconds = time.perf_counter() - started
    ok = received == sent
    print(
        f"produced {records:,} records over {shards} shards in {write_seconds:.2f} s "
        f"({records / write_seconds:,.0f} records/s): {produced}\n"
        f"consumed them as Arrow batches in {read_seconds:.2f} s "
        f"({records / read_seconds:,.0f} records/s)\n"
        f"every record exactly once, in order per key: {'yes' if ok else 'NO'}"
    )
    return 0 if ok else 1
