"""OpenTelemetry export after real produce and consume runs against the local Kinesis server.

Each test collects with the SDK's in-memory reader (or scrapes through the Prometheus
exporter) and checks every instrument of the source against what happened (records put and
read) and against the library's own snapshot taken in the same loop step.
"""

from __future__ import annotations

import urllib.request

import anyio
import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families

from kinesis_actors import (
    Consumer,
    ConsumerConfig,
    KinesisClient,
    Producer,
    ProducerConfig,
    StartingPosition,
)
from kinesis_actors.metrics import INSTRUMENTS
from kinesis_actors.metrics.otel import instrument

from .otel_helpers import collect, only

pytestmark = pytest.mark.anyio

P = "kinesis_actors.producer."
C = "kinesis_actors.consumer."
K = "kinesis_actors.client."

# Instrument -> ProducerMetrics field, written out here rather than taken from the catalogue,
# so a wrong mapping there fails here.
PRODUCER_FIELDS = {
    P + "queue.records": "outstanding_records",
    P + "queue.size": "outstanding_bytes",
    P + "queue.peak_records": "peak_outstanding_records",
    P + "queue.peak_size": "peak_outstanding_bytes",
    P + "backpressure.waits": "backpressure_cycles",
    P + "backpressure.time": "backpressure_seconds",
    P + "records.accepted": "records_put",
    P + "records.sent": "records_sent",
    P + "records.failed": "records_failed",
    P + "records.retried": "retries",
    P + "records.throttled": "throttled",
    P + "records.mispredicted": "mispredicted",
    P + "kinesis_records.sent": "kinesis_records_sent",
    P + "data.sent": "bytes_sent",
    P + "put_records.calls": "calls",
    P + "put_records.failures": "failed_calls",
    P + "put_records.in_flight": "in_flight_calls",
    P + "shard_map.refreshes": "shard_map_refreshes",
    P + "senders.crashes": "sender_crashes",
    P + "endpoint.unreachable_time": "unreachable_seconds",
    P + "records.misplaced": "misplaced_records",
}
CLIENT_FIELDS = {
    K + "calls": "calls",
    K + "attempts": "attempts",
    K + "retries": "retries",
    K + "throttled_attempts": "throttled",
    K + "transport_errors": "transport_errors",
    K + "subscriptions": "subscriptions",
    K + "malformed_replies": "malformed_replies",
}
SHARD_FIELDS = {
    C + "reads": "reads",
    C + "empty_reads": "empty_reads",
    C + "throttles": "throttles",
    C + "transient_errors": "transient_errors",
    C + "expired_iterators": "expired_iterators",
    C + "iterators": "iterators",
    C + "records": "records",
    C + "user_records": "user_records",
    C + "aggregated_records": "aggregated_records",
    C + "data.read": "bytes",
    C + "last_read.records": "last_read_records",
    C + "last_read.size": "last_read_bytes",
    C + "batches": "batches",
    C + "buffered_batches": "buffer_depth",
    C + "restarts": "restarts",
    C + "events": "events",
    C + "subscriptions": "subscriptions",
    C + "backpressure.time": "backpressured_seconds",
    C + "not_found": "not_found",
    C + "poison_records": "poison_records",
    C + "starvations": "starvations",
}
RECORDS = 300


def documented(prefix: str) -> set[str]:
    return {spec.name for spec in INSTRUMENTS if spec.name.startswith(prefix)}


async def produce(client: KinesisClient, stream: str, config: ProducerConfig) -> Producer:
    """Create a 2-shard stream; the caller puts into the returned, opened producer."""
    await client.create_stream(stream, 2)
    return Producer(client, stream, config)


async def test_after_a_produce_run_each_producer_and_client_instrument_has_its_value(
    client: KinesisClient, stream_name: str
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    await client.create_stream(stream_name, 2)
    data = [(b"record-%04d" % i, f"key-{i % 17}") for i in range(RECORDS)]
    # Without aggregation, so data.sent can be checked against the records themselves.
    config = ProducerConfig(queue_limit_records=50, aggregation=False)
    async with Producer(client, stream_name, config) as producer:
        with instrument(producer, client, meter_provider=provider):
            for payload, key in data:
                await producer.put(payload, key)
            await producer.flush()
            collected = collect(reader)
            snapshot, stats = producer.metrics, client.statistics()  # the same loop step

    assert set(PRODUCER_FIELDS) == documented(P)
    assert set(CLIENT_FIELDS) == documented(K)
    for name, field in PRODUCER_FIELDS.items():
        assert only(collected, name, stream=stream_name) == getattr(snapshot, field), name
    for name, field in CLIENT_FIELDS.items():
        assert only(collected, name, **{"cloud.region": client.region}) == getattr(stats, field)

    # What the run itself says, independently of the snapshot.
    assert only(collected, P + "records.accepted", stream=stream_name) == RECORDS
    assert only(collected, P + "records.sent", stream=stream_name) == RECORDS
    assert only(collected, P + "kinesis_records.sent", stream=stream_name) == RECORDS
    assert only(collected, P + "records.failed", stream=stream_name) == 0
    assert only(collected, P + "queue.records", stream=stream_name) == 0
    assert only(collected, P + "queue.size", stream=stream_name) == 0
    assert only(collected, P + "put_records.in_flight", stream=stream_name) == 0
    assert only(collected, P + "queue.peak_records", stream=stream_name) == 50
    assert only(collected, P + "backpressure.waits", stream=stream_name) > 0  # 300 into 50
    assert only(collected, P + "data.sent", stream=stream_name) == sum(
        len(payload) + len(key) for payload, key in data
    )
    calls = only(collected, P + "put_records.calls", stream=stream_name)
    # CreateStream, its describe, the producer's own calls, then PutRecords.
    assert only(collected, K + "calls", **{"cloud.region": client.region}) > calls > 0


async def test_after_a_consume_run_each_shard_instrument_has_its_value(
    client: KinesisClient, stream_name: str
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    await client.create_stream(stream_name, 2)
    async with Producer(client, stream_name) as producer:
        for i in range(RECORDS):
            await producer.put(b"r%04d" % i, f"key-{i}")
    config = ConsumerConfig(
        start=StartingPosition.trim_horizon(),
        max_records_per_call=40,
        idle_backoff_initial=0.05,
        idle_backoff_max=0.2,
        shard_discovery_interval=1.0,
    )
    seen = 0
    async with Consumer(client, stream_name, config) as consumer:
        with instrument(consumer, meter_provider=provider, attributes={"app": "test"}):
            with anyio.fail_after(30):
                async for batch in consumer:
                    seen += len(batch)
                    consumer.commit(batch)
                    if seen >= RECORDS:
                        break
            collected = collect(reader)
            snapshot = consumer.statistics()  # the same loop step

    shards = snapshot.shards
    assert len(shards) == 2
    assert set(SHARD_FIELDS) | {C + "lag", C + "shards"} <= documented(C)
    for (stream, shard_id), shard in shards.items():
        tags = {"stream": stream, "shard": shard_id, "app": "test"}
        for name, field in SHARD_FIELDS.items():
            assert only(collected, name, **tags) == pytest.approx(getattr(shard, field)), name
        assert only(collected, C + "lag", **tags) == shard.millis_behind_latest / 1000
        assert only(collected, C + "shards", **tags, state="reading") == 1
    assert only(collected, C + "discoveries", app="test") == snapshot.discoveries >= 1
    assert only(collected, C + "list_shards.calls", app="test") == snapshot.list_shards_calls
    assert only(collected, C + "discovery_failures", app="test") == 0
    assert only(collected, C + "waiting_shards", stream=stream_name) == 0

    # What the run itself says: every record read once, by the two shards together.
    per_shard = [value for _, value in collected[C + "user_records"]]
    assert sum(per_shard) == RECORDS
    assert all(value > 0 for value in per_shard)
    # The producer aggregated them (its default): every Kinesis record read was an aggregate.
    aggregates = sum(value for _, value in collected[C + "aggregated_records"])
    assert sum(value for _, value in collected[C + "records"]) == aggregates
    assert 2 <= aggregates < RECORDS
    assert sum(value for _, value in collected[C + "throttles"]) == 0


async def test_closing_stops_reporting_that_source_and_others_on_the_provider_go_on(
    client: KinesisClient, stream_name: str
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    other = stream_name + "-b"
    await client.create_stream(stream_name, 1)
    await client.create_stream(other, 1)
    async with Producer(client, stream_name) as first, Producer(client, other) as second:
        await (await first.put(b"1", "k"))
        await (await second.put(b"2", "k"))
        await (await second.put(b"3", "k"))
        one = instrument(first, meter_provider=provider)
        with instrument(second, meter_provider=provider):
            sent = collect(reader)[P + "records.sent"]
            assert sorted((tags["stream"], value) for tags, value in sent) == [
                (stream_name, 1),
                (other, 2),
            ]
            one.close()
            sent = collect(reader)[P + "records.sent"]
            assert [tags["stream"] for tags, _ in sent] == [other]
        assert P + "records.sent" not in collect(reader)


async def test_a_prometheus_scrape_over_http_finds_the_producers_records(
    client: KinesisClient, stream_name: str
) -> None:
    # The README's setup: the exporter's collector on prometheus_client's registry, served
    # over HTTP. The scrape runs on the server's thread, so the snapshot crosses to the loop.
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    server, thread = start_http_server(0, addr="127.0.0.1")
    try:
        await client.create_stream(stream_name, 1)
        async with Producer(client, stream_name) as producer:
            with instrument(producer, meter_provider=provider):
                for i in range(25):
                    await producer.put(b"p%d" % i, "key")
                await producer.flush()
                url = f"http://127.0.0.1:{server.server_port}/metrics"
                page = await anyio.to_thread.run_sync(_get, url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        provider.shutdown()
    samples = {
        (sample.name, sample.labels.get("stream")): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }
    assert samples[("kinesis_actors_producer_records_sent_total", stream_name)] == 25
    assert samples[("kinesis_actors_producer_queue_records", stream_name)] == 0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


async def test_a_producer_given_an_arn_reports_under_the_streams_name(
    client: KinesisClient, stream_name: str
) -> None:
    """one stream, one ``stream`` attribute, whichever way it was named."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    await client.create_stream(stream_name, 1)
    summary = await client.call("DescribeStreamSummary", {"StreamName": stream_name})
    arn = summary["StreamDescriptionSummary"]["StreamARN"]
    async with Producer(client, arn) as producer:
        with instrument(producer, meter_provider=provider):
            for i in range(5):
                await producer.put(b"%d" % i, "k")
            await producer.flush()
            collected = collect(reader)
    assert producer.stream == arn  # as given
    assert only(collected, P + "records.sent", stream=stream_name) == 5
    assert {tags["stream"] for tags, _ in collected[P + "records.sent"]} == {stream_name}
