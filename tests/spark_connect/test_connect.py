"""The kinesis format on a remote session (Spark Connect), against the local Kinesis server.

The client here only builds plans and sends them over gRPC; the data source runs in the Connect
server's Python workers (its driver-side planner and its tasks). Each test checks every record
once: the source into a parquet sink (Spark's exactly-once file sink) stopped mid-stream and
restarted from its checkpoint, the sink read back with boto3 and an independent deaggregator.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException

import spark_bridge
from kinesis_actors import LocalKinesis, ProducerConfig
from kinesis_actors.records import deaggregate
from kinesis_actors.sync import SyncProducer
from tests.boto import create_stream, read_back

pytestmark = pytest.mark.local_kinesis


def _connection(local: LocalKinesis, *, tls: bool = False) -> dict[str, str]:
    key, secret = local.credentials[:2]
    endpoint = {"endpointUrl": local.tls_endpoint_url, "verifySsl": "false"} if tls else {}
    return {
        "endpointUrl": local.endpoint_url,
        "awsAccessKeyId": key,
        "awsSecretKey": secret,
        **endpoint,
    }


def _produce(local: LocalKinesis, stream: str, numbers: range) -> None:
    with SyncProducer(
        stream,
        endpoint_url=local.endpoint_url,
        credentials=local.credentials,
        config=ProducerConfig(linger=0.02),  # aggregated: the source deaggregates
    ) as producer:
        for i in numbers:
            producer.put(b"record-%06d" % i, f"key-{i % 50}")
        producer.flush()


def _rows_with_data(query: Any) -> int:
    # The property, not ["numInputRows"]: a Connect progress (parsed from the server's JSON)
    # has that key as None and the counts in its sources.
    return sum(int(progress.numInputRows) for progress in query.recentProgress)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["polling", "efo"])
def test_read_stream_stopped_and_restarted_from_its_checkpoint_reads_every_record_once(
    remote: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path, mode: str
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    _produce(local_kinesis, stream_name, range(600))
    options = {
        "streamName": stream_name,
        "consumerMode": mode,
        "maxRecordsPerTrigger": "200",
        **_connection(local_kinesis, tls=mode == "efo"),
    }
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start(**trigger: Any) -> Any:
        frame = remote.readStream.format("kinesis").options(**options).load()
        return (
            frame.select("shardId", "sequenceNumber", "subSequenceNumber", "data")
            .writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    # First run: a processing-time trigger, stopped once a micro-batch with rows committed.
    first = start(processingTime="200 milliseconds")
    deadline = time.monotonic() + 90
    while _rows_with_data(first) == 0 and time.monotonic() < deadline:
        assert first.exception() is None, first.exception()
        time.sleep(0.05)  # the query's progress over gRPC: polled, bounded
    first.stop()
    read_first = _rows_with_data(first)
    assert 0 < read_first < 600, "the first run should stop mid-stream"

    # Second run, after more records arrived: from the checkpoint, to the end of what is there.
    _produce(local_kinesis, stream_name, range(600, 900))
    second = start(availableNow=True)
    assert second.awaitTermination(120), "AvailableNow did not end the query"
    assert second.exception() is None, second.exception()

    rows = remote.read.parquet(output).collect()
    keys = [(row.shardId, row.sequenceNumber, row.subSequenceNumber) for row in rows]
    assert len(keys) == len(set(keys)), "a record was written twice"
    assert sorted(bytes(row.data) for row in rows) == [b"record-%06d" % i for i in range(900)]
    assert len({row.shardId for row in rows}) == 2


def _delivered(local: LocalKinesis, stream: str) -> Counter[tuple[str, bytes]]:
    """Every user record of ``stream`` as (partition key, data): the Kinesis records read with
    boto3, deaggregated (KPL format; tests/records checks it against aws-kinesis-agg's)."""
    return Counter(
        (user.partition_key, user.data)
        for shard in read_back(local, stream).values()
        for record in shard
        for user in deaggregate(record["Data"], record["PartitionKey"])
    )


@pytest.mark.slow
def test_batch_streaming_and_partition_writes_deliver_every_row_once(
    remote: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    connection = _connection(local_kinesis)
    expected: Counter[tuple[str, bytes]] = Counter()

    # df.write: a batch write of three partitions.
    batch = [(f"batch-{i}", f"key-{i % 17}") for i in range(900)]
    remote.createDataFrame(batch, "data string, partitionKey string").repartition(3).write.format(
        "kinesis"
    ).mode("append").option("streamName", stream_name).options(**connection).save()
    expected.update((key, data.encode()) for data, key in batch)

    # df.writeStream: a file source of six files, two micro-batches, into the kinesis sink.
    folder = tmp_path / "input"
    streamed = [(f"streamed-{i}", f"user-{i % 13}") for i in range(600)]
    remote.createDataFrame(streamed, "data string, partitionKey string").repartition(
        6
    ).write.parquet(str(folder))
    query = (
        remote.readStream.schema("data string, partitionKey string")
        .option("maxFilesPerTrigger", 3)
        .parquet(str(folder))
        .writeStream.format("kinesis")
        .option("streamName", stream_name)
        .options(**connection)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    assert len([p for p in query.recentProgress if p.numInputRows > 0]) == 2
    expected.update((key, data.encode()) for data, key in streamed)

    # foreachPartition: the writer is made (and describes the stream) here, on the client,
    # and pickled to the server's workers.
    partitioned = [(f"part-{i}".encode() * (1 + i % 3), f"k{i % 23}") for i in range(500)]
    writer = spark_bridge.partition_writer(stream_name, **connection, aggregation=False)
    remote.createDataFrame(partitioned, "data binary, partitionKey string").repartition(
        4
    ).foreachPartition(writer)
    expected.update((key, data) for data, key in partitioned)

    delivered = _delivered(local_kinesis, stream_name)
    assert sum(delivered.values()) == 2_000
    assert delivered == expected


def test_a_sink_error_on_the_server_reaches_the_remote_client_naming_the_stream(
    remote: Any, local_kinesis: LocalKinesis
) -> None:
    frame = remote.createDataFrame([("a", "k")], "data string, partitionKey string")
    with pytest.raises(AnalysisException) as failure:
        frame.write.format("kinesis").mode("append").option("streamName", "no-such-stream").options(
            **_connection(local_kinesis)
        ).save()
    assert "ResourceNotFound" in str(failure.value)
    assert "no-such-stream" in str(failure.value)


class _RefusingConf:
    """What a serverless Connect session answers for a setting it does not expose."""

    def get(self, key: str, default: str | None = None) -> str:
        raise AnalysisException(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available.")


class _Registry:
    def __init__(self) -> None:
        self.registered: list[type] = []

    def register(self, source: type) -> None:
        self.registered.append(source)


class _Session:
    def __init__(self, conf: Any) -> None:
        self.conf = conf
        self.dataSource = _Registry()


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


def test_register_tolerates_a_session_that_refuses_config_reads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = _Session(_RefusingConf())
    with caplog.at_level(logging.DEBUG, logger="spark_bridge"):
        spark_bridge.register(session)
    assert session.dataSource.registered == [spark_bridge.KinesisDataSource]
    assert "could not read spark.speculation" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_register_still_warns_about_speculation_where_the_setting_is_readable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = _Session(_Conf({"spark.speculation": "true"}))
    with caplog.at_level(logging.WARNING, logger="spark_bridge"):
        spark_bridge.register(session)
    assert session.dataSource.registered == [spark_bridge.KinesisDataSource]
    assert "spark.speculation is on" in caplog.text


def test_the_remote_session_reads_the_setting_and_registers_on_the_server(
    remote: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assert type(remote).__module__ == "pyspark.sql.connect.session"  # really remote
    with caplog.at_level(logging.DEBUG, logger="spark_bridge"):
        spark_bridge.register(remote)  # again, on the real session
    assert caplog.text == ""  # the setting was read (this server allows it), nothing to say
    frame = remote.readStream.format("kinesis").option("streamName", "s").load()
    assert frame.columns[:3] == ["stream", "shardId", "sequenceNumber"]  # the server knows it
