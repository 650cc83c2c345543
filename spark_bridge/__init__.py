"""Spark Structured Streaming on Kinesis with PySpark's Python Data Source API.

``register(spark)`` adds the ``"kinesis"`` format: ``spark.readStream.format("kinesis")`` reads
Arrow batches into micro-batches, exactly once across restarts (the driver plans each
micro-batch's exact end, the executors read their shards); ``df.write`` and
``df.writeStream`` with ``format("kinesis")`` write through the producer, at least once.
``partition_writer(...)`` is the same writer for ``df.foreachPartition``. See docs/spark.md.
"""

from __future__ import annotations

import logging
from typing import Any

from ._datasource import KinesisDataSource
from ._partition_writer import partition_writer

__all__ = ["KinesisDataSource", "partition_writer", "register"]

log = logging.getLogger("spark_bridge")


def register(spark: Any) -> None:
    """Register the ``"kinesis"`` data source with ``spark`` (a ``SparkSession``).

    Speculative execution runs a task twice: for the sink that writes records twice (it is
    at-least-once anyway), for the source it reads a shard's range twice (the same rows, since
    a range is fixed by its offsets; Spark keeps one result, but the reads count against the
    shard's 5 calls/s). It is detected here and warned about.

    A Spark Connect session may refuse to read a setting (serverless platforms allow only a
    few): then there is nothing to warn about from here, and registering goes on.
    """
    spark.dataSource.register(KinesisDataSource)
    try:
        speculation = str(spark.conf.get("spark.speculation", "false")).strip().lower()
    except Exception as exc:  # whatever the session raises: the warning is a courtesy
        log.debug("could not read spark.speculation (%s); not checking it", exc)
        return
    if speculation == "true":
        log.warning(
            "spark.speculation is on: the kinesis sink writes a speculative task's rows twice "
            "(at-least-once), and a speculative source task reads its shard range twice (the "
            "same rows, but twice the reads against the shard's 5 GetRecords/s); turn it off "
            "for queries that use the kinesis format"
        )
