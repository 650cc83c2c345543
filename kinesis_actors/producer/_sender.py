"""The producer's actors: the queue's owner and the senders that turn calls into PutRecords.

One supervisor (the runtime's, one_for_one, its children stopped concurrently) runs:

* a *dispatcher* actor whose mailbox is the producer's bounded queue: ``put`` sends a record
  into it, waiting while it is full in records (``queue_limit_records``) or bytes
  (``queue_limit_bytes``). The mailbox holds each record's room until the record settles
  (``hold``), so a waiting ``put`` is woken by acknowledgements, first come first served.
  The dispatcher takes every queued record into the sans-IO :class:`~._pipeline.Pipeline`,
  asks it for calls and hands each to an idle sender; then it sleeps until the pipeline's next
  wakeup or until woken (a first record in an empty queue, a flush, a finished call). It lists
  the shards again when the pipeline finds its shard map stale, at most once per
  ``shard_map_min_refresh_interval``, and says when puts wait long or the endpoint does not
  answer;
* ``max_in_flight_calls`` *call sender* actors, each with a mailbox of one call: it sends the
  call with the client's retries off (the pipeline owns retries) and gives the
  outcome back to the pipeline, which settles the records.

A sender that crashes (a bug, not a failed call: those are outcomes) loses nothing: the
supervisor reports the call it was handling, and since the request may have reached the service,
its records are sent again as an unknown outcome (at-least-once, bounded by
``max_unknown_outcomes``), never settled twice because a call is settled by whoever holds it
first. The sender is restarted after a short backoff; past ``restart_intensity`` the supervisor
gives up and the producer fails with :class:`~kinesis_actors.errors.ProducerFailedError`
caused by the :class:`~kinesis_actors.runtime.RestartIntensityExceeded` that lists the crashes.

A dispatcher that crashes is not restarted: it raised out of the pipeline, whose state it
was changing (records taken into a call never handed out stayed "in flight" and their keys'
next records waited behind them: puts waited for room with no end, measured). Its crash
stops the supervisor and the producer fails with a
:class:`~kinesis_actors.errors.ProducerFailedError` caused by it.

The producer owns the intake and the settling; this owns what is in flight.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

from .. import errors
from ..client import RetrySettings, StreamRef
from ..runtime import (
    Actor,
    Backoff,
    ChildSpec,
    DeadLetter,
    DropReason,
    Mailbox,
    Restart,
    RestartIntensityExceeded,
    StopOrder,
    Strategy,
    Supervisor,
    SupervisorSnapshot,
)
from ._actors import CallSender, Delivery, Dispatcher
from ._config import ProducerConfig, QueueLimits
from ._entry import Entry
from ._health import EndpointHealth, why_no_room
from ._pipeline import Pipeline
from ._retries import put_records_results
from ._stream import list_open_shards

if TYPE_CHECKING:
    from ..client import KinesisClient

__all__ = ["Sender"]

log = logging.getLogger("kinesis_actors.producer")

# The producer owns PutRecords retries: one client attempt per producer attempt,
# so record_ttl holds, attempts are counted right, and every throttle reaches the pacing.
_ONE_ATTEMPT = RetrySettings(max_retries=0)

#: Restart delays of a crashed sender: soon, but a sender crashing in a loop cannot spin.
SENDER_BACKOFF = Backoff(initial=0.01, maximum=1.0)
#: What stopping one actor may take: cancelling a call is immediate, nothing is flushed here.
_CLEANUP = 0.5


class Sender:
    """The producer's outbox: a supervisor of one dispatcher and the call senders.

    A flush under way (:meth:`begin_flush` to :meth:`end_flush`) makes the dispatcher ignore
    linger. ``calls``,
    ``failed_calls``, ``crashes`` and ``shard_map_refreshes`` count what it did; ``in_flight``
    is the number of calls handed to a sender and not yet settled.
    """

    __slots__ = (
        "_client",
        "_config",
        "_crash",
        "_flushing",
        "_idle",
        "_last_backpressure_warning",
        "_limits",
        "_next_refresh",
        "_on_failure",
        "_on_undelivered",
        "_pins_refused_told",
        "_pipeline",
        "_refreshing",
        "_scopes",
        "_started",
        "_stop",
        "_stream",
        "_supervisor",
        "_wake",
        "calls",
        "crashes",
        "failed_calls",
        "health",
        "in_flight",
        "queue",
        "shard_map_refreshes",
    )

    def __init__(
        self,
        client: KinesisClient,
        stream: str,
        config: ProducerConfig,
        pipeline: Pipeline,
        *,
        limits: QueueLimits,
        on_failure: Callable[[Exception], None],
        on_undelivered: Callable[[Entry], None],
    ) -> None:
        self._client = client
        self._stream = stream
        self._config = config
        self._limits = limits
        self._pipeline = pipeline
        self._on_failure = on_failure
        self._on_undelivered = on_undelivered
        self._supervisor: Supervisor | None = None
        self._stop = anyio.CancelScope()  # around the supervisor: a dispatcher crash stops it
        self._crash: Exception | None = None  # what the dispatcher raised, if it did
        self._started = False
        self.queue: Mailbox[Entry] | None = None  # the dispatcher's mailbox, once started
        self._wake = anyio.Event()
        self._last_backpressure_warning = -math.inf
        # The mailboxes of the senders with nothing to do; at most one entry per sender.
        self._idle: deque[Mailbox[Delivery]] = deque()
        self._scopes: set[anyio.CancelScope] = set()  # one per call handed out
        self._refreshing = False
        self._next_refresh = 0.0
        self._flushing = 0  # flushes waiting: linger is ignored while there are any
        self.in_flight = 0
        self.calls = 0
        self.failed_calls = 0
        self.crashes = 0
        self.shard_map_refreshes = 0
        self._pins_refused_told = 0  # pipeline.pins_refused at the last warning
        self.health = EndpointHealth(stream, str(client.endpoint_url), config)

    # -- the producer's side ----------------------------------------------------------------

    def snapshot(self) -> SupervisorSnapshot | None:
        """The supervision tree (dispatcher and senders), or None before it started."""
        return None if self._supervisor is None else self._supervisor.statistics()

    def wake(self) -> None:
        """Look now (a record in an empty queue, a put waiting for room, a flush began)."""
        self._wake.set()

    def begin_flush(self) -> None:
        """A flush waits: send what is ready without waiting for ``linger``, from now on."""
        self._flushing += 1
        self._wake.set()

    def end_flush(self) -> None:
        """A flush :meth:`begin_flush` counted is over (done or cancelled)."""
        self._flushing -= 1

    def cancel_calls(self) -> None:
        """Abandon every call handed to a sender, running or not yet received (an abort).

        Their records fail through :meth:`Pipeline.abandon`: "may or may not have been
        written".
        """
        for scope in self._scopes:
            scope.cancel()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the supervisor until cancelled; ready once every actor has started.

        Past the restart intensity, ``on_failure`` gets the supervisor's
        :class:`RestartIntensityExceeded` and this returns; so it does once the dispatcher
        crashed (:meth:`dispatcher_crashed`).
        """
        try:
            with self._stop:
                await self._supervise(task_status)
        except RestartIntensityExceeded as failure:
            self._on_failure(failure)
        if self._crash is not None and not self._started:
            # While the producer opened: its open fails with the crash, typed (else anyio's
            # RuntimeError, "child exited without calling task_status.started()").
            failed = errors.ProducerFailedError(
                f"producer for {self._stream!r} failed while opening: its dispatcher crashed "
                f"({self._crash!r}), a bug"
            )
            raise failed from self._crash

    async def _supervise(self, task_status: TaskStatus[None]) -> None:
        config = self._config
        async with Supervisor(
            Strategy.ONE_FOR_ONE,
            name=f"producer[{StreamRef.parse(self._stream).name}]",  # an ARN has a '/'
            intensity=config.restart_intensity,
            backoff=SENDER_BACKOFF,
            stop_order=StopOrder.CONCURRENT,
        ) as supervisor:
            self._supervisor = supervisor
            dispatcher = await supervisor.start_child(
                ChildSpec(
                    "dispatcher",
                    self._dispatcher,
                    restart=Restart.TEMPORARY,  # see the module's docstring
                    capacity=self._limits.records,
                    max_weight=self._limits.nbytes,
                    hold=True,
                    on_drop=self._undelivered,
                    shutdown_timeout=0.0,
                    cleanup_timeout=_CLEANUP,
                )
            )
            self.queue = dispatcher.mailbox
            for index in range(config.max_in_flight_calls):
                await supervisor.start_child(
                    ChildSpec(
                        f"sender-{index}",
                        self._call_sender,
                        capacity=1,
                        on_drop=self._lost,
                        shutdown_timeout=0.0,
                        cleanup_timeout=_CLEANUP,
                    )
                )
            self._started = True
            task_status.started()
            await anyio.sleep_forever()

    def dispatcher_crashed(self, error: Exception) -> None:
        """The dispatcher raised ``error``: ``on_failure`` gets it now (the producer fails
        before the stop closes the queue, so a put waiting for room hears why), then every
        actor stops; the calls in flight are abandoned."""
        self._crash = error
        self._on_failure(error)
        self._stop.cancel()

    def _dispatcher(self) -> Actor[Entry]:
        return Dispatcher(self)

    def _call_sender(self) -> Actor[Delivery]:
        return CallSender(self)

    # -- what the actors do -----------------------------------------------------------------

    async def dispatch(self, queue: Mailbox[Entry], task_group: TaskGroup) -> None:
        """The dispatcher's loop: take the queued records into the pipeline, hand calls to
        idle senders, then sleep until woken or the pipeline's next wakeup."""
        pipeline = self._pipeline
        idle = self._idle
        while True:
            self._wake = anyio.Event()  # a wake from now on is answered by the next look
            now = anyio.current_time()
            if len(queue):
                self._take(queue, now)
            if pipeline.needs_refresh and not self._refreshing and now >= self._next_refresh:
                self._refreshing = True
                task_group.start_soon(self._refresh_shard_map)
            force = self._flushing > 0
            while idle:
                mailbox = idle.popleft()
                if mailbox.closed:
                    continue  # its sender is stopping for good
                call = pipeline.next_call(now, force=force)
                if call is None:
                    idle.appendleft(mailbox)
                    break
                try:
                    delivery = Delivery(call)
                    # Registered before the sender receives it, so an abort in between cancels
                    # it too (a call not yet started was sent after an abort, into a drained
                    # pipeline).
                    self._scopes.add(delivery.scope)
                    self.in_flight += 1
                    mailbox.send_nowait(delivery)
                except BaseException:
                    pipeline.strand(call)  # no sender holds it: the drain fails its records
                    raise
            wakeup = pipeline.next_wakeup(now, force=force) if idle else None
            unreachable = self.health.warn(now, pipeline.pending_records)
            for warn_at in (unreachable, self._warn_backpressure(queue, now)):
                if warn_at is not None:
                    wakeup = warn_at if wakeup is None else min(wakeup, warn_at)
            if pipeline.needs_refresh and not self._refreshing:
                wakeup = self._next_refresh if wakeup is None else min(wakeup, self._next_refresh)
            timeout = math.inf if wakeup is None else max(0.0, wakeup - now)
            with anyio.move_on_after(timeout):
                await self._wake.wait()

    def _take(self, queue: Mailbox[Entry], now: float) -> None:
        """Every queued record into the pipeline; ``record_ttl`` counts from here, at most a
        loop iteration after ``put`` (one clock read per batch, not per record)."""
        self._pipeline.add_many(queue.receive_held(), now)

    def _warn_backpressure(self, queue: Mailbox[Entry], now: float) -> float | None:
        """Say why once a put has waited ``backpressure_warning_after`` for room, at most once
        per ``backpressure_warning_interval``; returns when to look again."""
        if not queue.senders_waiting:
            return None
        config = self._config
        waited = queue.longest_wait()
        due = max(
            now + config.backpressure_warning_after - waited,
            self._last_backpressure_warning + config.backpressure_warning_interval,
        )
        if now < due:
            return due
        self._last_backpressure_warning = now
        cause = self.health.cause(now)
        if cause is None:
            cause = why_no_room(self._pipeline, config, self.in_flight, now)
        log.warning(
            "producer for stream %r: put waited %.1fs for room; %d records / %d bytes "
            "outstanding (limits %d / %d), %d puts waiting. %s",
            self._stream,
            waited,
            queue.occupied,
            queue.weight,
            self._limits.records,
            self._limits.nbytes,
            queue.senders_waiting,
            cause,
        )
        return now + config.backpressure_warning_interval

    def ready(self, mailbox: Mailbox[Delivery]) -> None:
        """A sender (re)started or finished a call: it can take the next one."""
        if not len(mailbox) and mailbox not in self._idle:
            self._idle.append(mailbox)
        self.wake()

    async def send(self, delivery: Delivery) -> None:
        """Send one call inside its scope, which an abort cancels; settle it unless this
        sender crashes first (then :meth:`_lost` does)."""
        pipeline = self._pipeline
        call = delivery.call
        scope = delivery.scope
        try:
            with scope:
                client = self._client
                response = await client.send(
                    client.codec.encode_put_records(self._stream, call.records()),
                    retry=_ONE_ATTEMPT,
                )
                results = put_records_results(response)
        except errors.KinesisError as exc:  # the call failed (or a MalformedReplyError)
            self.failed_calls += 1
            delivery.settled = True
            now = anyio.current_time()
            self.health.answered(exc, now)
            pipeline.fail(call, exc, now)
        except anyio.get_cancelled_exc_class():
            self._abandon(delivery)
            raise
        else:
            if scope.cancelled_caught:
                self._abandon(delivery)
            else:
                self.calls += 1
                delivery.settled = True
                now = anyio.current_time()
                self.health.answered(None, now)
                pipeline.complete(call, results, now)
        finally:
            self._scopes.discard(scope)
            self.in_flight -= 1
            self.wake()

    def _undelivered(self, letter: DeadLetter[Entry]) -> None:
        """A record still queued when the dispatcher stopped for good: failed, never lost."""
        self._on_undelivered(letter.item)

    def _abandon(self, delivery: Delivery) -> None:
        if delivery.settled:
            return
        delivery.settled = True
        self._pipeline.abandon(
            delivery.call,
            errors.ProducerClosedError(
                f"producer for {self._stream!r} stopped while this record was in flight: it "
                "may or may not have been written"
            ),
        )

    def _lost(self, letter: DeadLetter[Delivery]) -> None:
        """The supervisor's report of a call its sender did not settle.

        Handled when its sender crashed: the request may have reached the service, so its
        records go again as an unknown outcome. Still queued at the final stop: abandoned.
        """
        delivery = letter.item
        if delivery.settled:
            return
        if letter.reason is DropReason.LOST_IN_FLIGHT and letter.error is not None:
            self.crashes += 1
            self.failed_calls += 1
            delivery.settled = True
            self._pipeline.unknown(delivery.call, letter.error, anyio.current_time())
        else:
            self._scopes.discard(delivery.scope)
            self.in_flight -= 1
            self._abandon(delivery)
        self.wake()

    async def _refresh_shard_map(self) -> None:
        pipeline = self._pipeline
        try:
            shard_map = await list_open_shards(self._client, self._stream)
        except errors.KinesisError as exc:
            log.warning("producer for stream %r could not list shards: %s", self._stream, exc)
        else:
            misplaced = pipeline.misplaced_records, pipeline.misplaced_keys
            pipeline.set_shard_map(shard_map)
            self.shard_map_refreshes += 1
            if pipeline.misplaced_records > misplaced[0]:
                log.info(
                    "producer for stream %r: %d records of %d keys were written to a child "
                    "shard that does not own their key (aggregates in flight when their shard "
                    "split, at a point inside them); those keys' next records follow them "
                    "there, so each key stays on one shard (see docs/producer.md, "
                    "'Resharding and key order').",
                    self._stream,
                    pipeline.misplaced_records - misplaced[0],
                    pipeline.misplaced_keys - misplaced[1],
                )
            refused, self._pins_refused_told = self._pins_refused_told, pipeline.pins_refused
            if pipeline.pins_refused > refused:
                log.warning(
                    "producer for stream %r: %d keys with records on a child shard that does "
                    "not own them could not be made to follow them (%d keys follow others "
                    "already): readers of the two children may deliver those keys out of order",
                    self._stream,
                    pipeline.pins_refused - refused,
                    pipeline.pinned_keys,
                )
        finally:
            self._refreshing = False
            self._next_refresh = anyio.current_time() + self._config.shard_map_min_refresh_interval
            self.wake()
