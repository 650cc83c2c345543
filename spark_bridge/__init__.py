"""Spark Structured Streaming on Kinesis with PySpark's Python Data Source API.

``register(spark)`` adds the ``"kinesis"`` format: ``spark.readStream.format("kinesis")`` reads
Arrow batches into micro-batches, exactly once across restarts; ``df.write`` and
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
    at-least-once anyway), for the source it reads a shard range twice (harmless, Spark keeps
    one result, but it doubles the reads against the shard's 5 calls/s). It is detected here
    and warned about (lesson 27).
    """
    spark.dataSource.register(KinesisDataSource)
    speculation = str(spark.conf.get("spark.speculation", "false")).strip().lower()
    if speculation == "true":
        log.warning(
            "spark.speculation is on: speculative tasks read Kinesis shard ranges twice and "
            "the kinesis sink writes their rows twice (at-least-once); turn it off for "
            "queries that use the kinesis format"
        )
