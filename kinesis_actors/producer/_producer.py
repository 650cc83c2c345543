"""The Producer: a bounded queue in front of supervised actors that speak PutRecords.

``put`` validates the record and sends it into the bounded queue, which is the dispatcher
actor's mailbox (``_sender.py``), waiting while it is full: that is the backpressure (the
put side is :class:`~._intake.Intake`). The dispatcher takes the records into the
sans-IO :class:`Pipeline`, and call senders send its calls, at most ``max_in_flight_calls``
at once; each outcome goes back into the pipeline, which settles every record's handle
exactly once (in the :class:`~._ledger.Ledger`) and gives its room in the queue back, waking
the next waiting ``put``. This module is the lifecycle: opening, flushing, closing, aborting.
It owns the lifecycle's fields (the state, the queue, the senders, the stream's record limit)
and changes the ledger and the senders only through their methods.

The actors run under a supervisor in a task group owned by ``async with Producer(...)``: a
sender that crashes is restarted and its records sent again; past ``restart_intensity`` the
producer fails with a typed error, never a record silently.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Self

import anyio
from anyio.abc import TaskGroup

from .. import errors
from ..client import StreamRef
from ..records import ShardMap
from ..runtime import (
    RestartIntensityExceeded,
    SupervisorSnapshot,
    unwrap_sole,
)
from ._config import ProducerConfig, QueueLimits, queue_limits
from ._intake import Intake
from ._lifecycle import CLOSED, CLOSING, NEW, OPEN, OPENING
from ._metrics import ProducerMetrics
from ._pipeline import Entry, Pipeline
from ._sender import Sender
from ._setup import new_pipeline
from ._stream import DEFAULT_MAX_RECORD_BYTES, StreamInfo, describe_stream, list_open_shards

if TYPE_CHECKING:
    from ..client import KinesisClient

__all__ = ["Producer"]

log = logging.getLogger("kinesis_actors.producer")


class Producer(Intake):
    """Writes records to one stream with backpressure, aggregation, pacing and retries.

    Use it as an async context manager; leaving the block flushes (waits until every accepted
    record is acknowledged or has failed). ``put`` returns a :class:`PutHandle` once the record
    is in the bounded queue; ``await handle`` gives its :class:`PutResult`. Opening checks the
    stream (ResourceNotFoundError if it does not exist) and lists its shards. ``stream`` is a
    name, or an ARN for a stream of another account (its calls then send ``StreamARN``).

    ``stream_info`` (from :func:`describe_stream`) skips the DescribeStreamSummary at open:
    many short-lived producers of one job (Spark tasks) share one description made by their
    driver, since that call is limited to 20 a second per account.
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
        super().__init__(stream, config)
        self._state = NEW
        self._queue = None
        self._sender = None
        self._max_record_bytes = DEFAULT_MAX_RECORD_BYTES
        self._client = client
        self._pipeline: Pipeline | None = None
        self._task_group: TaskGroup | None = None
        self._stream_info = stream_info
        self._config_in_use: ProducerConfig | None = None  # with the queue limits, once open
        self._record_distribution = "USER_PARTITION_KEY"
        self._open_shards = 1

    # -- public surface ---------------------------------------------------------------------

    @property
    def stream(self) -> str:
        """The stream this producer writes to."""
        return self._stream

    @property
    def config(self) -> ProducerConfig:
        """The configuration in use: once open, with the queue limits it sized (see
        ``ProducerConfig.queue_limit_records``)."""
        return self._config_in_use or self._config

    @property
    def max_record_bytes(self) -> int:
        """The largest record (data plus partition key) the stream accepts."""
        return self._max_record_bytes

    @property
    def shard_map(self) -> ShardMap | None:
        """The open shards records are predicted for; ``None`` for AUTO distribution."""
        return None if self._pipeline is None else self._pipeline.shard_map

    @property
    def supervision(self) -> tuple[SupervisorSnapshot, ...]:
        """The senders' supervision tree as plain data (the dispatcher and one call sender
        per ``max_in_flight_calls``, their restarts, last failures and mailboxes), the shape
        of ``Consumer.supervision``: a tuple of one
        :class:`~kinesis_actors.runtime.SupervisorSnapshot`, empty before the producer
        opened."""
        tree = None if self._sender is None else self._sender.snapshot()
        return () if tree is None else (tree,)

    def statistics(self) -> ProducerMetrics:
        """The producer now, as a frozen :class:`ProducerMetrics`: the queue, the outcomes,
        the calls, the endpoint and the supervision tree (see there)."""
        pipeline = self._pipeline
        sender = self._sender
        ledger = self._ledger
        queue = None if self._queue is None else self._queue.statistics()
        return ProducerMetrics(
            outstanding_records=queue.depth + queue.held if queue else 0,
            outstanding_bytes=queue.weight if queue else 0,
            peak_outstanding_records=queue.peak_occupied if queue else 0,
            peak_outstanding_bytes=queue.peak_weight if queue else 0,
            backpressure_cycles=queue.blocked_sends if queue else 0,
            backpressure_seconds=queue.blocked_seconds if queue else 0.0,
            records_put=queue.sent if queue else 0,
            records_sent=ledger.records_sent,
            records_failed=ledger.records_failed,
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
            unreachable_seconds=sender.health.seconds() if sender else 0.0,
            misplaced_records=pipeline.misplaced_records if pipeline else 0,
            supervision=self.supervision,
        )

    @property
    def metrics(self) -> ProducerMetrics:
        """The same snapshot as :meth:`statistics` (a frozen :class:`ProducerMetrics`), under
        the name the public contract gives it; both stay."""
        return self.statistics()

    async def __aenter__(self) -> Self:
        if self._state is not NEW:
            raise RuntimeError("a Producer can be opened once")
        self._state = OPENING
        await self._describe_stream()
        limits = queue_limits(self._config, self._open_shards)
        pipeline = self._new_pipeline(limits)
        if self._record_distribution != "AUTO":
            pipeline.set_shard_map(await list_open_shards(self._client, self._stream))
        self._pipeline = pipeline
        sender = self._sender = Sender(
            self._client,
            self._stream,
            self._config,
            pipeline,
            limits=limits,
            on_failure=self._senders_failed,
            on_undelivered=self._undelivered,
        )
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await task_group.start(sender.run, name=f"producer-senders[{self._stream}]")
            self._queue = sender.queue
            assert self._queue is not None
            self._ledger.open(self._queue)
        except BaseException as exc:
            task_group.cancel_scope.cancel()
            with unwrap_sole():
                await task_group.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        # From here on ``config`` shows the queue limits in use (the defaults, sized).
        self._config_in_use = replace(
            self._config, queue_limit_records=limits.records, queue_limit_bytes=limits.nbytes
        )
        self._state = OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Leave the block: normally, flush; because of an exception, stop within a bound.

        A normal exit waits until every accepted record is acknowledged or has failed, then
        raises :class:`~kinesis_actors.errors.ProducerFailedError` if one failed for good
        (``fail_on_error``) and no handle gave its error to the caller (an error taken from
        its handle, by ``await``, ``result()`` or ``exception()``, is handled), or if the
        senders' supervisor gave up. An
        :class:`Exception` leaving the block stops taking records and gives those accepted
        ``config.exit_grace`` to settle; any other exception (cancellation,
        ``KeyboardInterrupt``, ``SystemExit``) none. What is left fails with
        ProducerClosedError, and the exception leaves as itself, never in a group.
        """
        task_group = self._task_group
        if task_group is None:
            self._state = CLOSED
            return None
        try:
            if exc is None:
                self._state = CLOSING
                await self._wait_settled(self._epoch)
            elif isinstance(exc, Exception):
                await self._settle_within(self._config.exit_grace, exc)
        finally:
            self._state = CLOSED
            self._drain(errors.ProducerClosedError(f"producer for {self._stream!r} closed first"))
            task_group.cancel_scope.cancel()  # in-flight senders abandon their calls
            with unwrap_sole():  # the block's own exception as itself, not a group of one
                suppressed = await task_group.__aexit__(exc_type, exc, tb)
        if exc_type is None:
            failed = self._ledger.exit_error()
            if failed is not None:
                raise failed
        return suppressed

    async def _settle_within(self, grace: float, cause: BaseException) -> None:
        """Leaving on ``cause``: take no more records, and wait at most ``grace`` seconds for
        the accepted ones (waiting records are sent at once, as by ``flush``).

        Without the bound, a block that raised under a stream throttling every call never
        left (measured: still waiting after 60 s). What is still unsettled after ``grace`` is
        failed by the caller's drain and the senders' cancellation.
        """
        self._state = CLOSING
        if self._queue is not None:
            self._queue.close()  # puts waiting for room in other tasks fail now
        if not self._ledger.outstanding:
            return
        with anyio.move_on_after(grace):
            await self._wait_settled(self._epoch)
        if self._ledger.outstanding:
            self.abort(
                errors.ProducerClosedError(
                    f"producer for {self._stream!r} left its block on "
                    f"{type(cause).__name__} before this record was acknowledged "
                    f"(exit_grace={grace}s)"
                )
            )

    async def flush(self) -> None:
        """Return once every record accepted before this call is acknowledged or has failed.

        Records still waiting for ``linger`` are sent at once. Raises
        :class:`~kinesis_actors.errors.ProducerFailedError` if a record failed with
        ``fail_on_error`` set, :class:`~kinesis_actors.errors.ProducerClosedError` if the
        producer was closed (or stopped by a close past its timeout) meanwhile.
        """
        self._check_open()
        await self._wait_settled(self._next_epoch())
        if self._ledger.stopped:
            raise self._ledger.failed_error()
        if self._state is CLOSED:
            raise errors.ProducerClosedError(
                f"producer for {self._stream!r} was stopped while flushing; the records it "
                "did not acknowledge failed with ProducerClosedError"
            )

    def abort(self, error: errors.ProducerClosedError | None = None) -> None:
        """Stop at once, without waiting: fail every unsettled record with ``error`` (a
        :class:`~kinesis_actors.errors.ProducerClosedError`; those in flight "may or may not
        have been written"), wake every ``put`` waiting for room with it, take no more
        records. Leaving the block then returns at once. For a close past its deadline
        (``SyncProducer.close(timeout=...)``)."""
        if error is None:
            error = errors.ProducerClosedError(f"producer for {self._stream!r} was aborted")
        self._state = CLOSED
        self._drain(error)
        if self._sender is not None:
            self._sender.cancel_calls()  # each sender abandons its call

    def _drain(self, error: BaseException) -> None:
        """Take no more records; fail those queued or waiting in the pipeline with ``error``
        (not those in flight: their senders settle them)."""
        queue = self._queue
        if queue is not None:
            queue.close()  # a put waiting for room fails, typed
            while True:
                try:
                    entry = queue.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
                self._ledger.settle(entry, None, error)
        if self._pipeline is not None:
            self._pipeline.drain(error)

    # -- settling ---------------------------------------------------------------------------

    def _senders_failed(self, failure: Exception) -> None:
        """The senders' supervisor gave up (past ``restart_intensity``; ``failure`` is its
        :class:`RestartIntensityExceeded`) or the dispatcher crashed (``failure`` is the
        crash): the producer fails.

        Every record not settled fails with the ProducerFailedError ``put``, ``flush`` and
        leaving the block raise from now on; a ``put`` waiting for room gets it too.
        """
        self._ledger.mark_broken(failure)
        error = self._ledger.failed_error()
        # A crash of the dispatcher is a bug: its traceback goes with the line. The senders'
        # crashes were each logged with theirs by the supervisor.
        crash = None if isinstance(failure, RestartIntensityExceeded) else failure
        log.error("%s", error, exc_info=crash)
        self._drain(error)

    def _undelivered(self, entry: Entry) -> None:
        """A record still queued when the dispatcher stopped for good: failed, never lost."""
        self._ledger.settle(
            entry, None, errors.ProducerClosedError(f"producer for {self._stream!r} closed first")
        )

    async def _wait_settled(self, target: int) -> None:
        """Wait until no record of epoch ``target`` or earlier is outstanding."""
        sender = self._sender
        assert sender is not None
        sender.begin_flush()
        try:
            await self._ledger.wait_settled(target)
        finally:
            sender.end_flush()

    # -- the stream -------------------------------------------------------------------------

    def _new_pipeline(self, limits: QueueLimits) -> Pipeline:
        info = StreamInfo(self._max_record_bytes, self._record_distribution, self._open_shards)
        return new_pipeline(
            self._config, limits, info, self._ledger.settle, self._ledger.acknowledge
        )

    async def _describe_stream(self) -> None:
        info = self._stream_info
        if info is None:
            info = await describe_stream(self._client, self._stream)
        self._max_record_bytes = info.max_record_bytes
        self._record_distribution = info.record_distribution
        self._open_shards = info.open_shards
