"""Which shards this worker reads, and when: discovery, the scheduler, readers, leases.

:class:`ShardScheduler` is a component the :class:`~._consumer.Consumer` owns (``_scheduler``),
not its base: it owns the shard graph, the saved positions, the shards' pipelines (and those
being handed over), the readers' supervisor (the readers themselves are made by its
:class:`~._reader_maker.ReaderMaker`), the lease membership and the discovery counters,
and it writes none of the consumer's fields (nor the consumer any of its). It runs discovery
(one paginated ListShards per stream per round, every ``shard_discovery_interval`` ±20 %, and
early when a shard ends with children not seen yet: its two events are its own) and the
scheduler (a shard's pipeline and reader start once the shard is this worker's and its parents
are released, ``_shards``); with a lease table it applies the coordinator's events
(``_membership``). The consumer drives it through :meth:`~ShardScheduler.open`,
:meth:`~ShardScheduler.start`, :meth:`~ShardScheduler.set_mode` and
:meth:`~ShardScheduler.commit`, reads it through read-only properties and snapshots, and is
told back through the callbacks it gives the constructor: a failure, a batch buffered, the
mode the application took batches in, a scheduling round done (under ``run()``: processors to
start), a shard's processor to stop or forget.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

from .. import errors
from ..client import KinesisClient
from ..records import Position
from ..runtime import IntensityScope, RestartIntensityExceeded, Supervisor, SupervisorSnapshot
from ._config import ConsumerConfig, StartingPosition
from ._discovery import DiscoveryFailures, list_shards
from ._group import default_worker_id, lease_event
from ._lifecycle import start_line
from ._pipeline import ShardPipeline
from ._positions import SavedShard, ShardKey, parse_positions
from ._reader_maker import ReaderMaker
from ._shards import ShardGraph, ShardInfo
from ._statistics import ShardStatistics
from ._supervision import reader_spec, shard_supervisor

if TYPE_CHECKING:
    from contextlib import AsyncExitStack

    from ..leases import LeaseStats
    from ._membership import LeaseMembership

__all__ = ["ShardScheduler"]

log = logging.getLogger("kinesis_actors.consumer")

_JITTER = 0.2
#: A clean close's final checkpoints and releases: one conditional write per held lease.
_HANDOVER_TIMEOUT = 10.0


class ShardScheduler:
    """The shards of a consumer: what is listed, what is this worker's, what is read now.

    ``fail`` stops the consumer with an error (raised into the application's loop);
    ``arrival`` is told of every batch buffered (each pipeline's ``on_arrival``); ``mode``
    says how the application takes batches (None until it has started to); ``scheduled`` is
    awaited after every scheduling round (under ``run()``: processors for the new pipelines);
    ``stop_processor`` stops a shard's processor at once (its lease lost) and
    ``forget_processor`` lets a shard have a new processor later (it was handed over).
    ``origin`` is stamped on every batch (``RecordBatch.origin``).
    """

    _rediscover: anyio.Event
    _reschedule: anyio.Event

    def __init__(
        self,
        client: KinesisClient,
        streams: dict[str, str],
        config: ConsumerConfig,
        *,
        origin: object,
        fail: Callable[[BaseException], None],
        arrival: Callable[[ShardPipeline], None],
        mode: Callable[[], str | None],
        scheduled: Callable[[], Awaitable[None]],
        stop_processor: Callable[[ShardKey], Awaitable[None]],
        forget_processor: Callable[[ShardKey], None],
    ) -> None:
        self._origin = origin
        self._fail = fail
        self._arrival = arrival
        self._taken_as = mode
        self._scheduled = scheduled
        self._stop_processor = stop_processor
        self._forget_processor = forget_processor
        self._client = client
        # name → as given (an ARN for another account's stream): keyed by name throughout.
        self._streams = streams
        self._config = config
        positions = config.positions
        self._saved: dict[ShardKey, SavedShard] = (
            parse_positions(positions, self._streams) if positions is not None else {}
        )
        self._group: LeaseMembership | None = None
        if config.lease_table is not None:
            from ._membership import LeaseMembership  # noqa: PLC0415 - the leases package

            worker = config.worker_id if config.worker_id is not None else default_worker_id()
            self._group = LeaseMembership(client, list(self._streams.values()), config, worker)
        self._graph = ShardGraph(
            config.worker_index,
            config.worker_count,
            assignment=None if self._group is None else self._group.assignment,
        )
        self._reader_maker = ReaderMaker(
            client,
            self._streams,
            config,
            closed=lambda key: getattr(self._graph.get(key), "closed", False),
        )
        self._pipelines: dict[ShardKey, ShardPipeline] = {}
        # Shards asked for by another worker: reading stopped, commits still taken.
        self._handing: dict[ShardKey, ShardPipeline] = {}
        self._initial: set[ShardKey] | None = None
        self._opened_at = datetime.now(UTC)
        self._list_calls = 0
        self._discoveries = 0
        self._discovery_failures = DiscoveryFailures()
        self._readers: Supervisor | None = None

    # -- the consumer's commands -----------------------------------------------------------

    async def open(self, stack: AsyncExitStack, consumer_arns: dict[str, str]) -> None:
        """The consumer opens: join the lease table (its close on ``stack``, the final
        checkpoints and releases before it) and list every stream's shards. ``consumer_arns``
        (EFO) are the ones resolved for this open. Before the task group: a failure here is
        the cause itself (a lease table of another schema, a worker id in use, a stream that
        is gone)."""
        self._rediscover = anyio.Event()
        self._reschedule = anyio.Event()
        self._reader_maker.opened(consumer_arns)
        self._opened_at = datetime.now(UTC)
        if self._group is not None:
            await self._group.open(stack)
            # Runs after the task group has stopped every reader (the stack is LIFO).
            stack.push_async_callback(self._hand_over)
        await self._discover()

    async def start(self, tg: TaskGroup) -> None:
        """In the consumer's task group: the readers' supervisor, the first shards, then
        the discovery and scheduler loops (and the lease events)."""
        await tg.start(self._supervise_readers)
        await self._schedule()
        tg.start_soon(self._discovery_loop)
        tg.start_soon(self._scheduler_loop)
        if self._group is not None:
            tg.start_soon(self._lease_events, self._group)

    def set_mode(self, mode: str) -> None:
        """The application took its first batch this way: every pipeline follows (new ones
        ask ``mode``)."""
        for pipeline in self._pipelines.values():
            pipeline.set_mode(mode)

    def commit(self, key: ShardKey, position: Position) -> bool:
        """Commit ``position`` in ``key``'s pipeline (and the lease's next checkpoint).
        False when nothing could have read it: no such shard here, and no lease table."""
        pipeline = self._pipelines.get(key) or self._handing.get(key)
        group = self._group
        if pipeline is None and group is None:
            return False
        if pipeline is None or (group is not None and not pipeline.delivered_through(position)):
            # Read under a lease lost since (a pipeline of a re-taken lease has not delivered
            # it): the new owner delivers these records again.
            log.debug("%s/%s: commit after the lease was lost, ignored", *key)
            return True
        pipeline.commit(position)
        if group is not None:
            group.note(key, position)
        return True

    def fenced(self, key: ShardKey) -> bool:
        """Whether ``key``'s batches must not be delivered: with a lease table, its lease
        lapsed on this worker's clock or is gone, and the shard is being dropped. Never
        without a lease table."""
        return self._group is not None and self._group.fenced(key)

    # -- what the consumer reads ------------------------------------------------------------

    @property
    def worker_id(self) -> str | None:
        """This worker's id in the lease table (None without ``lease_table``)."""
        return None if self._group is None else self._group.worker_id

    def lease_statistics(self) -> LeaseStats | None:
        """The lease protocol's statistics now (None without ``lease_table``)."""
        return None if self._group is None else self._group.statistics()

    @property
    def readers(self) -> SupervisorSnapshot | None:
        """The readers' supervisor as plain data (None before the consumer is open)."""
        return None if self._readers is None else self._readers.statistics()

    def pipelines(self) -> list[ShardPipeline]:
        """The pipelines of the shards read now (a copy: the caller may await between)."""
        return list(self._pipelines.values())

    def listed(self) -> set[ShardKey]:
        """Every shard listed, whoever reads it."""
        return self._graph.keys()

    def shard_parents(self) -> dict[ShardKey, tuple[str, ...]]:
        """Every listed shard of this worker and its parents."""
        return {shard.key: shard.parents for shard in self._graph.shards()}

    def saved(self) -> dict[ShardKey, SavedShard]:
        """Every shard's position to save: the pipelines' own, else what was loaded."""
        entries = dict(self._saved)
        for key, pipeline in self._pipelines.items():
            entries[key] = pipeline.saved()
        return entries

    def shard_statistics(self) -> dict[ShardKey, ShardStatistics]:
        """Per shard read now: its counters, frozen."""
        return {key: pipeline.statistics() for key, pipeline in self._pipelines.items()}

    def waiting_shards(self) -> tuple[ShardKey, ...]:
        """The shards listed and not finished that are not read yet (waiting for their
        parents), in order."""
        return tuple(
            sorted(
                shard.key
                for shard in self._graph.shards()
                if shard.key not in self._pipelines
                and not (shard.key in self._saved and self._saved[shard.key].finished)
            )
        )

    def discovery_counts(self) -> tuple[int, int, int]:
        """Discovery rounds, ListShards calls and rounds that failed, since open."""
        return self._discoveries, self._list_calls, self._discovery_failures.total

    # -- the background tasks ---------------------------------------------------------------

    async def _supervise_readers(self, *, task_status: TaskStatus[None]) -> None:
        try:
            async with shard_supervisor(
                "readers", self._config.restart_intensity, IntensityScope.CHILD
            ) as supervisor:
                self._readers = supervisor
                task_status.started()
                await anyio.sleep_forever()
        except RestartIntensityExceeded as exc:
            self._fail(exc)

    async def _discovery_loop(self) -> None:
        """Periodic discovery; failed rounds follow ``DiscoveryFailures`` (``_discovery``).
        A stream that is gone fails the consumer at once."""
        interval = self._config.shard_discovery_interval
        while True:
            delay = interval * random.uniform(1 - _JITTER, 1 + _JITTER)
            with anyio.move_on_after(delay):
                await self._rediscover.wait()
            self._rediscover = anyio.Event()
            try:
                await self._discover()
            except errors.ResourceNotFoundError as exc:
                self._fail(exc)
                return
            except errors.KinesisError as exc:
                if self._discovery_failures.failed():
                    self._fail(exc)
                    return
                streak = self._discovery_failures.streak
                log.warning("shard discovery failed (%d in a row), retrying: %s", streak, exc)
                continue
            except Exception as exc:  # a bug must not cancel the user's code: report it
                self._fail(exc)
                return
            self._discovery_failures.succeeded()
            self._reschedule.set()

    async def _scheduler_loop(self) -> None:
        while True:
            await self._reschedule.wait()
            self._reschedule = anyio.Event()
            try:
                await self._schedule()
            except Exception as exc:  # as above: into the iterator or run(), not the task group
                self._fail(exc)
                return

    async def _discover(self) -> None:
        page_size = self._config.list_shards_page_size
        for stream in self._streams:
            shards, calls = await list_shards(self._client, self._streams[stream], page_size)
            self._list_calls += calls
            self._graph.update(stream, shards)
        self._discoveries += 1
        if self._initial is None:
            # All of them: with a lease table, the shards this worker will hold come later.
            self._initial = self._graph.keys()
        # Shards no longer listed have expired: they count as finished, and leave positions.
        for key in [key for key in self._saved if not self._graph.listed(key)]:
            del self._saved[key]
        for key, pipeline in list(self._pipelines.items()):
            if pipeline.finished and not self._graph.listed(key):
                del self._pipelines[key]

    async def _schedule(self) -> None:
        for shard in self._graph.shards():
            if (
                shard.key in self._pipelines
                or shard.key in self._handing
                or not self._graph.ready(shard, self._released)
            ):
                continue
            await self._start_shard(shard)
        await self._scheduled()
        group = self._group
        if group is not None:
            for key, pipeline in list(self._pipelines.items()):
                if pipeline.finished and group.finishing(key):
                    await group.finish(key)  # SHARD_END: any worker may read the children

    # -- leases -----------------------------------------------------------------------------

    async def _lease_events(self, group: LeaseMembership) -> None:
        try:
            await group.run_events(self._lease_acquired, self._lease_lost, self._lease_handoff)
        except Exception as exc:  # a worker id in use, the table gone: into the user's loop
            self._fail(exc)

    def _lease_acquired(self, key: ShardKey, saved: SavedShard, parents: tuple[str, ...]) -> None:
        if saved.committed is not None or saved.start is not None or saved.finished:
            self._saved[key] = saved
        else:
            self._saved.pop(key, None)  # never checkpointed: the consumer's start applies
        if not self._graph.listed(key):
            self._rediscover.set()  # created by another worker's shard sync: list it now
        self._reschedule.set()

    async def _lease_lost(self, key: ShardKey, reason: str) -> None:
        """Stop reading ``key`` at once; what was buffered is dropped (the new owner reads it
        again from the lease's checkpoint)."""
        self._saved.pop(key, None)
        pipeline = self._pipelines.get(key)
        if pipeline is None or pipeline.finished:
            return
        del self._pipelines[key]
        dropped = pipeline.drop()
        # A handler in progress is cancelled: its batch was not committed either.
        await self._stop_processor(key)
        log.info(
            "%s/%s: lease %s, stopped reading (%d batch(es) dropped)",
            *key,
            reason,
            dropped,
            extra=lease_event("stop", key, reason=reason),
        )

    async def _lease_handoff(self, key: ShardKey) -> None:
        """Another worker asked for ``key``'s lease: stop reading now (batches not taken yet
        are dropped: the new owner reads them), wait until what the application took is
        committed (at most half the handoff timeout; a handler under ``run()`` finishes),
        and hand the lease over at the committed position, where the new owner resumes: no
        record is delivered twice. The shard is not scheduled again until it is handed over
        (it is still this worker's lease until then)."""
        self._saved.pop(key, None)
        pipeline = self._pipelines.pop(key, None)
        group = self._group
        if group is None:
            return
        if pipeline is None:
            await group.hand_over(key, None)
            return
        dropped = pipeline.drop()
        self._handing[key] = pipeline
        log.info(
            "%s/%s: asked for by another worker, stopped reading (%d batch(es) dropped)",
            *key,
            dropped,
            extra=lease_event("stop", key, reason="handoff"),
        )
        try:
            with anyio.move_on_after(group.config.handoff_timeout / 2):
                await pipeline.wait_taken_committed()
            await group.hand_over(key, pipeline.committed)
        finally:
            del self._handing[key]
            self._forget_processor(key)
            self._reschedule.set()  # taken back meanwhile: it was not scheduled while handing

    async def _hand_over(self) -> None:
        """Close, readers stopped: the final checkpoints, then release every lease.

        Bounded and contained: a table that cannot be reached now must not replace the
        application's own exit (or exception) with ours; the leases then expire after
        ``failover_time`` and their last written checkpoints stand (at-least-once).
        """
        group = self._group
        if group is None:
            return
        final: dict[ShardKey, Position] = {}
        with anyio.move_on_after(_HANDOVER_TIMEOUT, shield=True) as bound:
            try:
                for key, pipeline in list(self._pipelines.items()):
                    if not group.assignment.owns(key):
                        continue
                    if pipeline.finished:
                        await group.finish(key)
                        continue
                    stop = lease_event("stop", key, reason="close")
                    log.info("%s/%s: closing", *key, extra=stop)
                    if pipeline.committed is not None:
                        final[key] = pipeline.committed
                await group.release(final)
            except Exception as exc:
                log.warning("handing the leases over failed, they will expire instead: %r", exc)
        if bound.cancelled_caught:
            log.warning("handing the leases over took more than %.0f s", _HANDOVER_TIMEOUT)

    def _released(self, key: ShardKey) -> bool:
        pipeline = self._pipelines.get(key)
        if pipeline is not None:
            return pipeline.released
        saved = self._saved.get(key)
        return saved is not None and saved.finished

    def _start_for(self, shard: ShardInfo) -> StartingPosition:
        """Where a shard with no saved position starts (see docs/consumer.md)."""
        if (
            self._initial is None
            or shard.key not in self._initial
            or self._config.positions is not None
        ):
            return StartingPosition.trim_horizon()  # new since we started (or since the save)
        start = self._config.start
        if start.type == "LATEST" and self._graph.has_parents(shard):
            # Read only after its parents: "latest" must still mean "from when we opened".
            return StartingPosition("AT_TIMESTAMP", timestamp=self._opened_at)
        return start

    async def _start_shard(self, shard: ShardInfo) -> None:
        key = shard.key
        kept = self._saved.get(key)
        saved = kept or SavedShard(start=self._start_for(shard))
        pipeline = ShardPipeline(
            key,
            saved,
            self._config.prefetch_batches,
            on_change=self._reschedule_soon,
            on_arrival=self._arrival,
            origin=self._origin,
        )
        pipeline.set_mode(self._taken_as())
        self._pipelines[key] = pipeline
        line = start_line(
            key,
            kept,
            saved.start or StartingPosition.trim_horizon(),
            configured=self._config.start.type,
            from_lease=self._group is not None,
            known_at_open=self._initial is not None and key in self._initial,
            resumed=self._config.positions is not None,
        )
        extra = None if self._group is None else lease_event("start", key)
        log.info("%s", line, extra=extra)
        if pipeline.end_reached:
            self._reschedule_soon()
            return
        supervisor = self._readers
        if supervisor is None:
            raise RuntimeError("the readers' supervisor is not running")
        spec = reader_spec(pipeline, self._reader_maker.make, self._fail, self._config.mode)
        with contextlib.suppress(KeyError):
            # The reader of this shard's previous pipeline, dropped when its lease was lost
            # or handed over, may not have ended yet when the lease comes back: it stops
            # now (it has nothing left to do), else the new reader could not take its name.
            await supervisor.stop_child(spec.name)
        await supervisor.start_child(spec)

    def _reschedule_soon(self) -> None:
        self._reschedule.set()
        for pipeline in self._pipelines.values():
            if pipeline.end_reached and any(
                not self._graph.listed((pipeline.stream, child)) for child in pipeline.children
            ):
                self._rediscover.set()  # children we have not listed yet: look now
                break
