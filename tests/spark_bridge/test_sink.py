"""The kinesis sink in real Spark (local mode) against the local Kinesis server.

Every write is read back with the library's consumer (which de-aggregates) and compared with
what was given: data bytes, partition keys, counts, and for explicit hash keys the shard.
"""

from __future__ import annotations

import pickle
import re
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from kinesis_actors import Consumer, ConsumerConfig, LocalKinesis, StartingPosition, errors
from kinesis_actors.records import hash_key
from spark_bridge import partition_writer
from spark_bridge._options import parse_sink_options
from spark_bridge._sink import write_records
from tests.boto import create_stream
from tests.faults import FaultProxy, RejectRecords, Request
from tests.unreachable import refusing_port

pytestmark = pytest.mark.local_kinesis

TOP_HASH_KEY = str(2**128 - 1)
HALF = 2**127  # two shards split the hash key space here

# What Spark surfaces, with the Python error's traceback in the message: an AnalysisException
# ([PYTHON_DATA_SOURCE_ERROR]) for an error raised while it creates the writer on the driver,
# a PythonException for an error raised in a task.


Delivered = list[tuple[str, str, str | None, bytes]]  # shard, key, explicit hash key, data


def consume(local: LocalKinesis, stream: str, count: int) -> Delivered:
    """Every user record of ``stream`` (de-aggregated): waits for ``count`` of them, then
    half a second more, so that duplicates or strays would show up too."""

    async def main() -> Delivered:
        out: Delivered = []
        config = ConsumerConfig(
            start=StartingPosition.trim_horizon(), idle_backoff_initial=0.05, idle_backoff_max=0.2
        )
        async with local.client(tls=False) as client, Consumer(client, stream, config) as records:
            with anyio.fail_after(30):
                async for batch in records:
                    table = batch.arrow.to_pydict()
                    out.extend(
                        (batch.shard_id, key, explicit, data)
                        for key, explicit, data in zip(
                            table["partition_key"],
                            table["explicit_hash_key"],
                            table["data"],
                            strict=True,
                        )
                    )
                    if len(out) >= count:
                        break
            with anyio.move_on_after(0.5):
                async for batch in records:
                    out.extend((batch.shard_id, "extra", None, b"") for _ in range(len(batch)))
        return out

    return anyio.run(main)


@pytest.fixture
def stream(local_kinesis: LocalKinesis, stream_name: str) -> str:
    create_stream(local_kinesis, stream_name, 2)
    return stream_name


@pytest.fixture
def conn(local_kinesis: LocalKinesis) -> dict[str, str]:
    return {
        "endpointUrl": local_kinesis.endpoint_url,
        "awsAccessKeyId": "local",
        "awsSecretKey": "local",
    }


def _via(proxy: FaultProxy) -> dict[str, str]:
    """Connection options through the fault proxy, which counts the calls by operation."""
    return {"endpointUrl": proxy.endpoint_url, "awsAccessKeyId": "local", "awsSecretKey": "local"}


def _pairs(delivered: Delivered) -> Counter[tuple[str, bytes]]:
    return Counter((key, data) for _, key, _, data in delivered)


def test_batch_write_delivers_every_row_of_every_partition(
    spark: Any, local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy
) -> None:
    rows = [(f"row {i} é", f"key-{i % 37}") for i in range(3_000)]
    df = spark.createDataFrame(rows, "data string, partitionKey string").repartition(3)
    assert df.rdd.getNumPartitions() == 3
    df.write.format("kinesis").mode("append").option("streamName", stream).options(
        **_via(proxy)
    ).save()
    # the driver describes the stream once; the three tasks reuse it instead of
    # each calling DescribeStreamSummary (20/s per account).
    assert proxy.stats.by_target.get("DescribeStreamSummary") == 1
    assert proxy.stats.by_target["PutRecords"] >= 3  # every task wrote through the proxy

    delivered = consume(local_kinesis, stream, len(rows))
    assert len(delivered) == len(rows)
    assert _pairs(delivered) == Counter((key, data.encode()) for data, key in rows)
    assert {shard for shard, *_ in delivered} == {"shardId-000000000000", "shardId-000000000001"}


def test_binary_data_and_explicit_hash_keys_are_honoured(
    spark: Any, local_kinesis: LocalKinesis, stream: str, conn: dict[str, str]
) -> None:
    low_keys = [k for k in (f"p{i}" for i in range(200)) if hash_key(k) < HALF][:5]
    high_keys = [k for k in (f"p{i}" for i in range(200)) if hash_key(k) >= HALF][:5]
    rows: list[tuple[bytes, str, str | None]] = []
    for i in range(300):
        data = bytes([i % 256, 0, 255]) + i.to_bytes(4, "big")
        if i % 3 == 0:  # a key that hashes low, pinned to the top of the key space
            rows.append((data, low_keys[i % 5], TOP_HASH_KEY))
        elif i % 3 == 1:  # a key that hashes high, pinned to the bottom
            rows.append((data, high_keys[i % 5], "0"))
        else:
            rows.append((data, f"free-{i % 11}", None))
    schema = StructType(
        [
            StructField("data", BinaryType()),
            StructField("partitionKey", StringType()),
            StructField("explicitHashKey", StringType()),
        ]
    )
    df = spark.createDataFrame(rows, schema).repartition(2)
    df.write.format("kinesis").mode("append").option("streamName", stream).options(**conn).save()

    delivered = consume(local_kinesis, stream, len(rows))
    assert Counter((k, d) for _, k, _, d in delivered) == Counter((k, d) for d, k, _ in rows)
    shard_of = {data: shard for shard, _, _, data in delivered}
    for data, _, explicit in rows:
        if explicit == TOP_HASH_KEY:
            assert shard_of[data] == "shardId-000000000001", data
        elif explicit == "0":
            assert shard_of[data] == "shardId-000000000000", data


def test_stream_write_with_available_now_delivers_every_row(
    spark: Any, local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    folder = tmp_path / "input"
    rows = [(f"event-{i}", f"user-{i % 13}") for i in range(1_200)]
    spark.createDataFrame(rows, "data string, partitionKey string").repartition(6).write.parquet(
        str(folder)
    )
    query = (
        spark.readStream.schema("data string, partitionKey string")
        .option("maxFilesPerTrigger", 3)  # two micro-batches of three files, three tasks each
        .parquet(str(folder))
        .writeStream.format("kinesis")
        .option("streamName", stream)
        .options(**_via(proxy))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90)
    assert query.exception() is None
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) == 2
    # One describe per micro-batch at most: not one per task (6), nor one more per commit
    # (Spark makes a writer just to commit; describing there made 4).
    assert 1 <= proxy.stats.by_target.get("DescribeStreamSummary", 0) <= len(batches)

    delivered = consume(local_kinesis, stream, len(rows))
    assert len(delivered) == len(rows)
    assert _pairs(delivered) == Counter((key, data.encode()) for data, key in rows)


def test_partition_writer_delivers_every_row(
    spark: Any, local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy
) -> None:
    rows = [(f"x{i}".encode() * (1 + i % 5), f"k{i % 23}") for i in range(1_500)]
    df = spark.createDataFrame(rows, "data binary, partitionKey string").repartition(4)
    writer = partition_writer(
        stream,
        endpoint_url=proxy.endpoint_url,
        credentials=("local", "local"),
        aggregation=False,
        queue_limit_records=200,
        flush_timeout=60,
    )
    assert pickle.loads(pickle.dumps(writer)) == writer
    df.foreachPartition(writer)
    assert proxy.stats.by_target.get("DescribeStreamSummary") == 1  # made once, not per task

    delivered = consume(local_kinesis, stream, len(rows))
    assert len(delivered) == len(rows)
    assert _pairs(delivered) == Counter((key, data) for data, key in rows)


@pytest.mark.parametrize(
    ("ddl", "column", "expected"),
    [
        ("data string", "partitionKey", "is missing"),
        ("data int, partitionKey string", "data", "expected binary or string"),
        ("data string, partitionKey binary", "partitionKey", "expected string"),
        ("data string, partitionKey string, extra string", "extra", "unexpected"),
        ("data string, partitionKey string, explicitHashKey int", "explicitHashKey", "expected"),
    ],
)
def test_a_bad_input_schema_fails_before_writing_naming_the_column(
    spark: Any, conn: dict[str, str], ddl: str, column: str, expected: str
) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(AnalysisException) as failure:
        df.write.format("kinesis").mode("append").option("streamName", "s").options(**conn).save()
    text = str(failure.value)
    assert "ConfigError" in text
    assert f"'{column}'" in text
    assert expected in text


def test_a_bad_sink_option_fails_naming_it(spark: Any, conn: dict[str, str]) -> None:
    df = spark.createDataFrame([("a", "k")], "data string, partitionKey string")
    with pytest.raises(AnalysisException) as failure:
        (
            df.write.format("kinesis")
            .mode("append")
            .option("streamName", "s")
            .option("queueLimitRecords", "-5")
            .options(**conn)
            .save()
        )
    assert "option queueLimitRecords must be a positive integer" in str(failure.value)


def test_partition_writer_checks_its_options_at_once() -> None:
    with pytest.raises(errors.ConfigError, match="unknown keyword streamname="):
        partition_writer("s", streamname="other")
    with pytest.raises(errors.ConfigError, match="option flushTimeout must be a positive"):
        partition_writer("s", flushTimeout="soon")
    with pytest.raises(errors.ConfigError, match="option endpointUrl must start with http"):
        partition_writer("s", endpointUrl="localhost:4567")
    with pytest.raises(errors.ConfigError, match="exactly one stream"):
        partition_writer("a,b")
    with pytest.raises(errors.ConfigError, match="option openTimeout must be a positive"):
        partition_writer("s", openTimeout="0")
    with pytest.raises(errors.ConfigError, match="open_timeout must be a positive number"):
        partition_writer("s", open_timeout=-1.0)


def test_partition_writer_names_an_unreachable_endpoint_in_its_keywords() -> None:
    """Described on the driver at once: the error names the keywords the caller has."""
    with refusing_port() as url, pytest.raises(errors.EndpointUnreachableError) as raised:
        partition_writer("s", endpoint_url=url, credentials=("a", "b"), open_timeout=1.0)
    first = str(raised.value).splitlines()[0]
    assert f"cannot reach Kinesis at {url} (connection refused)" in first
    assert "keyword open_timeout=1" in first and "keyword endpoint_url=" in first


def test_partition_writer_takes_python_keywords_and_names_them_in_its_errors(
    local_kinesis: LocalKinesis, stream: str
) -> None:
    python = partition_writer(
        stream,
        endpoint_url=local_kinesis.endpoint_url,
        credentials=("local", "local"),
        verify=True,
        queue_limit_records=100,
        flush_timeout=30,
    )
    spark = partition_writer(
        stream,
        endpointUrl=local_kinesis.endpoint_url,
        awsAccessKeyId="local",
        awsSecretKey="local",
        verifySsl="true",
        queueLimitRecords=100,
        flushTimeout="30",
    )
    assert python.options == spark.options  # type: ignore[attr-defined]
    with pytest.raises(errors.ConfigError, match="endpoint_url must start with http"):
        partition_writer("s", endpoint_url="localhost:4567")
    with pytest.raises(errors.ConfigError, match="flush_timeout must be a positive number"):
        partition_writer("s", flush_timeout=0)
    with pytest.raises(errors.ConfigError, match="verify must be True or False"):
        partition_writer("s", verify="false")
    with pytest.raises(errors.ConfigError, match=r"credentials must be \(access_key"):
        partition_writer("s", credentials="local:local")
    with pytest.raises(errors.ConfigError, match=r"did you mean flush_timeout=\?"):
        partition_writer("s", flush_timout=3)
    with pytest.raises(errors.ConfigError, match="use one style") as mixed:
        partition_writer("s", endpoint_url="http://x", awsAccessKeyId="k", awsSecretKey="s")
    assert "endpoint_url" in str(mixed.value) and "awsAccessKeyId" in str(mixed.value)


def test_partition_writer_names_a_missing_stream_and_its_endpoint_first(
    local_kinesis: LocalKinesis,
) -> None:
    with pytest.raises(errors.ResourceNotFoundError) as raised:
        partition_writer(
            "no-such-stream", endpoint_url=local_kinesis.endpoint_url, credentials=("a", "b")
        )
    first = str(raised.value).splitlines()[0]
    assert first.startswith(f"stream 'no-such-stream' not found at {local_kinesis.endpoint_url}")


@pytest.mark.parametrize(
    ("keywords", "named", "not_named"),
    [
        ({"credentials": ("local", "local")}, "keyword verify=", "verifySsl"),
        ({"awsAccessKeyId": "local", "awsSecretKey": "local"}, "option verifySsl", "verify="),
    ],
)
def test_a_self_signed_endpoint_names_the_setting_the_caller_has(
    local_kinesis: LocalKinesis,
    stream: str,
    keywords: dict[str, Any],
    named: str,
    not_named: str,
) -> None:
    url = "endpoint_url" if "credentials" in keywords else "endpointUrl"
    with pytest.raises(errors.CertificateError) as raised:
        partition_writer(stream, **{url: local_kinesis.tls_endpoint_url}, **keywords)
    message = str(raised.value)
    assert named in message and not_named not in message and "`verify`" not in message
    assert message.startswith(f"DescribeStreamSummary: {local_kinesis.tls_endpoint_url}: ")


def test_a_task_on_a_self_signed_endpoint_names_verify_ssl_in_its_first_line(
    local_kinesis: LocalKinesis, stream: str
) -> None:
    """The executor's side: the task's producer meets the certificate."""
    options = parse_sink_options(
        {
            "streamName": stream,
            "endpointUrl": local_kinesis.tls_endpoint_url,
            "awsAccessKeyId": "local",
            "awsSecretKey": "local",
        }
    )
    with pytest.raises(errors.CertificateError) as raised:
        write_records(options, [[(b"x", "k", None)]])
    first = str(raised.value).splitlines()[0]
    assert "the option verifySsl" in first and "`verify`" not in first


def test_a_null_partition_key_fails_the_task_naming_the_column(
    spark: Any, stream: str, conn: dict[str, str]
) -> None:
    df = spark.createDataFrame([("a", "k"), ("b", None)], "data string, partitionKey string")
    with pytest.raises(PythonException) as failure:
        df.coalesce(1).write.format("kinesis").mode("append").option("streamName", stream).options(
            **conn
        ).save()
    text = str(failure.value)
    assert "column 'partitionKey' is null in row 1" in text


def test_an_unknown_stream_fails_the_write_on_the_driver(spark: Any, conn: dict[str, str]) -> None:
    df = spark.createDataFrame([("a", "k")], "data string, partitionKey string")
    with pytest.raises(AnalysisException) as failure:  # when the writer is made, before tasks
        (
            df.write.format("kinesis")
            .mode("append")
            .option("streamName", "no-such-stream")
            .options(**conn)
            .save()
        )
    text = str(failure.value)
    lines = text.splitlines()
    cause = f"stream 'no-such-stream' not found at {conn['endpointUrl']}"
    at = next(index for index, line in enumerate(lines) if cause in line)
    # Raised from writer(), not from inside the pickler: a few frames above the cause
    # (30 lines of cloudpickle frames and a PicklingError before; 60-74 before that).
    assert at < 16, text
    assert "PicklingError" not in text


def test_a_self_signed_endpoint_fails_the_write_naming_verify_ssl(
    spark: Any, local_kinesis: LocalKinesis, stream: str
) -> None:
    df = spark.createDataFrame([("a", "k")], "data string, partitionKey string")
    with pytest.raises(AnalysisException) as failure:
        (
            df.write.format("kinesis")
            .mode("append")
            .option("streamName", stream)
            .option("endpointUrl", local_kinesis.tls_endpoint_url)
            .option("awsAccessKeyId", "local")
            .option("awsSecretKey", "local")
            .save()
        )
    text = str(failure.value)
    assert "the option verifySsl (false for a self-signed local server" in text
    assert "`verify`" not in text


def test_an_oversized_record_fails_the_task_naming_the_row(
    spark: Any, stream: str, conn: dict[str, str]
) -> None:
    rows = [("small", "k"), ("x" * (1024 * 1024 + 1), "k")]
    df = spark.createDataFrame(rows, "data string, partitionKey string").coalesce(1)
    with pytest.raises(PythonException) as failure:
        df.write.format("kinesis").mode("append").option("streamName", stream).options(
            **conn
        ).save()
    text = str(failure.value)
    assert "row 1 of this task is invalid" in text
    assert "RecordTooLargeError" in text


def test_records_the_stream_never_accepts_fail_the_task_within_flush_timeout(
    spark: Any, stream: str, proxy: FaultProxy
) -> None:
    proxy.decide = lambda r: (
        RejectRecords(frozenset(range(500))) if r.target == "PutRecords" else None
    )
    df = spark.createDataFrame(
        [(f"r{i}", f"k{i}") for i in range(50)], "data string, partitionKey string"
    )
    with pytest.raises(PythonException) as failure:
        (
            df.coalesce(1)
            .write.format("kinesis")
            .mode("append")
            .option("streamName", stream)
            .option("endpointUrl", proxy.endpoint_url)
            .option("awsAccessKeyId", "local")
            .option("awsSecretKey", "local")
            .option("flushTimeout", "2")
            .save()
        )
    text = str(failure.value)
    assert "TimeoutError" in text
    assert "within flushTimeout=2.0s" in text
    assert re.search(r"[1-9]\d* throttled responses", text)  # says why
    assert proxy.stats.rejected_records >= 50


def test_a_task_counts_retries_and_throttles_in_its_commit_message(
    local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy
) -> None:
    calls = 0

    def first_call_throttled(request: Request) -> RejectRecords | None:
        nonlocal calls
        if request.target != "PutRecords":
            return None
        calls += 1
        return RejectRecords(frozenset({0})) if calls == 1 else None

    proxy.decide = first_call_throttled
    options = parse_sink_options(
        {
            "streamName": stream,
            "endpointUrl": proxy.endpoint_url,
            "awsAccessKeyId": "local",
            "awsSecretKey": "local",
            "aggregation": "false",
        }
    )
    rows = [(f"d{i}", f"k{i % 7}", None) for i in range(100)]
    message = write_records(options, [rows[:60], iter(rows[60:])])
    assert (message.records, message.bytes) == (100, sum(len(d) for d, _, _ in rows))
    assert message.retries >= 1
    assert message.throttled >= 1
    assert message.kinesis_records == 100  # not aggregated: one Kinesis record each
    assert pickle.loads(pickle.dumps(message)) == message

    delivered = consume(local_kinesis, stream, len(rows))
    assert _pairs(delivered) == Counter((key, data.encode()) for data, key, _ in rows)


def test_partition_writer_fails_at_once_for_an_unknown_stream(conn: dict[str, str]) -> None:
    with pytest.raises(errors.ResourceNotFoundError, match="no-such-stream"):
        partition_writer("no-such-stream", **conn)


@pytest.mark.anyio
async def test_partition_writer_can_be_made_inside_a_running_event_loop(
    stream: str, conn: dict[str, str]
) -> None:
    # A notebook cell runs inside the kernel's event loop; making the writer describes the
    # stream, which must not need the caller's thread to be free of a loop.
    writer = partition_writer(stream, **conn)
    assert writer.stream_info.max_record_bytes == 1024 * 1024
