"""Spark SQL and the kinesis format: what works, and what Spark does not hand a Python source.

A streaming DataFrame of the source registered as a temporary view is queried with SQL like
any other stream. ``CREATE TEMPORARY VIEW … USING kinesis`` makes a batch relation, which the
source (streaming only) refuses with its usual message; ``INSERT INTO`` a table created
``USING kinesis`` reaches the sink with no options at all (PySpark keeps the table's OPTIONS in
the catalog), and the sink says that instead of a bare "streamName is required".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kinesis_actors import LocalKinesis
from tests.boto import create_stream

pytestmark = pytest.mark.local_kinesis


def _sql_options(local: LocalKinesis, stream: str) -> str:
    key, secret = local.credentials[:2]
    return (
        f"streamName '{stream}', endpointUrl '{local.endpoint_url}', "
        f"awsAccessKeyId '{key}', awsSecretKey '{secret}'"
    )


def test_sql_over_a_temporary_view_of_the_stream_counts_every_key(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    kinesis.put_records(
        StreamName=stream_name,
        Records=[{"Data": b"%d" % i, "PartitionKey": f"key-{i % 3}"} for i in range(30)],
    )
    key, secret = local_kinesis.credentials[:2]
    frame = (
        spark.readStream.format("kinesis")
        .options(
            streamName=stream_name,
            endpointUrl=local_kinesis.endpoint_url,
            awsAccessKeyId=key,
            awsSecretKey=secret,
            initialPosition="TRIM_HORIZON",
        )
        .load()
    )
    frame.createOrReplaceTempView("kinesis_live")
    counts = spark.sql(
        "SELECT partitionKey, count(*) AS records FROM kinesis_live GROUP BY partitionKey"
    )
    query = (
        counts.writeStream.outputMode("complete")
        .format("memory")
        .queryName("key_counts")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    rows = sorted(tuple(row) for row in spark.table("key_counts").collect())
    assert rows == [("key-0", 10), ("key-1", 10), ("key-2", 10)]


def test_a_sql_view_using_kinesis_is_a_batch_read_and_says_to_use_read_stream(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW kinesis_batch USING kinesis "
        f"OPTIONS ({_sql_options(local_kinesis, stream_name)})"
    )
    with pytest.raises(Exception, match=r"streaming source: use spark\.readStream"):
        spark.sql("SELECT count(*) FROM kinesis_batch").collect()


def test_insert_into_a_table_using_kinesis_says_spark_passed_no_options(
    spark: Any, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    spark.sql(
        "CREATE TABLE IF NOT EXISTS kinesis_table (data STRING, partitionKey STRING) "
        f"USING kinesis OPTIONS ({_sql_options(local_kinesis, stream_name)})"
    )
    with pytest.raises(Exception, match="got no options at all"):
        spark.sql("INSERT INTO kinesis_table VALUES ('hello', 'k1')").collect()
