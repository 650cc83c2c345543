"""The streaming source against real Spark (local mode) and the local Kinesis server."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kinesis_actors import LocalKinesis, ProducerConfig, errors
from kinesis_actors.sync import SyncProducer
from tests.boto import create_stream
from tests.spark_bridge._query_job import launch

pytestmark = pytest.mark.local_kinesis


def _options(local: LocalKinesis, stream: str, **extra: str) -> dict[str, str]:
    key, secret = local.credentials[:2]
    return {
        "streamName": stream,
        "endpointUrl": local.endpoint_url,
        "awsAccessKeyId": key,
        "awsSecretKey": secret,
        **extra,
    }


def _produce(local: LocalKinesis, stream: str, count: int, *, aggregation: bool = True) -> None:
    with SyncProducer(
        stream,
        endpoint_url=local.endpoint_url,
        credentials=local.credentials,
        config=ProducerConfig(linger=0.02, aggregation=aggregation),
    ) as producer:
        for i in range(count):
            producer.put(b"record-%06d" % i, f"key-{i % 50}")
        producer.flush()


def _drain(spark: Any, options: dict[str, str], checkpoint: Path, name: str) -> Any:
    """Run the query with AvailableNow into a memory sink; return the sink's rows."""
    frame = spark.readStream.format("kinesis").options(**options).load()
    query = (
        frame.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert not query.isActive, "AvailableNow did not end the query"
    assert query.exception() is None, query.exception()
    return query


def test_ten_thousand_records_arrive_exactly_once_with_the_contract_columns(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    create_stream(local_kinesis, stream_name, 4)
    _produce(local_kinesis, stream_name, 10_000)
    _drain(spark, _options(local_kinesis, stream_name), tmp_path / "cp", "ten_k")
    frame = spark.table("ten_k")
    assert frame.columns == [
        "stream",
        "shardId",
        "sequenceNumber",
        "subSequenceNumber",
        "partitionKey",
        "explicitHashKey",
        "approximateArrivalTimestamp",
        "data",
    ]
    types = dict(frame.dtypes)
    assert types["subSequenceNumber"] == "bigint"
    assert types["approximateArrivalTimestamp"] == "timestamp"
    assert types["data"] == "binary"
    rows = frame.collect()
    datas = sorted(bytes(row.data) for row in rows)
    assert datas == [b"record-%06d" % i for i in range(10_000)]
    assert {row.stream for row in rows} == {stream_name}
    assert len({row.shardId for row in rows}) == 4
    assert max(row.subSequenceNumber for row in rows) > 0, "nothing was aggregated"


class _Collect:
    """A ``foreachBatch`` function keeping each micro-batch's rows by batch id.

    ``fail_on`` makes the batch with that id fail once after its rows were seen: Spark has
    logged its offsets but not committed it, so the next run must replay it.
    """

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: dict[int, list[tuple[str, str, int, bytes]]] = {}
        self.attempts: dict[int, list[list[tuple[str, str, int, bytes]]]] = {}
        self.fail_on = fail_on

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = sorted(
            (row.shardId, row.sequenceNumber, row.subSequenceNumber, bytes(row.data))
            for row in frame.select(
                "shardId", "sequenceNumber", "subSequenceNumber", "data"
            ).collect()
        )
        self.attempts.setdefault(batch_id, []).append(rows)
        if batch_id == self.fail_on:
            self.fail_on = None
            raise RuntimeError("injected failure after the batch was read")
        self.batches[batch_id] = rows


def _run_batches(
    spark: Any, options: dict[str, str], checkpoint: Path, collect: _Collect
) -> BaseException | None:
    frame = spark.readStream.format("kinesis").options(**options).load()
    query = (
        frame.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(180)
    except Exception as exc:
        return exc
    assert not query.isActive
    return query.exception()


def test_a_batch_failed_after_reading_is_replayed_with_exactly_the_same_records(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    create_stream(local_kinesis, stream_name, 3)
    _produce(local_kinesis, stream_name, 3000)
    options = _options(local_kinesis, stream_name, maxRecordsPerTrigger="700")
    collect = _Collect(fail_on=2)
    failure = _run_batches(spark, options, tmp_path / "cp", collect)
    assert failure is not None and "injected failure" in str(failure)
    assert set(collect.batches) == {0, 1}
    logged = json.loads((tmp_path / "cp" / "offsets" / "2").read_text().splitlines()[-1])
    assert logged["version"] == 2

    assert _run_batches(spark, options, tmp_path / "cp", collect) is None
    first, replayed = collect.attempts[2]
    assert replayed == first, "the replayed batch read different records"
    assert all(len(rows) <= 700 for rows in collect.batches.values())
    everything = [row for rows in collect.batches.values() for row in rows]
    assert len(everything) == len(set(everything)) == 3000
    assert sorted(row[3] for row in everything) == [b"record-%06d" % i for i in range(3000)]


KEYS = [f"k{i}" for i in range(20)]


def _put_rounds(kinesis: Any, stream: str, rounds: range) -> None:
    for round_ in rounds:
        answer = kinesis.put_records(
            StreamName=stream,
            Records=[{"Data": f"{key}:{round_}".encode(), "PartitionKey": key} for key in KEYS],
        )
        assert answer["FailedRecordCount"] == 0


def _split_first_shard(kinesis: Any, stream: str) -> None:
    first = kinesis.list_shards(StreamName=stream)["Shards"][0]
    low, high = (int(first["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    kinesis.split_shard(
        StreamName=stream, ShardToSplit=first["ShardId"], NewStartingHashKey=str((low + high) // 2)
    )
    kinesis.get_waiter("stream_exists").wait(
        StreamName=stream, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )


def test_a_split_between_micro_batches_loses_nothing_and_keeps_parents_first(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    # No read limit: the planner cuts on anchors, a window of arrival time at most per batch.
    options = _options(local_kinesis, stream_name, arrivalWindowPerTrigger="500ms")
    collect = _Collect()
    _put_rounds(kinesis, stream_name, range(0, 5))
    assert _run_batches(spark, options, tmp_path / "cp", collect) is None
    _put_rounds(kinesis, stream_name, range(5, 10))  # unread in the parent at the split
    _split_first_shard(kinesis, stream_name)
    _put_rounds(kinesis, stream_name, range(10, 20))
    assert _run_batches(spark, options, tmp_path / "cp", collect) is None

    everything = [
        (batch_id, int(sequence), data.decode())
        for batch_id, rows in collect.batches.items()
        for _shard, sequence, _sub, data in rows
    ]
    assert len(everything) == len({row[2] for row in everything}) == 20 * len(KEYS)
    rounds: dict[str, list[int]] = {}
    for _batch, _sequence, data in sorted(everything):
        key, round_ = data.split(":")
        rounds.setdefault(key, []).append(int(round_))
    for key in KEYS:
        assert rounds[key] == list(range(20)), f"{key} out of order: {rounds[key]}"
    assert len(collect.batches) >= 3, "the window did not split the run into micro-batches"
    shards = {shard for rows in collect.batches.values() for shard, *_ in rows}
    assert len(shards) == 4, shards  # the split parent, its sibling and two children


def test_available_now_reads_what_existed_at_start_in_batches_of_the_limit(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    _produce(local_kinesis, stream_name, 2500)
    options = _options(local_kinesis, stream_name, maxRecordsPerTrigger="1000")

    class LateWriter(_Collect):
        """Puts more records while the first micro-batch runs: after the query started."""

        def __call__(self, frame: Any, batch_id: int) -> None:
            if batch_id == 0:
                kinesis.put_records(
                    StreamName=stream_name,
                    Records=[{"Data": b"late-%d" % i, "PartitionKey": "late"} for i in range(50)],
                )
            super().__call__(frame, batch_id)

    collect = LateWriter()
    assert _run_batches(spark, options, tmp_path / "cp", collect) is None
    sizes = [len(collect.batches[i]) for i in sorted(collect.batches)]
    assert max(sizes) <= 1000 and sum(sizes) == 2500, sizes
    assert len(sizes) >= 3
    datas = sorted(row[3] for rows in collect.batches.values() for row in rows)
    assert datas == [b"record-%06d" % i for i in range(2500)]

    later = _Collect()  # the next AvailableNow run picks the late records up, and only them
    assert _run_batches(spark, options, tmp_path / "cp", later) is None
    late = sorted(row[3] for rows in later.batches.values() for row in rows)
    assert late == sorted(b"late-%d" % i for i in range(50))


def test_efo_mode_reads_every_record_with_get_records_and_registers_no_consumer(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    _produce(local_kinesis, stream_name, 1500)
    options = _options(
        local_kinesis,
        stream_name,
        endpointUrl=local_kinesis.tls_endpoint_url,
        verifySsl="false",
        consumerMode="efo",
        consumerName="spark-test",
        deregisterConsumer="true",
    )
    collect = _Collect()
    assert _run_batches(spark, options, tmp_path / "cp", collect) is None
    datas = sorted(row[3] for rows in collect.batches.values() for row in rows)
    assert datas == [b"record-%06d" % i for i in range(1500)]
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    # Executors read exact ranges with GetRecords in both modes (docs/spark.md, "EFO"): a
    # SubscribeToShard cannot end at a cut, so no consumer is registered at all.
    assert kinesis.list_stream_consumers(StreamARN=arn)["Consumers"] == []


def test_a_batch_read_says_to_use_read_stream(spark: Any, local_kinesis: LocalKinesis) -> None:
    with pytest.raises(Exception, match=r"readStream"):
        spark.read.format("kinesis").options(**_options(local_kinesis, "any")).load().collect()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"streamName": None}, "streamName"),
        ({"initialPosition": "yesterday"}, "initialPosition"),
        ({"initialPosition": "at_timestamp:not-a-date"}, "initialPosition"),
        ({"maxRecordsPerTrigger": "-5"}, "maxRecordsPerTrigger"),
        ({"maxBytesPerTrigger": "0"}, "maxBytesPerTrigger"),
        ({"consumerMode": "push"}, "consumerMode"),
        ({"verifySsl": "maybe"}, "verifySsl"),
        ({"maxRecordPerTrigger": "10"}, "maxrecordpertrigger"),
    ],
)
def test_bad_options_fail_at_query_start_naming_the_option(
    spark: Any, local_kinesis: LocalKinesis, tmp_path: Path, options: dict[str, Any], named: str
) -> None:
    given = {**_options(local_kinesis, "some-stream"), **options}
    given = {k: v for k, v in given.items() if v is not None}
    with pytest.raises(Exception, match=named):
        frame = spark.readStream.format("kinesis").options(**given).load()
        query = (
            frame.writeStream.format("memory")
            .queryName(f"bad_{abs(hash(named))}")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .start()
        )
        try:
            query.awaitTermination(60)
        finally:
            query.stop()


@pytest.mark.slow
def test_killing_the_driver_mid_stream_loses_and_repeats_nothing(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    _produce(local_kinesis, stream_name, 4000)
    options = _options(local_kinesis, stream_name, maxRecordsPerTrigger="300")
    output, checkpoint = tmp_path / "out", tmp_path / "cp"
    first = launch(options, output, checkpoint, "continuous")
    try:
        commits = checkpoint / "commits"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and first.poll() is None:
            if commits.is_dir() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 3:
                break
            time.sleep(0.05)  # polling another process's files: there is no event to await
        assert first.poll() is None, "the first run ended by itself"
        assert len([p for p in commits.iterdir() if p.name.isdigit()]) >= 3
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    offsets = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    assert len(offsets) < 4000 // 300, "the first run read everything before the kill"

    second = launch(options, output, checkpoint, "available-now")
    assert second.wait(180) == 0
    # The job keeps its sink log uncompacted (see _query_job); reading it back must expect
    # the same, or Spark looks for a compaction file that was never written.
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "1000000")
    rows = spark.read.parquet(str(output)).collect()
    keys = [(r.shardId, r.sequenceNumber, r.subSequenceNumber) for r in rows]
    assert len(keys) == len(set(keys)), "a record was written twice"
    assert sorted(bytes(r.data) for r in rows) == [b"record-%06d" % i for i in range(4000)]


def _reader(endpoint: str, stream: str) -> Any:
    from spark_bridge._options import parse_source_options
    from spark_bridge._source import KinesisStreamReader

    options = parse_source_options(
        {
            "streamName": stream,
            "endpointUrl": endpoint,
            "awsAccessKeyId": "local",
            "awsSecretKey": "local",
            "initialPosition": "latest",  # the first offset lists the shards: a call
        }
    )
    return KinesisStreamReader(options)


def test_the_source_on_a_self_signed_endpoint_names_verify_ssl(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    reader = _reader(local_kinesis.tls_endpoint_url, stream_name)
    try:
        with pytest.raises(errors.CertificateError) as raised:
            reader.initialOffset()
    finally:
        reader.stop()
    first = str(raised.value).splitlines()[0]
    assert "the option verifySsl" in first and "`verify`" not in first


def test_the_source_names_a_missing_stream_and_its_endpoint_first(
    local_kinesis: LocalKinesis,
) -> None:
    reader = _reader(local_kinesis.endpoint_url, "no-such-stream")
    try:
        with pytest.raises(errors.ResourceNotFoundError) as raised:
            reader.initialOffset()
    finally:
        reader.stop()
    first = str(raised.value).splitlines()[0]
    assert first.startswith(f"stream 'no-such-stream' not found at {local_kinesis.endpoint_url}")


def test_a_5_mib_record_goes_through_the_sink_and_comes_back_through_the_source(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    """On a stream whose ``MaxRecordSizeInKiB`` is 10240, the sink writes a 5 MiB row (alone
    in its call) and the source reads it back whole. One row: the local server takes about
    0.7 s a MiB to store a large record (boto3 alike); the producer and the consumers carry
    10 MiB records in tests/producer/test_large_records_local.py."""
    kinesis = create_stream(local_kinesis, stream_name, 1)
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    kinesis.update_max_record_size(StreamARN=arn, MaxRecordSizeInKiB=10240)
    mib = 1024 * 1024
    rows = [(bytes([1]) * (5 * mib), "five"), (b"small", "small")]
    options = _options(local_kinesis, stream_name)
    frame = spark.createDataFrame(rows, "data binary, partitionKey string").coalesce(1)
    frame.write.format("kinesis").mode("append").options(**options).save()
    _drain(spark, options, tmp_path / "cp", "large")
    read = spark.table("large").select("partitionKey", "data").collect()
    assert sorted((row.partitionKey, bytes(row.data)) for row in read) == sorted(
        (key, data) for data, key in rows
    )


def test_starting_positions_resume_a_named_shard_mid_aggregate_and_the_rest_at_the_initial_position(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    """A consumer's positions document (here cut inside a KPL aggregate of shard 0) starts a
    new query exactly after that user record; shard 1, not named, starts at TRIM_HORIZON."""
    create_stream(local_kinesis, stream_name, 2)
    _produce(local_kinesis, stream_name, 600)
    options = _options(local_kinesis, stream_name)
    _drain(spark, options, tmp_path / "all", "every_row")
    every = sorted(
        (row.shardId, int(row.sequenceNumber), row.subSequenceNumber, bytes(row.data))
        for row in spark.table("every_row").collect()
    )
    first = [row for row in every if row[0] == "shardId-000000000000"]
    cut = next(row for row in first[len(first) // 2 :] if row[2] > 0)  # inside an aggregate
    positions = {
        "version": 1,
        "streams": {
            stream_name: {
                "shardId-000000000000": {
                    "sequence_number": str(cut[1]),
                    "sub_sequence_number": cut[2],
                }
            }
        },
    }
    resumed = dict(options, startingPositions=json.dumps(positions))
    _drain(spark, resumed, tmp_path / "resumed", "resumed_rows")
    got = sorted(
        (row.shardId, int(row.sequenceNumber), row.subSequenceNumber, bytes(row.data))
        for row in spark.table("resumed_rows").collect()
    )
    expected = [row for row in every if row[0] != cut[0] or row[1:3] > cut[1:3]]
    assert got == expected
    assert 0 < len([row for row in got if row[0] == cut[0]]) < len(first)
