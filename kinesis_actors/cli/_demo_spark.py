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


# Everything Spark logs goes to one file; the demo's terminal shows only the demo. Spark's own
# template quiets Jetty the same way.
_LOG4J2 = """\
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
"""


def start_spark(log: Path) -> Any:
    """A local Spark session with the ``kinesis`` format registered (takes ~10 s).

    Nothing of Spark's reaches the terminal: its log4j2 logs (INFO and up) go to ``log``, and
    so does whatever the JVM and its Python workers write to stdout and stderr (the JVM's
    startup warnings, "Using Spark's default log4j profile"); the console progress bars
    (``[Stage 5:====>  (1 + 2) / 3]``) are off.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # pyspark is an extra, and PySpark's convention is imports where they are used.
    from pyspark import SparkConf, SparkContext  # noqa: PLC0415
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415

    import spark_bridge  # noqa: PLC0415

    log4j2 = log.with_name("spark-log4j2.properties")
    log4j2.write_text(_LOG4J2.format(path=log.resolve()))
    conf = (
        SparkConf()
        .setMaster("local[2]")
        .setAppName("kinesis-actors-demo")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.sql.shuffle.partitions", "2")
        .set("spark.sql.session.timeZone", "UTC")
        .set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j2.as_uri()}")
    )
    # The JVM gets the file as its stdout and stderr; it keeps its own copy of the handle.
    with log.open("ab") as output:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]  # pyspark leaves it untyped
            conf, popen_kwargs={"stdout": output, "stderr": output}
        )
    SparkContext(conf=conf, gateway=gateway)
    spark = SparkSession.builder.getOrCreate()
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
