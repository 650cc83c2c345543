"""The ``kinesis`` sink: ``df.write`` and ``df.writeStream`` through the producer, at least once.

Input columns: ``data`` (binary, or string sent as UTF-8), ``partitionKey`` (string) and
optionally ``explicitHashKey`` (string, a decimal 128-bit hash key; null means "hash the
partition key"). The input schema is checked on the driver when Spark creates the writer, so
a wrong column fails the query before any task runs, with a ConfigError naming it.

The driver describes the stream once per batch write or micro-batch, when the writer is
shipped to the executors: an unknown stream fails the query there, and the tasks reuse that
description instead of each calling DescribeStreamSummary, which the service limits to 20 a
second per account.

Each task writes its partition with a :class:`~kinesis_actors.sync.SyncProducer` whose event
loop starts inside the task (never at import: Python workers are forked and reused), flushes
within ``flushTimeout`` and always closes before ``write`` returns. The commit message is
returned only after the flush, that is after the service acknowledged every record of the
task; any record that fails for good fails the task.

The writers take Arrow batches (``DataSourceArrowWriter``): measured against the row writer
with the same producer, Arrow skips Spark's per-row ``Row`` conversion and is the faster one.

At least once: Spark retries a failed task (and re-runs a failed micro-batch), and the records
the failed attempt had already written are written again. Kinesis has no transactions;
deduplicate downstream if duplicates matter (for example on a key carried in ``data``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from anyio.from_thread import start_blocking_portal
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType

from kinesis_actors import KinesisClient, ProducerConfig
from kinesis_actors.errors import (
    CertificateError,
    ConfigError,
    EndpointUnreachableError,
    ProducerFailedError,
    RecordExpiredError,
    ResourceNotFoundError,
    ValidationError,
)
from kinesis_actors.producer import StreamInfo, arrow_records, describe_stream
from kinesis_actors.sync import SyncProducer

from ._hints import said_for
from ._options import SinkOptions

__all__ = [
    "KinesisBatchWriter",
    "KinesisCommitMessage",
    "KinesisStreamWriter",
    "check_input_columns",
    "check_input_schema",
    "describe_target",
    "write_records",
]

log = logging.getLogger("spark_bridge.sink")

REQUIRED_COLUMNS = ("data", "partitionKey")
SINK_QUEUE_LIMIT_BYTES = 8 * 1024 * 1024  # see producer_config
OPTIONAL_COLUMNS = ("explicitHashKey",)
_EXPECTED = (
    "expected columns data (binary or string), partitionKey (string) and optionally "
    "explicitHashKey (string)"
)
# Records handed to the producer's loop per thread hop: one hop costs about as much as a
# hundred puts, so the hop is amortised; the producer's queue still bounds memory.
_HOP_BATCH = 512

Record = tuple[bytes | str, str, str | None]


def check_input_columns(names: Sequence[str]) -> None:
    """Raise a ConfigError naming a missing or unexpected column (``partition_writer`` too)."""
    for required in REQUIRED_COLUMNS:
        if required not in names:
            raise ConfigError(f"kinesis sink: input column {required!r} is missing; {_EXPECTED}")
    for name in names:
        if name not in REQUIRED_COLUMNS and name not in OPTIONAL_COLUMNS:
            raise ConfigError(
                f"kinesis sink: unexpected input column {name!r}; {_EXPECTED}. "
                "Select or rename the columns first (for example with to_json(struct(...)) "
                "AS data)"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"kinesis sink: duplicate input columns in {list(names)}; {_EXPECTED}")


def check_input_schema(schema: Any) -> None:
    """Check a Spark ``StructType`` on the driver; a ConfigError names the column at fault."""
    check_input_columns([field.name for field in schema.fields])
    for field in schema.fields:
        allowed: tuple[type, ...] = (
            (BinaryType, StringType) if field.name == "data" else (StringType,)
        )
        if not isinstance(field.dataType, allowed):
            wanted = "binary or string" if field.name == "data" else "string"
            raise ConfigError(
                f"kinesis sink: input column {field.name!r} has type "
                f"{field.dataType.simpleString()}, expected {wanted}; {_EXPECTED}"
            )


@dataclass(frozen=True, slots=True)
class KinesisCommitMessage(WriterCommitMessage):
    """What one task wrote, every record acknowledged: user records, their data bytes, the
    producer's retries and throttled responses, Kinesis records (aggregates count once)."""

    records: int = 0
    bytes: int = 0
    retries: int = 0
    throttled: int = 0
    kinesis_records: int = 0
    seconds: float = 0.0


def producer_config(options: SinkOptions) -> ProducerConfig:
    """The task's producer: ``record_ttl`` = ``flushTimeout`` so a stalled stream fails the
    task (and lets it close) instead of hanging it; any failed record fails the producer.

    The queue stays at the producer's floor (``queueLimitRecords``, 10,000, and 8 MiB) rather
    than its default sized by the shards (64 MiB at 1,024): an executor runs a producer per
    core in Python workers, whose memory is the executor's overhead (10 % of its memory by
    default, at least 384 MiB), not its heap."""
    return ProducerConfig(
        aggregation=options.aggregation,
        queue_limit_records=options.queue_limit_records,
        queue_limit_bytes=SINK_QUEUE_LIMIT_BYTES,
        record_ttl=options.flush_timeout,
        fail_on_error=True,
    )


def describe_target(options: SinkOptions, *, hint: str = "verifySsl") -> StreamInfo:
    """DescribeStreamSummary for the sink's stream, once, on the driver.

    Raises ResourceNotFoundError ("stream X not found at <endpoint>") if it does not exist,
    before any task, and EndpointUnreachableError (naming ``endpointUrl`` and ``openTimeout``)
    if the endpoint is not reached within ``openTimeout``; a certificate that fails
    verification names ``hint``, the setting the caller has (``verifySsl``, or ``verify`` for
    ``partition_writer``). All are raised from the client's error with its traceback left out
    (``from None``): Spark prints the whole chain under its own, and the cause belongs in the
    first lines, not after the client's frames.
    """

    async def describe() -> StreamInfo:
        async with KinesisClient(**options.connection.client_kwargs()) as client:
            return await describe_stream(client, options.stream)

    # On a loop thread of its own: the caller may be inside a running event loop (a notebook
    # cell calling partition_writer runs in the kernel's), where anyio.run would refuse.
    try:
        with start_blocking_portal() as portal:
            return portal.call(describe)
    except (ResourceNotFoundError, CertificateError, EndpointUnreachableError) as exc:
        better = said_for(exc, stream=options.stream, connection=options.connection, hint=hint)
        if better is None:
            raise
        raise better from None


def _describe(options: SinkOptions) -> str:
    return f"kinesis sink (stream {options.stream!r})"


def _trouble(producer: SyncProducer) -> str:
    metrics = producer.metrics
    return (
        f"{metrics.outstanding_records} records outstanding, {metrics.throttled} throttled "
        f"responses, {metrics.retries} retries, {metrics.failed_calls} failed calls"
    )


def write_records(
    options: SinkOptions,
    chunks: Iterable[Iterable[Record]],
    stream_info: StreamInfo | None = None,
    *,
    hint: str = "verifySsl",
) -> KinesisCommitMessage:
    """One task's work: write every record, flush within the time limit, always close.

    ``stream_info`` is the driver's :func:`describe_target`; without it the task's producer
    describes the stream itself.

    ``chunks`` yields groups of ``(data, partition_key, explicit_hash_key)``; ``str`` data is
    sent as UTF-8. The producer (and its event loop) is opened on the first record, inside
    the task. Returns only after every record is acknowledged; raises otherwise, and the
    records written so far stay written (at least once: Spark's retry writes them again).
    A record not acknowledged within ``flushTimeout`` of being queued, or a flush that takes
    longer, fails the task with a ``TimeoutError``. A failure whose cause is a missing stream
    or a certificate says so in its first line (``hint``: the setting to name, as for
    :func:`describe_target`).
    """
    started = time.monotonic()
    records = nbytes = 0
    producer: SyncProducer | None = None
    try:
        try:
            for chunk in chunks:
                batch = [
                    (data.encode("utf-8") if isinstance(data, str) else data, key, hash_key)
                    for data, key, hash_key in chunk
                ]
                if not batch:
                    continue
                if producer is None:
                    connection = options.connection.client_kwargs()
                    producer = SyncProducer(
                        options.stream,
                        client_config=connection.pop("config"),
                        **connection,
                        config=producer_config(options),
                        batch_size=_HOP_BATCH,
                        stream_info=stream_info,
                    )
                try:
                    producer.put_many(batch)  # validated whole, then one hop per _HOP_BATCH
                except ValidationError as exc:
                    row = records + _first_invalid(producer, batch)
                    raise type(exc)(
                        f"{_describe(options)}: row {row} of this task is invalid: {exc}"
                    ) from exc
                records += len(batch)
                nbytes += sum(len(payload) for payload, _, _ in batch)
            if producer is None:
                return KinesisCommitMessage(seconds=time.monotonic() - started)
            try:
                producer.flush(timeout=options.flush_timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"{_describe(options)}: the flush of {records} records did not finish "
                    f"within flushTimeout={options.flush_timeout}s; {_trouble(producer)}"
                ) from None
        except ProducerFailedError as exc:
            if producer is not None and isinstance(exc.__cause__, RecordExpiredError):
                raise TimeoutError(
                    f"{_describe(options)}: a record was not acknowledged within "
                    f"flushTimeout={options.flush_timeout}s of being queued; "
                    f"{_trouble(producer)}; last error: {exc.__cause__.__cause__}"
                ) from exc
            raise
        metrics = producer.metrics
        producer.close()
    except BaseException as exc:
        better = said_for(exc, stream=options.stream, connection=options.connection, hint=hint)
        if isinstance(exc, Exception):
            (better or exc).add_note(
                f"{_describe(options)}: the task failed after queueing {records} records; "
                "records already written stay in the stream and Spark's retry writes them "
                "again (at-least-once)"
            )
        if producer is not None:
            try:
                producer.__exit__(type(exc), exc, exc.__traceback__)
            except Exception:  # the task's own error is the one to report
                log.exception("%s: closing the producer after a failure failed", _describe(options))
        if better is not None:
            raise better from exc  # the cause in the first line, the client's error below
        raise
    return KinesisCommitMessage(
        records=records,
        bytes=nbytes,
        retries=metrics.retries,
        throttled=metrics.throttled,
        kinesis_records=metrics.kinesis_records_sent,
        seconds=time.monotonic() - started,
    )


def _first_invalid(producer: SyncProducer, batch: list[tuple[bytes, str, str | None]]) -> int:
    """The index of the first record of ``batch`` the producer refuses (the error path only)."""
    for index, (data, key, hash_key) in enumerate(batch):
        try:
            producer.producer.prepare(data, key, hash_key)
        except ValidationError:
            return index
    return 0


def _arrow_chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[Iterable[Record]]:
    """Each Arrow batch as ``(data, key, hash_key)`` tuples, strings cast to bytes in Arrow."""
    seen = 0
    for batch in batches:
        data = batch.column("data")
        keys = batch.column("partitionKey")
        for name, column in (("data", data), ("partitionKey", keys)):
            if column.null_count:
                row = seen + pc.index(column.is_null(), True).as_py()
                raise ValidationError(
                    f"kinesis sink: column {name!r} is null in row {row} of this task; "
                    "every row needs data and a partition key"
                )
        hash_keys = (
            batch.column("explicitHashKey") if "explicitHashKey" in batch.schema.names else None
        )
        seen += batch.num_rows
        yield arrow_records(data, keys, hash_keys)  # strings cast to bytes inside Arrow


def _log_commit(kind: str, messages: Sequence[Any], batch_id: int | None = None) -> None:
    done = [m for m in messages if isinstance(m, KinesisCommitMessage)]
    records = sum(m.records for m in done)
    seconds = max((m.seconds for m in done), default=0.0)
    log.info(
        "kinesis sink %s%s committed: %d tasks, %d records, %d bytes, %d Kinesis records, "
        "%d retries, %d throttled, slowest task %.2fs",
        kind,
        "" if batch_id is None else f" batch {batch_id}",
        len(done),
        records,
        sum(m.bytes for m in done),
        sum(m.kinesis_records for m in done),
        sum(m.retries for m in done),
        sum(m.throttled for m in done),
        seconds,
    )


def _log_abort(kind: str, messages: Sequence[Any], batch_id: int | None = None) -> None:
    done = [m for m in messages if isinstance(m, KinesisCommitMessage)]
    log.warning(
        "kinesis sink %s%s aborted: %d of %d tasks had finished and written %d records; "
        "written records stay in the stream (at-least-once: a retry writes them again)",
        kind,
        "" if batch_id is None else f" batch {batch_id}",
        len(done),
        len(messages),
        sum(m.records for m in done),
    )


class _Writer:
    """What both writers share: the options, the input check, the task's work, and the stream
    described on the driver when the writer is pickled for the executors.

    Spark pickles a writer to ship it, once per batch write or micro-batch; it also makes
    stream writers only to call ``commit`` or ``abort`` on them, and those must not cost a
    describe call (nor fail after the data was written because one failed).
    """

    def __init__(self, options: SinkOptions, schema: Any) -> None:
        check_input_schema(schema)
        self.options = options
        self.stream_info: StreamInfo | None = None

    def __getstate__(self) -> dict[str, Any]:
        if self.stream_info is None:
            self.stream_info = describe_target(self.options)
        return dict(self.__dict__)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KinesisCommitMessage:
        return write_records(self.options, _arrow_chunks(iterator), self.stream_info)


class KinesisBatchWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("kinesis")``: each task writes its partition and flushes.

    At least once: a failed task is retried by Spark and the records it had already written
    are written again; an aborted job leaves the records of finished tasks in the stream.

    Spark makes a batch writer once per write, so it describes the stream when made: a
    missing stream then fails the write from ``writer()``, in a traceback of a few frames,
    not from inside the pickler (measured on a missing stream: Spark's message is 11 lines
    with the cause on line 10, against 30 lines of cloudpickle frames and a PicklingError).
    """

    def __init__(self, options: SinkOptions, schema: Any) -> None:
        super().__init__(options, schema)
        self.stream_info = describe_target(options)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(f"write to {self.options.stream!r}", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_abort(f"write to {self.options.stream!r}", messages)


class KinesisStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """``df.writeStream.format("kinesis")``: each micro-batch's tasks write and flush.

    At least once: a micro-batch whose task failed is aborted and, when the query restarts
    from its checkpoint, run again; the records written by its earlier attempt are written
    again. Nothing needs committing on the Kinesis side, so ``commit`` only logs totals.
    """

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(f"stream to {self.options.stream!r}", messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_abort(f"stream to {self.options.stream!r}", messages, batchId)
