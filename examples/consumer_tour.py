"""docs/consumer.md's fragments, run: iterating, run(handler), Enhanced Fan-Out."""

import json
from typing import Any

import anyio
import anyio.lowlevel
import pyarrow as pa

from kinesis_actors import KinesisClient, LocalKinesis, Producer, RecordBatch
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition

RECORDS = 100  # per stream


async def produce(client: KinesisClient, stream: str) -> None:
    await client.create_stream(stream, shard_count=2)
    async with Producer(client, stream) as producer:
        for i in range(RECORDS):
            await producer.put(f"{stream} {i}".encode(), f"key-{i % 10}")


async def main() -> None:
    async with LocalKinesis() as server, server.client() as client:
        await produce(client, "orders")
        await produce(client, "payments")
        await iterate(client)
        await run_handler(client)
        await efo(server)


async def iterate(client: KinesisClient) -> None:
    seen = 0
    saved = ""  # where your program keeps its positions: a file, a table

    def process(records: pa.RecordBatch) -> None:
        nonlocal seen
        seen += records.num_rows

    def save(positions: dict[str, Any]) -> None:
        nonlocal saved
        saved = json.dumps(positions)

    # [iterate]
    config = ConsumerConfig(start=StartingPosition.trim_horizon())
    async with Consumer(client, ["orders", "payments"], config) as consumer:
        async for batch in consumer:  # RecordBatch: .stream, .shard_id, .arrow, len()
            process(batch.arrow)  # a pyarrow.RecordBatch with exactly RECORD_SCHEMA
            consumer.commit(batch)
            save(consumer.positions())  # a JSON-serializable dict
            # [/iterate]
            if seen == 2 * RECORDS:
                break
    streams = sorted(json.loads(saved)["streams"])
    print(f"iterated: {seen} records; positions saved for {streams}")


async def run_handler(client: KinesisClient) -> None:
    config = ConsumerConfig(start=StartingPosition.trim_horizon())
    written = 0

    async def write_somewhere(records: pa.RecordBatch) -> None:
        nonlocal written
        await anyio.lowlevel.checkpoint()  # your I/O here
        written += records.num_rows
        if written == RECORDS:
            consumer.stop()

    # [run]
    async def handler(batch: RecordBatch) -> None:
        await write_somewhere(batch.arrow)  # committed when this returns

    async with Consumer(client, "orders", config) as consumer:
        await consumer.run(handler)  # until consumer.stop(), close or cancellation
    # [/run]
    print(f"run(handler): {written} records")


async def efo(server: LocalKinesis) -> None:
    got = 0

    async def handler(batch: RecordBatch) -> None:
        nonlocal got
        got += len(batch)
        if got == RECORDS:
            consumer.stop()

    # [efo]
    config = ConsumerConfig(
        mode="efo", consumer_name="orders-app", start=StartingPosition.trim_horizon()
    )
    client = KinesisClient(  # an https endpoint: HTTP/2 subscriptions
        region=server.region,  # on AWS: KinesisClient(region="eu-west-1") and nothing more
        endpoint_url=server.tls_endpoint_url,
        verify=False,  # the local server's certificate is self-signed
        credentials=server.credentials,
    )
    async with client, Consumer(client, "orders", config) as consumer:
        await consumer.run(handler)
    # [/efo]
    print(f"efo: {got} records through consumer 'orders-app'")


anyio.run(main)
