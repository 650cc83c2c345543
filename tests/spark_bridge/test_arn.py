"""The kinesis format with a stream given by ARN, in real Spark (local mode).

Calls go through a recording fault proxy: every call that names the stream names it by
``StreamARN``, never ``StreamName``, on the driver and on the executors alike. Rows and
offsets know the stream by its name, so a checkpoint written by name resumes by ARN.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinesis_actors import LocalKinesis, ProducerConfig
from kinesis_actors.errors import ConfigError
from kinesis_actors.sync import SyncProducer
from spark_bridge import partition_writer
from tests.boto import create_stream
from tests.faults import FaultProxy, Request

from .test_sink import consume

pytestmark = pytest.mark.local_kinesis

NAMED = {
    "DescribeStreamSummary",
    "ListShards",
    "GetShardIterator",
    "GetRecords",
    "PutRecords",
}


class Recorder:
    """The proxy's ``decide``: keeps every request's operation and body, forwards them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def named(self) -> list[tuple[str, dict[str, object]]]:
        with self._lock:
            return [(r.target, r.json()) for r in self.requests if r.target in NAMED]


@pytest.fixture
def recorded(local_kinesis: LocalKinesis) -> Iterator[tuple[FaultProxy, Recorder]]:
    recorder = Recorder()
    with FaultProxy(local_kinesis.plain_port, recorder) as proxy:
        yield proxy, recorder


def _arn(local: LocalKinesis, stream: str, shards: int) -> str:
    kinesis = create_stream(local, stream, shards)
    arn: str = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    return arn


def _connection(proxy: FaultProxy) -> dict[str, str]:
    return {"endpointUrl": proxy.endpoint_url, "awsAccessKeyId": "local", "awsSecretKey": "local"}


def _only_by_arn(recorder: Recorder, arn: str, operations: set[str]) -> None:
    named = recorder.named()
    assert {operation for operation, _ in named} >= operations
    for operation, body in named:
        if operation == "GetRecords":
            assert body.get("StreamARN") == arn, operation
        else:
            assert body.get("StreamARN") == arn and "StreamName" not in body, operation


class _Rows:
    """A ``foreachBatch`` function keeping every row's (stream, data)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, bytes]] = []

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.rows.extend((row.stream, bytes(row.data)) for row in frame.collect())


def _run(spark: Any, options: dict[str, str], checkpoint: Path) -> list[tuple[str, bytes]]:
    collect = _Rows()
    query = (
        spark.readStream.format("kinesis")
        .options(**options)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert not query.isActive, "AvailableNow did not end the query"
    assert query.exception() is None, query.exception()
    return collect.rows


def test_read_by_arn_every_record_once_and_its_checkpoint_resumes_by_name(
    spark: Any,
    local_kinesis: LocalKinesis,
    stream_name: str,
    tmp_path: Path,
    recorded: tuple[FaultProxy, Recorder],
) -> None:
    proxy, recorder = recorded
    arn = _arn(local_kinesis, stream_name, 2)
    options = {**_connection(proxy), "streamName": arn}

    def produce(numbers: range) -> None:
        with SyncProducer(
            arn,
            endpoint_url=proxy.endpoint_url,
            credentials=local_kinesis.credentials,
            config=ProducerConfig(linger=0.02),
        ) as producer:
            for i in numbers:
                producer.put(b"record-%04d" % i, f"key-{i % 20}")

    produce(range(300))
    rows = _run(spark, options, tmp_path / "cp")
    assert sorted(data for _, data in rows) == [b"record-%04d" % i for i in range(300)]
    assert {stream for stream, _ in rows} == {stream_name}  # the name, as by name
    _only_by_arn(recorder, arn, NAMED)

    # The offsets know the stream by name: the same checkpoint goes on by name, exactly.
    produce(range(300, 400))
    rows = _run(spark, {**options, "streamName": stream_name}, tmp_path / "cp")
    assert sorted(data for _, data in rows) == [b"record-%04d" % i for i in range(300, 400)]


def test_write_and_partition_writer_by_arn_deliver_every_row_once(
    spark: Any,
    local_kinesis: LocalKinesis,
    stream_name: str,
    recorded: tuple[FaultProxy, Recorder],
) -> None:
    proxy, recorder = recorded
    arn = _arn(local_kinesis, stream_name, 2)
    rows = [(f"row {i}", f"key-{i % 37}") for i in range(1_000)]
    df = spark.createDataFrame(rows, "data string, partitionKey string").repartition(2)
    df.write.format("kinesis").mode("append").option("streamName", arn).options(
        **_connection(proxy)
    ).save()
    more = [(f"more {i}", f"key-{i % 11}") for i in range(500)]
    frame = spark.createDataFrame(more, "data string, partitionKey string").repartition(2)
    frame.foreachPartition(partition_writer(arn, **_connection(proxy)))
    _only_by_arn(recorder, arn, {"DescribeStreamSummary", "ListShards", "PutRecords"})

    delivered = consume(local_kinesis, stream_name, len(rows) + len(more))
    assert len(delivered) == len(rows) + len(more)
    assert Counter((key, data) for _, key, _, data in delivered) == Counter(
        (key, data.encode()) for data, key in rows + more
    )


def test_partition_writer_refuses_a_bad_arn_at_once() -> None:
    """No endpoint answers on port 1: a call would fail otherwise."""
    with pytest.raises(ConfigError, match="option streamName: the ARN of a stream's consumer"):
        partition_writer(
            "arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c:1",
            endpointUrl="http://127.0.0.1:1",
        )
    with pytest.raises(ConfigError, match="is in region eu-west-1, but the client is for us-east"):
        partition_writer(
            "arn:aws:kinesis:eu-west-1:123456789012:stream/s", endpointUrl="http://127.0.0.1:1"
        )
