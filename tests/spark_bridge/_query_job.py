"""A streaming query in a process of its own, for the kill test: kinesis -> parquet.

Usage: python -m tests.spark_bridge._query_job OPTIONS_JSON OUTPUT CHECKPOINT MODE
MODE is ``continuous`` (a processing-time trigger, runs until killed) or ``available-now``.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    options, output, checkpoint, mode = json.loads(sys.argv[1]), *sys.argv[2:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_bridge

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark_bridge.register(spark)
    frame = spark.readStream.format("kinesis").options(**options).load()
    writer = (
        frame.select("shardId", "sequenceNumber", "subSequenceNumber", "data")
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
