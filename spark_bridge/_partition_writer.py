"""``partition_writer``: the sink as a function for ``df.foreachPartition``.

For jobs that already use ``foreachPartition`` or want the sink without the data source
(RDD-style code). Rows have the sink's columns: ``data`` (binary or string, sent as UTF-8),
``partitionKey`` (string), optionally ``explicitHashKey``. Like the data source's writers it
is at least once: a failed task is retried by Spark and rewrites what it had written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kinesis_actors.errors import ConfigError, ValidationError
from kinesis_actors.producer import StreamInfo

from ._options import SinkOptions, parse_sink_options
from ._sink import Record, check_input_columns, describe_target, write_records

__all__ = ["partition_writer"]

log = logging.getLogger("spark_bridge.sink")

_OPTIONS = (
    "region",
    "endpointUrl",
    "verifySsl",
    "awsAccessKeyId",
    "awsSecretKey",
    "sessionToken",
    "roleArn",
    "roleSessionName",
    "roleExternalId",
    "stsEndpoint",
    "stsRegion",
    "aggregation",
    "queueLimitRecords",
    "flushTimeout",
)
_BY_LOWER = {name.lower(): name for name in _OPTIONS}
_CHUNK = 2_048


def _option_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(f"option {name} must be a string, number or bool, got {type(value).__name__}")


def partition_writer(stream: str, **connection_options: Any) -> Callable[[Iterator[Any]], None]:
    """A picklable function for ``df.foreachPartition`` that writes rows to ``stream``.

    ``connection_options`` take the Spark options' names: ``region``, ``endpointUrl``,
    ``verifySsl``, ``awsAccessKeyId``, ``awsSecretKey``, ``sessionToken``, the role to assume
    (``roleArn``, ``roleSessionName``, ``roleExternalId``, ``stsEndpoint``, ``stsRegion``:
    assumed once per Python worker process, not per task), and the sink's
    ``aggregation``, ``queueLimitRecords``, ``flushTimeout`` (values may be Python bools and
    numbers). They are checked here, on the driver: a bad one raises a ConfigError naming it,
    and the stream is described once (ResourceNotFoundError if it does not exist); the tasks
    reuse that description rather than each calling DescribeStreamSummary (lesson 10).
    Each task opens its producer (and event loop) when its first row arrives, flushes within
    ``flushTimeout`` and closes before returning; a record that fails fails the task.

    At least once: Spark retries a failed task, and the rows it had written are written again.
    """
    if not isinstance(stream, str) or not stream.strip():
        raise ConfigError(f"partition_writer: stream must be a stream name, got {stream!r}")
    options: dict[str, str] = {"streamName": stream}
    for name, value in connection_options.items():
        canonical = _BY_LOWER.get(name.lower())
        if canonical is None:
            raise ConfigError(
                f"partition_writer: unknown option {name!r}; expected one of {', '.join(_OPTIONS)}"
            )
        options[canonical] = _option_text(canonical, value)
    parsed = parse_sink_options(options)
    return _PartitionWriter(parsed, describe_target(parsed))


@dataclass(frozen=True, slots=True)
class _PartitionWriter:
    """The function ``partition_writer`` returns: pickles as its parsed options and the
    driver's description of the stream."""

    options: SinkOptions
    stream_info: StreamInfo

    def __call__(self, rows: Iterator[Any]) -> None:
        message = write_records(self.options, _row_chunks(rows), self.stream_info)
        log.info(
            "partition_writer: wrote %d records (%d bytes) to %r in %.2fs, %d retries",
            message.records,
            message.bytes,
            self.options.stream,
            message.seconds,
            message.retries,
        )


def _row_chunks(rows: Iterator[Any]) -> Iterator[Iterable[Record]]:
    """Rows as ``(data, key, hash_key)`` tuples in chunks; the first row fixes the columns."""
    data_at = key_at = -1
    hash_at: int | None = None
    chunk: list[Record] = []
    for index, row in enumerate(rows):
        if data_at < 0:
            names = list(row.__fields__)
            check_input_columns(names)
            data_at, key_at = names.index("data"), names.index("partitionKey")
            hash_at = names.index("explicitHashKey") if "explicitHashKey" in names else None
        data, key = row[data_at], row[key_at]
        if data is None or key is None:
            column = "data" if data is None else "partitionKey"
            raise ValidationError(
                f"kinesis sink: column {column!r} is null in row {index} of this task; "
                "every row needs data and a partition key"
            )
        if isinstance(data, bytearray):
            data = bytes(data)
        chunk.append((data, key, None if hash_at is None else row[hash_at]))
        if len(chunk) >= _CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
