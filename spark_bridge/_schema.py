"""The source's Spark schema, and the cast from the library's Arrow batches to it.

The consumer's batches carry :data:`~kinesis_actors.RECORD_SCHEMA` (snake_case names,
millisecond timestamps). Spark wants the contract's camelCase columns and the exact Arrow
schema ``to_arrow_schema(schema, timezone="UTC")`` gives: microsecond UTC timestamps, and
``not null`` where the Spark field is not nullable. The cast renames and widens the timestamp
column; it copies no data buffers.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kinesis_actors import RECORD_SCHEMA

__all__ = ["SPARK_ARROW_SCHEMA", "spark_schema", "to_spark_batch"]

SPARK_COLUMNS = (
    "stream",
    "shardId",
    "sequenceNumber",
    "subSequenceNumber",
    "partitionKey",
    "explicitHashKey",
    "approximateArrivalTimestamp",
    "data",
)

SPARK_ARROW_SCHEMA = pa.schema(
    [
        pa.field(
            name,
            pa.timestamp("us", tz="UTC") if name.endswith("Timestamp") else f.type,
            nullable=f.nullable,
        )
        for name, f in zip(SPARK_COLUMNS, RECORD_SCHEMA, strict=True)
    ]
)


def spark_schema() -> StructType:
    """The ``StructType`` of the source's rows."""
    types = {
        "stream": StringType(),
        "shardId": StringType(),
        "sequenceNumber": StringType(),
        "subSequenceNumber": LongType(),
        "partitionKey": StringType(),
        "explicitHashKey": StringType(),
        "approximateArrivalTimestamp": TimestampType(),
        "data": BinaryType(),
    }
    return StructType(
        [StructField(f.name, types[f.name], nullable=f.nullable) for f in SPARK_ARROW_SCHEMA]
    )


def to_spark_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A ``RECORD_SCHEMA`` batch as the source's Spark Arrow schema."""
    columns = list(batch.columns)
    columns[6] = columns[6].cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(columns, schema=SPARK_ARROW_SCHEMA)
