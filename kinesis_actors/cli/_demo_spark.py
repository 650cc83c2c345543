"""The demo's Spark stage: a micro-batch query from the source stream to the sink stream.

Blocking code (PySpark), run in a worker thread by the demo. The query reads the source
stream with the ``kinesis`` format (Arrow batches, ``Trigger.AvailableNow``), upper-cases
each record's payload, and writes every micro-batch both to the sink stream (the ``kinesis``
sink, through the producer) and to a parquet folder.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SparkStage", "start_spark"]


@dataclass
class SparkStage:
    """What the Spark stage did: rows through the query, micro-batches, seconds."""

    rows: int = 0
    batches: int = 0
    seconds: float = 0.0


def start_spark() -> Any:
    """A local Spark session with the ``kinesis`` format registered (takes ~10 s)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark is an extra

    import spark_bridge  # noqa: PLC0415

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kinesis-actors-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_bridge.register(spark)
    return spark


def run_query(
    spark: Any,
    *,
    source: str,
    sink: str,
    connection: dict[str, str],
    output: Path,
    checkpoint: Path,
    on_batch: Any,
) -> SparkStage:
    """Run the query until it has drained what the source stream held when it started."""

    from pyspark.sql import functions as F  # noqa: PLC0415 - an extra; its convention

    stage = SparkStage()
    started = time.perf_counter()

    def each_batch(frame: Any, batch_id: int) -> None:
        frame = frame.select(
            F.upper(F.col("data").cast("string")).alias("data"),
            F.col("partitionKey"),
        ).persist()
        try:
            frame.write.format("kinesis").mode("append").option("streamName", sink).options(
                **connection
            ).save()
            frame.write.mode("append").parquet(str(output))
            rows = frame.count()
        finally:
            frame.unpersist()
        stage.rows += rows
        stage.batches += 1
        on_batch(rows)

    query = (
        spark.readStream.format("kinesis")
        .option("streamName", source)
        .option("maxRecordsPerTrigger", "5000")
        .options(**connection)
        .load()
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"the Spark query failed: {failure}")
    stage.seconds = time.perf_counter() - started
    return stage
