"""``KinesisDataSource``: the ``"kinesis"`` format, wiring options to the reader and writers."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.datasource import DataSource

from kinesis_actors.errors import ConfigError

from ._options import parse_sink_options, parse_source_options
from ._schema import spark_schema
from ._sink import KinesisBatchWriter, KinesisStreamWriter
from ._source import KinesisStreamReader

__all__ = ["KinesisDataSource"]

log = logging.getLogger("spark_bridge.source")


class KinesisDataSource(DataSource):
    """Kinesis Data Streams as a Spark data source: a streaming reader, batch and stream writers.

    Options are checked when Spark asks for a reader or writer, on the driver, before any
    network call; a bad one fails the query with a ConfigError naming it.
    """

    @classmethod
    def name(cls) -> str:
        return "kinesis"

    def schema(self) -> Any:
        return spark_schema()

    def streamReader(self, schema: Any) -> Any:
        options = parse_source_options(self.options)
        if options.mode == "efo":
            log.warning(
                "consumerMode=efo: the kinesis source reads with GetRecords and registers no "
                "EFO consumer (a Spark task reads an exact range, which SubscribeToShard cannot "
                "end at); docs/spark.md, 'EFO'"
            )
        return KinesisStreamReader(options)

    def reader(self, schema: Any) -> Any:
        raise ConfigError(
            'the kinesis format is a streaming source: use spark.readStream.format("kinesis") '
            "(add .trigger(availableNow=True) to read what the stream holds now and stop); "
            'spark.read.format("kinesis") has no batch reader'
        )

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return KinesisBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return KinesisStreamWriter(parse_sink_options(self.options), schema)
