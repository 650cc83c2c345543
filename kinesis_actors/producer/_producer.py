"""The Producer: a bounded queue in front of a sender actor that speaks PutRecords.

``put`` validates the record, takes room in the bounded queue (waiting while there is none:
that is the backpressure, lesson 16), and hands the record to the sans-IO :class:`Pipeline`.
The sender actor (``_sender.py``) asks the pipeline for calls and sends them, at most
``max_in_flight_calls`` at once; each outcome goes back into the pipeline, which settles
every record's handle exactly once (here, in ``_settle``) and gives its room back to the queue.

All of it runs in a task group owned by ``async with Producer(...)``: a bug in the dispatcher
or a sender fails the producer and the block, never a record silently.
"""

from __future__ import annotations

import logging
import math
from types import TracebackType
from typing import TYPE_CHECKING, Self

import anyio
from anyio.abc import TaskGroup

from .. import errors
from ..client import StreamRef
from ..records import ShardMap
from ..runtime import RestartIntensityExceeded, SupervisorSnapshot, unwrap_sole
from ._admission import Admission
from ._config import ProducerConfig
from ._handle import PutHandle, PutResult
from ._metrics import ProducerMetrics
from ._pipeline import Entry, Pipeline
from ._sender import Sender
from ._setup import new_pipeline
from ._stream import DEFAULT_MAX_RECORD_BYTES, StreamInfo, describe_stream, list_open_shards
from ._validation import prepare_record

if TYPE_CHECKING:
    from ..client import KinesisClient

__all__ = ["Producer"]

log = logging.getLogger("kinesis_actors.producer")

_CHECKPOINT_EVERY = 64  # puts that never wait still yield to the loop this often


class Producer:
    """Writes records to one stream with backpressure, aggregation, pacing and retries.

    Use it as an async context manager; leaving the block flushes (waits until every accepted
    record is acknowledged or has failed). ``put`` returns a :class:`PutHandle` once the record
    is in the bounded queue; ``await handle`` gives its :class:`PutResult`. Opening checks the
    stream (ResourceNotFoundError if it does not exist) and lists its shards. ``stream`` is a
    name, or an ARN for a stream of another account (its calls then send ``StreamARN``).

    ``stream_info`` (from :func:`describe_stream`) skips the DescribeStreamSummary at open:
    many short-lived producers of one job (Spark tasks) share one description made by their
    driver, since that call is limited to 20 a second per account (lesson 10).
    """

    def __init__(
        self,
        client: KinesisClient,
        stream: str,
        config: ProducerConfig | None = None,
        *,
        stream_info: StreamInfo | None = None,
    ) -> None:
        # A name or an ARN (another account's stream), checked before any call.
        StreamRef.parse(stream, option="stream", region=getattr(client, "region", None))
        if stream_info is not None and not isinstance(stream_info, StreamInfo):
            raise errors.ConfigError(
                f"stream_info must be a StreamInfo (from describe_stream), got {stream_info!r}"
            )
        if config is None:
            config = ProducerConfig()
        elif not isinstance(config, ProducerConfig):
            raise errors.ConfigError(f"config must be a ProducerConfig, got {config!r}")
        self._client = client
        self._stream = stream
        self._config = config
        self._admission = Admission(config.queue_limit_records, config.queue_limit_bytes)
        self._pipeline: Pipeline | None = None
        self._task_group: TaskGroup | None = None
        self._state = "new"
        self._stream_info = stream_info
        self._max_record_bytes = DEFAULT_MAX_RECORD_BYTES
        self._record_distribution = "USER_PARTITION_KEY"
        self._failure: BaseException | None = None
        self._broken: RestartIntensityExceeded | None = None  # the senders' supervisor gave up
        self._sender: Sender | None = None
        self._epoch = 0
        self._epoch_outstanding: dict[int, int] = {}
        self._settled: anyio.Event | None = None
        self._open_shards = 1
        self._last_backpressure_warning = -math.inf
        self._last_failure_log = -math.inf
        self._puts_since_checkpoint = 0
        self._counters = dict.fromkeys(
            (
                "backpressure_cycles",
                "records_put",
                "records_sent",
                "records_failed",
            ),
            0,
        )
        self._backpressure_seconds = 0.0

    # -- public surface ---------------------------------------------------------------------

    @property
    def stream(self) -> str:
        """The stream this producer writes to."""
        return self._stream

    @property
    def config(self) -> ProducerConfig:
        """The configuration in use."""
        return self._config

    @property
    def max_record_bytes(self) -> int:
        """The largest record (data plus partition key) the stream accepts."""
        return self._max_record_bytes

    @property
    def shard_map(self) -> ShardMap | None:
        """The open shards records are predicted for; ``None`` for AUTO distribution."""
        return None if self._pipeline is None else self._pipeline.shard_map

    @property
    def supervision(self) -> SupervisorSnapshot | None:
        """The senders' supervision tree as plain data (the dispatcher and one call sender
        per ``max_in_flight_calls``, their restarts, last failures and mailboxes), the same
        shape as every supervisor's; None before the producer opened."""
        return None if self._sender is None else self._sender.snapshot()

    @property
    def metrics(self) -> ProducerMetrics:
        """A snapshot of the counters (see :class:`ProducerMetrics`)."""
        pipeline = self._pipeline
        sender = self._sender
        counters = self._counters
        admission = self._admission
        return ProducerMetrics(
            outstanding_records=admission.records,
            outstanding_bytes=admission.nbytes,
            peak_outstanding_records=admission.peak_records,
            peak_outstanding_bytes=admission.peak_bytes,
            backpressure_cycles=counters["backpressure_cycles"],
            backpressure_seconds=self._backpressure_seconds,
            records_put=counters["records_put"],
            records_sent=counters["records_sent"],
            records_failed=counters["records_failed"],
            retries=pipeline.retries if pipeline else 0,
            throttled=pipeline.throttled if pipeline else 0,
            calls=sender.calls if sender else 0,
            failed_calls=sender.failed_calls if sender else 0,
            kinesis_records_sent=pipeline.kinesis_records_sent if pipeline else 0,
            bytes_sent=pipeline.bytes_sent if pipeline else 0,
            mispredicted=pipeline.mispredicted if pipeline else 0,
            shard_map_refreshes=sender.shard_map_refreshes if sender else 0,
            in_flight_calls=sender.in_flight if sender else 0,
            sender_crashes=sender.crashes if sender else 0,
            unreachable_seconds=sender.unreachable_seconds() if sender else 0.0,
        )

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("a Producer can be opened once")
        self._state = "opening"
        self._settled = anyio.Event()
        await self._describe_stream()
        pipeline = self._new_pipeline()
        if self._record_distribution != "AUTO":
            pipeline.set_shard_map(await list_open_shards(self._client, self._stream))
        self._pipeline = pipeline
        sender = self._sender = Sender(
            self._client, self._stream, self._config, pipeline, self._senders_failed
        )
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await task_group.start(sender.run, name=f"producer-senders[{self._stream}]")
        except BaseException as exc:
            task_group.cancel_scope.cancel()
            with unwrap_sole():
                await task_group.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Leave the block: normally, flush; because of an exception, stop within a bound.

        A normal exit waits until every accepted record is acknowledged or has failed, then
        raises :class:`~kinesis_actors.errors.ProducerFailedError` if one failed for good. An
        :class:`Exception` leaving the block stops taking records and gives those accepted
        ``config.exit_grace`` to settle; any other exception (cancellation,
        ``KeyboardInterrupt``, ``SystemExit``) none. What is left fails with
        ProducerClosedError, and the exception leaves as itself, never in a group.
        """
        task_group = self._task_group
        if task_group is None:
            self._state = "closed"
            return None
        try:
            if exc is None:
                self._state = "closing"
                await self._wait_settled(self._epoch)
            elif isinstance(exc, Exception):
                await self._settle_within(self._config.exit_grace, exc)
        finally:
            self._state = "closed"
            self._admission.close()  # a put still waiting for room fails, typed
            pipeline = self._pipeline
            if pipeline is not None:
                pipeline.drain(
                    errors.ProducerClosedError(f"producer for {self._stream!r} closed first")
                )
            task_group.cancel_scope.cancel()  # in-flight senders abandon their calls
            with unwrap_sole():  # the block's own exception as itself, not a group of one
                suppressed = await task_group.__aexit__(exc_type, exc, tb)
        if exc_type is None and (self._failure is not None or self._broken is not None):
            raise self._failed_error()
        return suppressed

    async def _settle_within(self, grace: float, cause: BaseException) -> None:
        """Leaving on ``cause``: take no more records, and wait at most ``grace`` seconds for
        the accepted ones (waiting records are sent at once, as by ``flush``).

        Without the bound, a block that raised under a stream throttling every call never
        left (measured: still waiting after 60 s). What is still unsettled after ``grace`` is
        failed by the caller's drain and the senders' cancellation.
        """
        self._state = "closing"
        self._admission.close()  # puts waiting for room in other tasks fail now
        if not self._epoch_outstanding:
            return
        with anyio.move_on_after(grace):
            await self._wait_settled(self._epoch)
        if self._epoch_outstanding:
            self._abort(
                errors.ProducerClosedError(
                    f"producer for {self._stream!r} left its block on "
                    f"{type(cause).__name__} before this record was acknowledged "
                    f"(exit_grace={grace}s)"
                )
            )

    async def put(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> PutHandle:
        """Queue one record; returns once it is inside the bounded queue.

        Waits while the queue is full (records or bytes). Raises a typed error at once for bad
        input: :class:`~kinesis_actors.errors.ValidationError` for empty data, a bad partition
        key or explicit hash key, :class:`~kinesis_actors.errors.RecordTooLargeError` for a
        record above the stream's limit; and :class:`~kinesis_actors.errors.ProducerFailedError`
        or :class:`~kinesis_actors.errors.ProducerClosedError` when it takes no more records.
        """
        handle = PutHandle()
        await self._put(data, partition_key, explicit_hash_key, handle)
        return handle

    async def flush(self) -> None:
        """Return once every record accepted before this call is acknowledged or has failed.

        Records still waiting for ``linger`` are sent at once. Raises
        :class:`~kinesis_actors.errors.ProducerFailedError` if a record failed with
        ``fail_on_error`` set, :class:`~kinesis_actors.errors.ProducerClosedError` if the
        producer was closed (or stopped by a close past its timeout) meanwhile.
        """
        self._check_open()
        target = self._epoch
        self._epoch += 1
        await self._wait_settled(target)
        if self._failure is not None or self._broken is not None:
            raise self._failed_error()
        if self._admission.closed:
            raise errors.ProducerClosedError(
                f"producer for {self._stream!r} was stopped while flushing; the records it "
                "did not acknowledge failed with ProducerClosedError"
            )

    def _abort(self, error: errors.ProducerClosedError) -> None:
        """Stop at once (a close past its timeout): fail every unsettled record with ``error``
        (those in flight with the sender's "may or may not have been written"), wake every
        ``put`` waiting for room with ProducerClosedError, and take no more records."""
        self._state = "closed"
        self._admission.close()
        if self._pipeline is not None:
            self._pipeline.drain(error)
        if self._sender is not None:
            self._sender.cancel_calls()  # each sender abandons its call

    # -- intake -----------------------------------------------------------------------------

    def prepare(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> tuple[bytes, int, int]:
        """Validate a record without queueing it: ``(data as bytes, size, hash key)``.

        Raises the typed error ``put`` would raise. Pure, so other threads may call it.
        """
        return prepare_record(
            data, partition_key, explicit_hash_key, self._max_record_bytes, self._stream
        )

    async def _put(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None, handle: PutHandle
    ) -> None:
        self._check_open()
        data, size, hashed = self.prepare(data, partition_key, explicit_hash_key)
        await self._admit(data, partition_key, explicit_hash_key, size, hashed, handle)

    async def _admit(  # noqa: PLR0917 - private, called per record
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | None,
        size: int,
        hashed: int,
        handle: PutHandle,
    ) -> None:
        """Queue a record :meth:`prepare` accepted; waits for room (the backpressure)."""
        self._check_open()
        if self._admission.try_take(size):
            self._puts_since_checkpoint += 1
            if self._puts_since_checkpoint >= _CHECKPOINT_EVERY:
                self._puts_since_checkpoint = 0
                await anyio.lowlevel.checkpoint()
                self._check_admitted(size)
        else:
            await self._wait_for_room(size)
            self._check_admitted(size)
        epoch = self._epoch
        self._epoch_outstanding[epoch] = self._epoch_outstanding.get(epoch, 0) + 1
        self._counters["records_put"] += 1
        entry = Entry(
            data,
            partition_key,
            explicit_hash_key,
            hashed,
            size,
            anyio.current_time(),
            handle,
            epoch,
        )
        assert self._pipeline is not None
        if self._pipeline.add(entry):
            assert self._sender is not None
            self._sender.wake()

    def _check_open(self) -> None:
        if self._state != "open":
            raise errors.ProducerClosedError(
                f"producer for {self._stream!r} is {self._state}; put and flush need an open "
                "producer ('async with Producer(...)')"
            )
        if self._failure is not None or self._broken is not None:
            raise self._failed_error()

    def _check_admitted(self, size: int) -> None:
        """Room was taken; if the producer stopped meanwhile, give it back and raise."""
        try:
            self._check_open()
        except errors.KinesisError:
            self._admission.release(1, size)
            raise

    async def _wait_for_room(self, size: int) -> None:
        self._counters["backpressure_cycles"] += 1
        waiter = self._admission.enqueue(size)
        started = anyio.current_time()
        try:
            if not waiter.granted:
                with anyio.move_on_after(self._config.backpressure_warning_after):
                    await waiter.event.wait()
                if not waiter.event.is_set():
                    self._warn_backpressure(anyio.current_time() - started)
                    await waiter.event.wait()
        except BaseException:
            self._admission.withdraw(waiter)
            raise
        finally:
            self._backpressure_seconds += anyio.current_time() - started
        if not waiter.granted:  # woken by _abort or a failure: no room was taken
            if self._broken is not None:
                raise self._failed_error()
            raise errors.ProducerClosedError(
                f"producer for {self._stream!r} closed while this put waited for room"
            )

    def _warn_backpressure(self, waited: float) -> None:
        now = anyio.current_time()
        if now - self._last_backpressure_warning < self._config.backpressure_warning_interval:
            return
        self._last_backpressure_warning = now
        admission = self._admission
        sender = self._sender
        if sender is not None and sender.unreachable_since is not None:
            cause = (
                f"The endpoint {sender.endpoint} has not answered for "
                f"{now - sender.unreachable_since:.1f}s ({sender.unreachable_error})."
            )
        else:
            throttled = self._pipeline.throttled if self._pipeline else 0
            cause = f"The stream is not keeping up (throttled {throttled} times so far)."
        log.warning(
            "producer for stream %r: put waited %.1fs for room; %d records / %d bytes "
            "outstanding (limits %d / %d), %d puts waiting. %s",
            self._stream,
            waited,
            admission.records,
            admission.nbytes,
            admission.max_records,
            admission.max_bytes,
            admission.waiting,
            cause,
        )

    # -- settling ---------------------------------------------------------------------------

    def _settle(self, entry: Entry, result: PutResult | None, error: BaseException | None) -> None:
        """Every record ends here exactly once (called by the pipeline)."""
        handle: PutHandle = entry.handle
        counters = self._counters
        if error is None:
            assert result is not None
            handle._set_result(result)
            counters["records_sent"] += 1
        else:
            handle._set_error(error)
            counters["records_failed"] += 1
            self._record_failure(error)
        self._admission.release(1, entry.size)
        remaining = self._epoch_outstanding[entry.epoch] - 1
        if remaining:
            self._epoch_outstanding[entry.epoch] = remaining
        else:
            del self._epoch_outstanding[entry.epoch]
            assert self._settled is not None
            self._settled.set()

    def _record_failure(self, error: BaseException) -> None:
        closing = isinstance(
            error, errors.ProducerClosedError
        )  # the closer's doing, not the stream's
        if self._config.fail_on_error and self._failure is None and not closing:
            self._failure = error
        now = anyio.current_time()
        if now - self._last_failure_log >= self._config.backpressure_warning_interval:
            self._last_failure_log = now
            log.error(
                "producer for stream %r gave up on a record: %s (%d failed so far)",
                self._stream,
                error,
                self._counters["records_failed"],
            )

    def _senders_failed(self, failure: RestartIntensityExceeded) -> None:
        """The senders' supervisor gave up (past ``restart_intensity``): the producer fails.

        Every record not settled fails with the ProducerFailedError ``put``, ``flush`` and
        leaving the block raise from now on; a ``put`` waiting for room gets it too.
        """
        self._broken = failure
        log.error("producer for stream %r failed: %s", self._stream, failure)
        self._admission.close()
        if self._pipeline is not None:
            self._pipeline.drain(self._failed_error())

    def _failed_error(self) -> errors.ProducerFailedError:
        broken = self._broken
        if broken is not None:
            failed = errors.ProducerFailedError(
                f"producer for {self._stream!r} failed: its senders crashed more than "
                f"{broken.max_restarts} time(s) within {broken.period} s (restart_intensity); "
                f"causes: {'; '.join(repr(cause) for cause in broken.causes)}"
            )
            failed.__cause__ = broken
            return failed
        error = errors.ProducerFailedError(
            f"producer for {self._stream!r} failed: a record could not be written "
            f"({self._failure}); fail_on_error=True stops the producer"
        )
        error.__cause__ = self._failure
        return error

    async def _wait_settled(self, target: int) -> None:
        """Wait until no record of epoch ``target`` or earlier is outstanding."""
        sender = self._sender
        assert sender is not None
        sender.flushing += 1
        sender.wake()
        try:
            while any(epoch <= target for epoch in self._epoch_outstanding):
                # Shared by concurrent flushes: replacing an unset event would strand the
                # flush already waiting on it (two flushes at once hung the first).
                if self._settled is None or self._settled.is_set():
                    self._settled = anyio.Event()
                await self._settled.wait()
        finally:
            sender.flushing -= 1

    # -- the stream -------------------------------------------------------------------------

    def _new_pipeline(self) -> Pipeline:
        info = StreamInfo(self._max_record_bytes, self._record_distribution, self._open_shards)
        return new_pipeline(self._config, info, self._settle)

    async def _describe_stream(self) -> None:
        info = self._stream_info
        if info is None:
            info = await describe_stream(self._client, self._stream)
        self._max_record_bytes = info.max_record_bytes
        self._record_distribution = info.record_distribution
        self._open_shards = info.open_shards
