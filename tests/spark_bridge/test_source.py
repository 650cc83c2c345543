"""The streaming source against real Spark (local mode) and the local Kinesis server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kinesis_actors import LocalKinesis, ProducerConfig
from kinesis_actors.sync import SyncProducer
from tests.boto import create_stream

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
            for row in frame.select("shardId", "sequenceNumber", "subSequenceNumber", "data")
            .collect()
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

    assert _run_batches(spark, options, tmp_path / "cp", collect) is None
    first, replayed = collect.attempts[2]
    assert replayed == first, "the replayed batch read different records"
    assert all(len(rows) <= 700 for rows in collect.batches.values())
    everything = [row for rows in collect.batches.values() for row in rows]
    assert len(everything) == len(set(everything)) == 3000
    assert sorted(row[3] for row in everything) == [b"record-%06d" % i for i in range(3000)]
