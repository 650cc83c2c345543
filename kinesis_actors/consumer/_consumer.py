"""The ``Consumer`` facade: discovery, per-shard readers and processors, commit and positions.

Shape (all in one task group, opened with the consumer):

* discovery: one paginated ListShards per stream per round, every
  ``shard_discovery_interval`` seconds (±20 % jitter), and early when a shard ends with
  children not seen yet;
* a scheduler that starts a shard's pipeline and reader once the shard is assigned to this
  worker and its parents are released (``_shards``);
* with ``lease_table``, the lease membership (``_group``): shards are this worker's while it
  holds their leases, commits become the leases' checkpoints, a lost lease stops its shard at
  once, and a clean close hands every lease over;
* a supervisor of reader actors, one per shard (``_actors.ReaderActor``);
* either the async iterator, which takes batches in arrival order across shards, or
  :meth:`Consumer.run`, a supervisor of one processor actor per shard.

Nothing that reads the network awaits a buffer: readers take a credit first (runtime's
protocol), so memory is O(shards x prefetch_batches) and one slow shard stalls only itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from anyio.abc import TaskGroup, TaskStatus

from .. import errors
from .._validate import check_type
from ..client import KinesisClient
from ..errors import ConfigError
from ..records import Position
from ..runtime import RestartIntensityExceeded, Supervisor, raise_as_itself, unwrap_sole
from ._actors import Handler
from ._batch import RecordBatch
from ._config import ConsumerConfig, StartingPosition, stream_names
from ._discovery import DiscoveryFailures, list_shards
from ._efo import EfoReader, EfoSettings
from ._group import default_worker_id, lease_event
from ._identity import StreamIdentity, open_identities, parse_identities
from ._pacing import PacingSettings, ReadPacer
from ._pipeline import ShardPipeline
from ._positions import SavedShard, ShardKey, encode_positions, parse_positions
from ._reader import PollingReader, ShardReader
from ._registration import (
    check_efo_endpoint,
    deregister_consumers,
    deregisters_on_close,
    resolve_consumer_arns,
)
from ._shards import ShardGraph, ShardInfo
from ._supervision import last_failure, processor_spec, reader_spec, shard_supervisor

if TYPE_CHECKING:
    from ..leases import LeaseStats
    from ._membership import LeaseMembership

__all__ = ["Consumer"]

log = logging.getLogger("kinesis_actors.consumer")

_JITTER = 0.2
_DEREGISTER_TIMEOUT = 10.0
#: A clean close's final checkpoints and releases: one conditional write per held lease.
_HANDOVER_TIMEOUT = 10.0


class Consumer:
    """Reads one or more streams shard by shard; an async context manager and iterator.

    ``async for batch in consumer`` yields :class:`RecordBatch` es in arrival order across
    shards and in order within each shard. ``await consumer.run(handler)`` instead gives every
    shard its own supervised processor. ``commit(batch)`` and ``positions()`` make restarts
    resume exactly after the last committed record. See ``docs/consumer.md``.
    """

    def __init__(
        self,
        client: KinesisClient,
        streams: str | Sequence[str],
        config: ConsumerConfig | None = None,
    ) -> None:
        check_type("client", client, KinesisClient, "a KinesisClient")
        config = ConsumerConfig() if config is None else config
        check_type("config", config, ConsumerConfig, "a ConsumerConfig")
        self._client = client
        self._streams = stream_names(streams)
        self._config = config
        positions = config.positions
        self._saved: dict[ShardKey, SavedShard] = (
            parse_positions(positions, self._streams) if positions is not None else {}
        )
        self._saved_ids = parse_identities(positions, self._streams) if positions else {}
        self._identities: dict[str, StreamIdentity] = {}
        self._group: LeaseMembership | None = None
        if config.lease_table is not None:
            from ._membership import LeaseMembership  # noqa: PLC0415 - the leases package

            worker = config.worker_id if config.worker_id is not None else default_worker_id()
            self._group = LeaseMembership(client, self._streams, config, worker)
        self._graph = ShardGraph(
            config.worker_index,
            config.worker_count,
            assignment=None if self._group is None else self._group.assignment,
        )
        self._pacing = PacingSettings(
            max_calls_per_second=config.max_calls_per_second,
            max_bytes_per_second=config.max_bytes_per_second,
            idle_initial=config.idle_backoff_initial,
            idle_max=config.idle_backoff_max,
            throttle_initial=config.throttle_backoff_initial,
            throttle_max=config.throttle_backoff_max,
        )
        self._pipelines: dict[ShardKey, ShardPipeline] = {}
        self._initial: set[ShardKey] | None = None
        self._arrivals: deque[ShardPipeline] = deque()  # one entry per buffered batch
        self._mode: str | None = None
        self._failure: BaseException | None = None
        self._state = "new"
        self._opened_at = datetime.now(UTC)
        self._list_calls = 0
        self._discoveries = 0
        self._discovery_failures = DiscoveryFailures()
        self._readers: Supervisor | None = None
        self._processors: Supervisor | None = None
        self._processing: set[ShardKey] = set()
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._consumer_arns: dict[str, str] = {}
        self._efo = EfoSettings(
            watchdog_timeout=config.efo_watchdog_timeout,
            subscription_lifetime=config.efo_subscription_lifetime,
            starvation_warning=config.efo_starvation_warning,
        )

    @property
    def streams(self) -> list[str]:
        return list(self._streams)

    @property
    def config(self) -> ConsumerConfig:
        return self._config

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("a Consumer can be opened only once")
        if self._config.mode == "efo":
            check_efo_endpoint(self._client)
        self._arrived = anyio.Event()
        self._done = anyio.Event()
        self._rediscover = anyio.Event()
        self._reschedule = anyio.Event()
        # An unknown stream fails here (ResourceNotFoundError), a document of another
        # stream or incarnation too (PositionsMismatchError, lesson 31).
        self._identities = await open_identities(self._client, self._streams, self._saved_ids)
        config = self._config
        if config.mode == "efo":
            with anyio.fail_after(config.registration_timeout):
                self._consumer_arns = await resolve_consumer_arns(
                    self._client, self._streams, config
                )
        self._opened_at = datetime.now(UTC)
        stack = AsyncExitStack()
        self._stack = stack
        await stack.__aenter__()
        try:
            # Before the task group: a failure here is the cause itself, not an ExceptionGroup
            # (a lease table of another schema, a worker id in use, a stream that is gone).
            if self._group is not None:
                await self._group.open(stack)
                # Runs after the task group has stopped every reader (the stack is LIFO).
                stack.push_async_callback(self._hand_over)
            await self._discover()
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            await self._tg.start(self._supervise_readers)
            await self._schedule()
            self._tg.start_soon(self._discovery_loop)
            self._tg.start_soon(self._scheduler_loop)
            if self._group is not None:
                self._tg.start_soon(self._lease_events, self._group)
        except BaseException as exc:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            # No shield around it: the task group must be exited in the scope it was entered in.
            with unwrap_sole():  # the cause itself, not a group of one
                await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close(clean=exc is None)

    async def aclose(self) -> None:
        """Stop every actor (bounded) and end iteration; positions stay readable.

        In EFO mode a clean close also deregisters the consumer when ``deregister_on_close``
        says so (see ``docs/consumer.md``).
        """
        await self._close(clean=True)

    async def _close(self, *, clean: bool) -> None:
        if self._state in ("closed", "new"):
            self._state = "closed"
            return
        self._state = "closed"
        self._done.set()
        self._arrived.set()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        if self._stack is not None:
            # The supervisors' stops are shielded and bounded themselves.
            with unwrap_sole():
                await self._stack.aclose()
        if clean and self._failure is None and deregisters_on_close(self._config):
            with anyio.move_on_after(_DEREGISTER_TIMEOUT, shield=True):
                await deregister_consumers(self._client, self._consumer_arns)

    def stop(self) -> None:
        """Ask :meth:`run` and the iterator to end (from any task of this loop)."""
        if self._state == "open":
            self._done.set()
            self._arrived.set()

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            log.error("consumer failed: %r", error)
            self._failure = error
        self._done.set()
        self._arrived.set()

    # -- the background tasks ---------------------------------------------------------------

    async def _supervise_readers(self, *, task_status: TaskStatus[None]) -> None:
        try:
            async with shard_supervisor("readers", self._config.restart_intensity) as supervisor:
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
            shards, calls = await list_shards(self._client, stream, page_size)
            self._list_calls += calls
            self._graph.update(stream, shards)
        self._discoveries += 1
        if self._initial is None:
            self._initial = {shard.key for shard in self._graph.shards()}
        # Shards no longer listed have expired: they count as finished, and leave positions.
        for key in [key for key in self._saved if not self._graph.listed(key)]:
            del self._saved[key]
        for key, pipeline in list(self._pipelines.items()):
            if pipeline.finished and not self._graph.listed(key):
                del self._pipelines[key]

    async def _schedule(self) -> None:
        for shard in self._graph.shards():
            if shard.key in self._pipelines or not self._graph.ready(shard, self._released):
                continue
            await self._start_shard(shard)
        if self._mode == "run":
            for pipeline in list(self._pipelines.values()):
                await self._start_processor(pipeline)
        group = self._group
        if group is not None:
            for key, pipeline in list(self._pipelines.items()):
                if pipeline.finished and group.finishing(key):
                    await group.finish(key)  # SHARD_END: any worker may read the children

    # -- leases -----------------------------------------------------------------------------

    async def _lease_events(self, group: LeaseMembership) -> None:
        try:
            await group.run_events(self._lease_acquired, self._lease_lost)
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
        if self._processors is not None and key in self._processing:
            # A handler in progress is cancelled: its batch was not committed either.
            with contextlib.suppress(KeyError):  # it may have returned already
                await self._processors.stop_child(f"{key[0]}:{key[1]}")
        self._processing.discard(key)
        log.info(
            "%s/%s: lease %s, stopped reading (%d batch(es) dropped)",
            *key,
            reason,
            dropped,
            extra=lease_event("stop", key, reason=reason),
        )

    async def _hand_over(self) -> None:
        """Clean close, readers stopped: the final checkpoints, then release every lease."""
        group = self._group
        if group is None:
            return
        final: dict[ShardKey, Position] = {}
        with anyio.move_on_after(_HANDOVER_TIMEOUT, shield=True):
            for key, pipeline in list(self._pipelines.items()):
                if not group.assignment.owns(key):
                    continue
                if pipeline.finished:
                    await group.finish(key)
                    continue
                log.info("%s/%s: closing", *key, extra=lease_event("stop", key, reason="close"))
                if pipeline.committed is not None:
                    final[key] = pipeline.committed
            await group.release(final)

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
        saved = self._saved.get(key) or SavedShard(start=self._start_for(shard))
        pipeline = ShardPipeline(
            key,
            saved,
            self._config.prefetch_batches,
            on_change=self._reschedule_soon,
            on_arrival=self._arrival,
            origin=self,
        )
        pipeline.run_mode = self._mode == "run"
        if self._mode == "iterate":
            pipeline.let_go.set()
        self._pipelines[key] = pipeline
        if self._group is None:
            log.debug("starting %s/%s from %s", shard.stream, shard.shard_id, saved)
        else:
            log.info("reading %s/%s from %s", *key, saved, extra=lease_event("start", key))
        if pipeline.end_reached:
            self._reschedule_soon()
            return
        supervisor = self._readers
        if supervisor is None:
            raise RuntimeError("the readers' supervisor is not running")
        spec = reader_spec(pipeline, self._make_reader, self._fail, self._config.mode)
        await supervisor.start_child(spec)

    def _make_reader(self, pipeline: ShardPipeline, start: StartingPosition) -> ShardReader:
        if self._config.mode == "efo":
            return EfoReader(
                self._client,
                pipeline.stream,
                pipeline.shard_id,
                self._consumer_arns[pipeline.stream],
                start,
                metrics=pipeline.metrics,
                settings=self._efo,
                closed=lambda: getattr(self._graph.get(pipeline.key), "closed", False),
                poison=self._config.poison_records,
            )
        return PollingReader(
            self._client,
            pipeline.stream,
            pipeline.shard_id,
            start,
            pacer=ReadPacer(self._pacing),
            metrics=pipeline.metrics,
            limit=self._config.max_records_per_call,
            poison=self._config.poison_records,
        )

    def _reschedule_soon(self) -> None:
        self._reschedule.set()
        for pipeline in self._pipelines.values():
            if pipeline.end_reached and any(
                not self._graph.listed((pipeline.stream, child)) for child in pipeline.children
            ):
                self._rediscover.set()  # children we have not listed yet: look now
                break

    def _arrival(self, pipeline: ShardPipeline) -> None:
        if self._mode != "run":
            self._arrivals.append(pipeline)
            self._arrived.set()

    def _claim(self, mode: str) -> None:
        if self._state == "closed":
            raise errors.ConsumerClosedError("the Consumer is closed: it yields no more batches")
        if self._state != "open":
            raise RuntimeError("the Consumer is not open: use 'async with Consumer(...)'")
        if self._mode == mode:
            return
        if self._mode is not None:
            raise RuntimeError("a Consumer is either iterated or run(handler), not both")
        self._mode = mode
        for pipeline in self._pipelines.values():
            pipeline.run_mode = mode == "run"
            if mode == "iterate":
                pipeline.let_go.set()
        if mode == "run":
            self._arrivals.clear()

    # -- consuming --------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[RecordBatch]:
        return self

    async def __anext__(self) -> RecordBatch:
        self._claim("iterate")
        while True:
            if self._failure is not None:
                raise self._failure
            while self._arrivals:
                pipeline = self._arrivals.popleft()
                try:
                    return pipeline.take_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    continue  # rewound since it arrived: nothing left to take
            if self._done.is_set():
                raise StopAsyncIteration
            self._arrived = anyio.Event()
            await self._arrived.wait()

    async def run(self, handler: Handler) -> None:
        """Give every shard a supervised processor that calls ``await handler(batch)``.

        Batches of a shard are handled one at a time, in order, each committed when its
        handler returns; a slow handler delays only its shard. A handler's exception restarts
        that shard's processor from its last committed position. Past ``restart_intensity``,
        the last exception is raised from here as itself (a handler's ``KeyError`` is caught by
        ``except KeyError``), with a note saying run() gave up. Returns after :meth:`stop` or
        when the consumer closes; cancel it to stop as well.
        """
        if not callable(handler):
            raise ConfigError(f"handler must be an async callable, got {handler!r}")
        self._claim("run")
        self._handler = handler
        try:
            # Stopping is a cancellation: handlers in progress are cancelled (their batches are
            # not committed, so a resume delivers them again), and none is waited for.
            with anyio.CancelScope() as stopping:
                async with shard_supervisor(
                    "processors", self._config.restart_intensity
                ) as supervisor:
                    self._processors = supervisor
                    for pipeline in list(self._pipelines.values()):
                        await self._start_processor(pipeline)
                    await self._done.wait()
                    stopping.cancel()
                    await anyio.lowlevel.checkpoint()
        except RestartIntensityExceeded as gave_up:
            raise_as_itself(last_failure(gave_up))
        finally:
            self._processors = None
        if self._failure is not None:
            raise self._failure

    async def _start_processor(self, pipeline: ShardPipeline) -> None:
        supervisor = self._processors
        if supervisor is None or pipeline.key in self._processing or pipeline.finished:
            return
        self._processing.add(pipeline.key)
        await supervisor.start_child(processor_spec(pipeline, self._handler, self.commit))

    # -- positions --------------------------------------------------------------------------

    def commit(self, batch: RecordBatch) -> None:
        """Mark everything up to the end of ``batch`` (in its shard) as processed."""
        check_type("batch", batch, RecordBatch, "a RecordBatch from this consumer")
        key = (batch.stream, batch.shard_id)
        pipeline = self._pipelines.get(key)
        group = self._group
        if batch.origin is not self or (pipeline is None and group is None):
            raise errors.ValidationError(
                f"commit() takes only this consumer's batches; {batch!r} was read by "
                f"{'another consumer' if batch.origin is not None else 'no consumer'}"
            )
        position = batch.last_position
        if group is not None and (pipeline is None or not pipeline.delivered_through(position)):
            # Read under a lease lost since: the new owner delivers these records again.
            group.stale_commits += 1
            log.debug("%s/%s: commit after the lease was lost, ignored", *key)
            return
        assert pipeline is not None
        pipeline.commit(position)
        if group is not None:
            group.note(key, position)

    def positions(self) -> dict[str, Any]:
        """Every shard's committed position or ``finished`` flag, as JSON-serializable data.

        Pass it back as ``ConsumerConfig(positions=...)`` to resume exactly after the last
        committed record of every shard.
        """
        entries = dict(self._saved)
        for key, pipeline in self._pipelines.items():
            entries[key] = pipeline.saved()
        return encode_positions(entries, self._streams, self._identities)

    def shard_parents(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """Every listed shard of this worker and its parents, by ``(stream, shard_id)``."""
        return {shard.key: shard.parents for shard in self._graph.shards()}

    @property
    def worker_id(self) -> str | None:
        """This worker's id in the lease table (None without ``lease_table``)."""
        return None if self._group is None else self._group.worker_id

    @property
    def leases(self) -> LeaseStats | None:
        """The lease protocol's statistics now (None without ``lease_table`` or before open)."""
        return None if self._group is None else self._group.snapshot()

    @property
    def consumer_arns(self) -> dict[str, str]:
        """EFO: the consumer ARN used per stream (empty when polling)."""
        return dict(self._consumer_arns)

    @property
    def metrics(self) -> dict[str, Any]:
        """A snapshot: per shard (``"stream/shard_id"``) counters, plus discovery counters."""
        shards: dict[str, dict[str, Any]] = {}
        for (stream, shard_id), pipeline in self._pipelines.items():
            pipeline.metrics.buffer_depth = len(pipeline.buffer)
            shard = shards[f"{stream}/{shard_id}"] = pipeline.metrics.to_dict()
            shard["backpressured_seconds"] = pipeline.backpressured_seconds()
        leases = self.leases
        return {
            "shards": shards,
            "leases": None if leases is None else dataclasses.asdict(leases),
            "discoveries": self._discoveries,
            "list_shards_calls": self._list_calls,
            "discovery_failures": self._discovery_failures.total,
            "buffered_batches": sum(len(p.buffer) for p in self._pipelines.values()),
            "waiting_shards": sorted(
                f"{shard.stream}/{shard.shard_id}"
                for shard in self._graph.shards()
                if shard.key not in self._pipelines
                and not (shard.key in self._saved and self._saved[shard.key].finished)
            ),
        }
