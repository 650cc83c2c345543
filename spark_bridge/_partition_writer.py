"""``partition_writer``: the sink as a function for ``df.foreachPartition``.

For jobs that already use ``foreachPartition`` or want the sink without the data source
(RDD-style code). Rows have the sink's columns: ``data`` (binary or string, sent as UTF-8),
``partitionKey`` (string), optionally ``explicitHashKey``. Like the data source's writers it
is at least once: a failed task is retried by Spark and rewrites what it had written.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kinesis_actors.errors import ConfigError, ValidationError
from kinesis_actors.producer import StreamInfo

from ._options import SinkOptions, closest, parse_sink_options
from ._sink import Record, check_input_columns, describe_target, write_records

__all__ = ["partition_writer"]

log = logging.getLogger("spark_bridge.sink")

#: The keywords, as Python spells them (``KinesisClient``'s and ``ProducerConfig``'s names)...
_PYTHON = (
    "region",
    "endpoint_url",
    "verify",
    "credentials",
    "aggregation",
    "queue_limit_records",
    "flush_timeout",
    "open_timeout",
    "role_arn",
    "role_session_name",
    "role_external_id",
    "sts_endpoint",
    "sts_region",
)
#: ...and as the Spark options spell them, accepted too: a job that already holds its sink's
#: options in a dict passes it as it is (``partition_writer(stream, **options)``).
_SPARK = (
    "region",
    "endpointUrl",
    "verifySsl",
    "awsAccessKeyId",
    "awsSecretKey",
    "sessionToken",
    "aggregation",
    "queueLimitRecords",
    "flushTimeout",
    "openTimeout",
    "roleArn",
    "roleSessionName",
    "roleExternalId",
    "stsEndpoint",
    "stsRegion",
)
#: The role to assume, as Python spells it and as the Spark options do.
_ROLE = {
    "role_arn": "roleArn",
    "role_session_name": "roleSessionName",
    "role_external_id": "roleExternalId",
    "sts_endpoint": "stsEndpoint",
    "sts_region": "stsRegion",
}
_SPARK_BY_LOWER = {name.lower(): name for name in _SPARK}
_SHARED = frozenset(_PYTHON) & frozenset(_SPARK)
_CHUNK = 2_048


def partition_writer(stream: str, **options: Any) -> Callable[[Iterator[Any]], None]:
    """A picklable function for ``df.foreachPartition`` that writes rows to ``stream``.

    Keywords as ``KinesisClient`` and ``ProducerConfig`` name them: ``region``,
    ``endpoint_url``, ``verify`` (bool), ``credentials`` (``(access_key, secret_key)`` or
    ``(access_key, secret_key, token)``), ``aggregation`` (bool), ``queue_limit_records``
    (int), ``flush_timeout`` (seconds), ``open_timeout`` (seconds, ``ClientConfig``'s: how
    long an endpoint never reached is tried), and the role to assume (``role_arn``,
    ``role_session_name``, ``role_external_id``, ``sts_endpoint``, ``sts_region``: assumed
    once per Python worker process, not per task). The Spark sink's option names
    (``endpointUrl``, ``verifySsl``, ``awsAccessKeyId``, ``awsSecretKey``, ``sessionToken``,
    ``queueLimitRecords``, ``flushTimeout``, ``openTimeout``, ``roleArn``, ``roleSessionName``,
    ``roleExternalId``, ``stsEndpoint``, ``stsRegion``; strings, numbers or bools) are
    accepted too, for a job that passes its sink's options dict as it is; one call uses one
    style. They are
    checked here, on the driver: a bad one raises a ConfigError naming it as it was given,
    and the stream is described once (ResourceNotFoundError if it does not exist); the tasks
    reuse that description rather than each calling DescribeStreamSummary (an
    account-wide limit of 20 calls a second).
    Each task opens its producer (and event loop) when its first row arrives, flushes within
    ``flush_timeout`` and closes before returning; a record that fails fails the task.

    At least once: Spark retries a failed task, and the rows it had written are written again.
    """
    if not isinstance(stream, str) or not stream.strip():
        raise ConfigError(f"partition_writer: stream must be a stream name, got {stream!r}")
    _check_names(options)
    spark_style = any(name not in _PYTHON for name in options)
    spark_options = _from_spark(options) if spark_style else _from_python(options)
    parsed = parse_sink_options({"streamName": stream, **spark_options})
    hint = "verifySsl" if spark_style else "verify"  # the setting this caller knows
    return _PartitionWriter(parsed, describe_target(parsed, hint=hint), hint)


def _check_names(options: dict[str, Any]) -> None:
    """Unknown keywords (with the closest known one) and a mix of the two styles."""
    for name in options:
        if name not in _PYTHON and name.lower() not in _SPARK_BY_LOWER:
            guess = closest(name, _PYTHON + _SPARK)
            hint = f"; did you mean {guess}=?" if guess is not None else ""
            raise ConfigError(
                f"partition_writer: unknown keyword {name}={hint} It takes "
                f"{', '.join(_PYTHON)} (or the Spark sink's option names: "
                f"{', '.join(name for name in _SPARK if name not in _SHARED)})"
            )
    python = sorted(name for name in options if name in _PYTHON and name not in _SHARED)
    spark = sorted(name for name in options if name not in _PYTHON)
    if python and spark:
        raise ConfigError(
            f"partition_writer: {', '.join(python)} are Python keywords and "
            f"{', '.join(spark)} Spark option names; use one style "
            f"(e.g. endpoint_url= with verify=, or endpointUrl= with verifySsl=)"
        )


def _from_spark(options: dict[str, Any]) -> dict[str, str]:
    """Spark option names: their values as the option strings Spark would pass."""
    return {
        _SPARK_BY_LOWER[name.lower()]: _option_text(_SPARK_BY_LOWER[name.lower()], value)
        for name, value in options.items()
    }


def _option_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(f"option {name} must be a string, number or bool, got {type(value).__name__}")


def _from_python(options: dict[str, Any]) -> dict[str, str]:
    """Python keywords, checked with their own names, as the Spark options they stand for."""
    out: dict[str, str] = {}
    region = options.get("region")
    if region is not None:
        if not isinstance(region, str) or not region.strip():
            raise ConfigError(f"partition_writer: region must be a region name, got {region!r}")
        out["region"] = region
    endpoint = options.get("endpoint_url")
    if endpoint is not None:
        if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
            raise ConfigError(
                f"partition_writer: endpoint_url must start with http:// or https://, "
                f"got {endpoint!r}"
            )
        out["endpointUrl"] = endpoint
    for name, option in (("verify", "verifySsl"), ("aggregation", "aggregation")):
        value = options.get(name)
        if value is not None:
            if not isinstance(value, bool):
                raise ConfigError(f"partition_writer: {name} must be True or False, got {value!r}")
            out[option] = "true" if value else "false"
    credentials = options.get("credentials")
    if credentials is not None:
        if (
            not isinstance(credentials, tuple)
            or len(credentials) not in (2, 3)
            or not all(isinstance(part, str) and part for part in credentials)
        ):
            raise ConfigError(
                "partition_writer: credentials must be (access_key, secret_key) or "
                "(access_key, secret_key, token), non-empty strings"
            )
        out["awsAccessKeyId"], out["awsSecretKey"] = credentials[0], credentials[1]
        if len(credentials) == 3:
            out["sessionToken"] = credentials[2]
    limit = options.get("queue_limit_records")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ConfigError(
                f"partition_writer: queue_limit_records must be a positive int, got {limit!r}"
            )
        out["queueLimitRecords"] = str(limit)
    for name, option in (("flush_timeout", "flushTimeout"), ("open_timeout", "openTimeout")):
        timeout = options.get(name)
        if timeout is None:
            continue
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < math.inf
        ):
            raise ConfigError(
                f"partition_writer: {name} must be a positive number of seconds, got {timeout!r}"
            )
        out[option] = repr(float(timeout))
    for name, option in _ROLE.items():
        value = options.get(name)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(
                    f"partition_writer: {name} must be a non-empty string, got {value!r}"
                )
            out[option] = value
    return out


@dataclass(frozen=True, slots=True)
class _PartitionWriter:
    """The function ``partition_writer`` returns: pickles as its parsed options and the
    driver's description of the stream."""

    options: SinkOptions
    stream_info: StreamInfo
    hint: str = "verify"

    def __call__(self, rows: Iterator[Any]) -> None:
        message = write_records(self.options, _row_chunks(rows), self.stream_info, hint=self.hint)
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
