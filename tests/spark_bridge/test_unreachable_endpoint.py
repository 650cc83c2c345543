"""An endpointUrl never reached fails the query within ``openTimeout``, naming the endpoint and
the cause, instead of planning in silence: the source's first plan, the sink's describe on the
driver, and a task's range reader (in process, as an executor runs it)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException

from kinesis_actors import errors
from spark_bridge._offsets import Bound, ShardEntry
from spark_bridge._options import parse_connection
from spark_bridge._range import ShardRange, read_ranges
from tests.unreachable import Unreachable, unreachable, warnings_naming

#: Small, so that the tests are quick; the default is 30 s.
OPEN_TIMEOUT = "2"


def _options(endpoint: Unreachable) -> dict[str, str]:
    return {
        "streamName": "nowhere",
        "endpointUrl": endpoint.url,
        "awsAccessKeyId": "a",
        "awsSecretKey": "b",
        "openTimeout": OPEN_TIMEOUT,
    }


def _said(message: str, endpoint: Unreachable) -> None:
    """The cause line, in the words of a Spark user's options."""
    assert f"cannot reach Kinesis at {endpoint.url} ({endpoint.cause}" in message, message
    assert "option openTimeout=2" in message and "option endpointUrl" in message, message


def test_a_refusing_port_fails_the_source_query_at_its_first_plan(
    spark: Any, tmp_path: Path
) -> None:
    with unreachable("refusing_port") as endpoint:
        frame = spark.readStream.format("kinesis").options(**_options(endpoint)).load()
        query = (
            frame.writeStream.format("memory")
            .queryName("unreachable_source")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        try:
            with pytest.raises(StreamingQueryException) as failed:
                query.awaitTermination(120)
        finally:
            query.stop()
    _said(str(failed.value), endpoint)


def test_a_blackhole_fails_the_sink_query_on_the_driver(spark: Any, tmp_path: Path) -> None:
    """The sink describes the stream on the driver before any task: that fails the query."""
    with unreachable("blackhole") as endpoint:
        rows = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
        query = (
            rows.selectExpr(
                "CAST(value AS STRING) AS data", "CAST(value AS STRING) AS partitionKey"
            )
            .writeStream.format("kinesis")
            .options(**_options(endpoint))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        try:
            with pytest.raises((StreamingQueryException, AnalysisException)) as failed:
                query.awaitTermination(120)
        finally:
            query.stop()
    _said(str(failed.value), endpoint)


def test_an_unreachable_endpoint_fails_a_tasks_range_read_naming_it(
    unreachable_endpoint: Unreachable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors")
    connection = parse_connection(_options(unreachable_endpoint))
    shard = ShardRange("nowhere", "shardId-000000000000", ShardEntry(), ShardEntry(Bound(10, 0)))
    rows = read_ranges(connection, [shard], timeout=60.0)
    with pytest.raises(errors.EndpointUnreachableError) as failed:
        next(rows)
    assert failed.value.endpoint == unreachable_endpoint.url
    assert unreachable_endpoint.cause in failed.value.cause
    assert warnings_naming(caplog.records, unreachable_endpoint.url)
