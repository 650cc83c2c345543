"""README's metrics: the producer's, the consumer's and the client's figures, scraped."""

import os
import urllib.request

import anyio

from kinesis_actors import Consumer, ConsumerConfig, LocalKinesis, Producer, StartingPosition

# isort: off
# [instrument]
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import start_http_server

from kinesis_actors.metrics.otel import instrument
# [/instrument]
# isort: on

PORT = int(os.environ.get("METRICS_PORT", "9464"))


def scrape() -> str:
    with urllib.request.urlopen(f"http://localhost:{PORT}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


async def main() -> None:
    # On AWS: KinesisClient(region="eu-west-1"); the stream exists
    async with LocalKinesis() as server, server.client() as kinesis:
        await kinesis.create_stream("orders", shard_count=2)
        config = ConsumerConfig(start=StartingPosition.trim_horizon())
        async with (
            Producer(kinesis, "orders") as producer,
            Consumer(kinesis, "orders", config) as consumer,
        ):
            # [instrument]
            start_http_server(PORT)  # serves /metrics (PORT: 9464, or $METRICS_PORT)
            provider = MeterProvider(metric_readers=[PrometheusMetricReader()])  # or any reader
            with instrument(kinesis, producer, consumer, meter_provider=provider):  # their loop
                ...  # your program: here it puts 1,000 records
                # [/instrument]
                for i in range(1_000):
                    await producer.put(f"order {i}".encode(), f"customer-{i % 50}")
                await producer.flush()
                # Collecting reads the sources on this loop: scrape from another thread.
                page = await anyio.to_thread.run_sync(scrape)
    for line in page.splitlines():
        if line.startswith("kinesis_actors_producer_records_sent"):
            print(line)


anyio.run(main)
