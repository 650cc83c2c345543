"""The ``Consumer`` facade: discovery, per-shard readers and processors, commit and positions.

Shape (all in one task group, opened with the consumer):

* a :class:`~._scheduler.ShardScheduler`, a component the consumer owns (``_scheduler``):
  discovery, a scheduler that starts a shard's pipeline and reader once the shard is this
  worker's and its parents are released (``_shards``), a supervisor of reader actors, one per
  shard (``_actors.ReaderActor``), and with ``lease_table`` the lease membership
  (``_membership``): shards are this worker's while it holds their leases, commits become the
  leases' checkpoints, a lost lease stops its shard at once, and a clean close hands every
  lease over;
* either the async iterator, which takes batches in arrival order across shards, or
  :meth:`Consumer.run`, a supervisor of one processor actor per shard.

The consumer owns its lifecycle, the stream identities, the EFO consumer ARNs, how the
application takes batches (the mode, the arrivals, the processors) and the failure; the
scheduler owns the shards (see its module). Neither writes a field of the other: the
consumer drives the scheduler through its methods, the scheduler calls back the consumer
through the callbacks given to its constructor.

Nothing that reads the network awaits a buffer: readers take a credit first (runtime's
protocol), so memory is O(shards x prefetch_batches) and one slow shard stalls only itself.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from anyio.abc import TaskGroup

from .. import errors
from .._deprecated import renamed
from .._validate import check_type
from ..client import KinesisClient
from ..errors import ConfigError
from ..runtime import (
    RestartIntensityExceeded,
    Supervisor,
    SupervisorSnapshot,
    raise_as_itself,
    unwrap_sole,
)
from ._actors import Handler
from ._batch import RecordBatch
from ._config import ConsumerConfig, stream_names
from ._identity import StreamIdentity, open_identities, parse_identities
from ._lifecycle import closed_line, opened_line
from ._pipeline import ShardPipeline
from ._positions import ShardKey, encode_positions
from ._registration import (
    check_efo_endpoint,
    deregister_consumers,
    deregisters_on_close,
    resolve_consumer_arns,
)
from ._scheduler import ShardScheduler
from ._statistics import ConsumerStatistics, legacy_metrics
from ._supervision import last_failure, processor_spec, shard_supervisor

if TYPE_CHECKING:
    from ..leases import LeaseStats

__all__ = ["Consumer"]

log = logging.getLogger("kinesis_actors.consumer")

_DEREGISTER_TIMEOUT = 10.0


class ConsumerState(enum.Enum):
    """Where a :class:`Consumer` is in its life: opened once, closed for good."""

    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


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
        self._config = config
        # name → as given (an ARN for another account's stream): keyed by name throughout.
        self._streams = stream_names(streams, client.region)
        positions = config.positions
        self._saved_ids = parse_identities(positions, self._streams) if positions else {}
        self._identities: dict[str, StreamIdentity] = {}
        self._consumer_arns: dict[str, str] = {}
        self._mode: str | None = None
        self._arrivals: deque[ShardPipeline] = deque()  # one entry per buffered batch
        self._processors: Supervisor | None = None
        self._processing: set[ShardKey] = set()
        self._failure: BaseException | None = None
        self._state = ConsumerState.NEW
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._scheduler = ShardScheduler(
            client,
            self._streams,
            config,
            origin=self,
            fail=self._fail,
            arrival=self._arrival,
            mode=self._taken_as,
            scheduled=self._start_processors,
            stop_processor=self._stop_processor,
            forget_processor=self._processing.discard,
        )

    @property
    def streams(self) -> list[str]:
        return list(self._streams)

    @property
    def config(self) -> ConsumerConfig:
        return self._config

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is not ConsumerState.NEW:
            raise RuntimeError("a Consumer can be opened only once")
        if self._config.mode == "efo":
            check_efo_endpoint(self._client)
        self._arrived = anyio.Event()
        self._done = anyio.Event()
        # An unknown stream fails here (ResourceNotFoundError), a document of another
        # stream or incarnation too (PositionsMismatchError).
        self._identities = await open_identities(self._client, self._streams, self._saved_ids)
        config = self._config
        if config.mode == "efo":
            with anyio.fail_after(config.registration_timeout):
                self._consumer_arns = await resolve_consumer_arns(
                    self._client, self._streams, config
                )
        stack = AsyncExitStack()
        self._stack = stack
        await stack.__aenter__()
        try:
            # Before the task group: a failure here is the cause itself, not an ExceptionGroup.
            await self._scheduler.open(stack, self._consumer_arns)
            self._say_opened()
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            await self._scheduler.start(self._tg)
        except BaseException as exc:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            # No shield around it: the task group must be exited in the scope it was entered in.
            with unwrap_sole():  # the cause itself, not a group of one
                await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._state = ConsumerState.OPEN
        return self

    def _say_opened(self) -> None:
        """The INFO line of an open: the streams with their shard counts, the mode, the
        lease table (``_lifecycle``)."""
        counts = dict.fromkeys(self._streams, 0)
        for stream, _ in self._scheduler.listed():  # every shard listed, whoever reads it
            counts[stream] += 1
        config, worker = self._config, self._scheduler.worker_id
        line = opened_line(counts, config.mode, lease_table=config.lease_table, worker_id=worker)
        log.info("%s", line)

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
        if self._state is not ConsumerState.OPEN:
            self._state = ConsumerState.CLOSED
            return
        self._state = ConsumerState.CLOSED
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
        shards = [pipeline.statistics().to_dict() for pipeline in self._scheduler.pipelines()]
        log.info("%s", closed_line(shards, clean=clean and self._failure is None))

    def stop(self) -> None:
        """Ask :meth:`run` and the iterator to end (from any task of this loop)."""
        if self._state is ConsumerState.OPEN:
            self._done.set()
            self._arrived.set()

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            log.error("consumer failed: %r", error)
            self._failure = error
        self._done.set()
        self._arrived.set()

    def _arrival(self, pipeline: ShardPipeline) -> None:
        if self._mode != "run":
            self._arrivals.append(pipeline)
            self._arrived.set()

    def _taken_as(self) -> str | None:
        """How the application takes batches (the scheduler asks, for a new pipeline)."""
        return self._mode

    def _claim(self, mode: str) -> None:
        if self._state is ConsumerState.CLOSED:
            raise errors.ConsumerClosedError("the Consumer is closed: it yields no more batches")
        if self._state is not ConsumerState.OPEN:
            raise RuntimeError("the Consumer is not open: use 'async with Consumer(...)'")
        if self._mode == mode:
            return
        if self._mode is not None:
            raise RuntimeError("a Consumer is either iterated or run(handler), not both")
        self._mode = mode
        self._scheduler.set_mode(mode)
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
                if self._scheduler.fenced(pipeline.key):
                    # Another worker may read it already; it is dropped shortly.
                    log.debug("%s/%s: lease lapsed or lost, batch not delivered", *pipeline.key)
                    continue
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
                    await self._start_processors()
                    await self._done.wait()
                    stopping.cancel()
                    await anyio.lowlevel.checkpoint()
        except RestartIntensityExceeded as gave_up:
            raise_as_itself(last_failure(gave_up))
        finally:
            self._processors = None
        if self._failure is not None:
            raise self._failure

    async def _start_processors(self) -> None:
        """Under ``run()``: give every pipeline that has none its processor (after each
        scheduling round too)."""
        if self._processors is None:  # not under run(): nothing to start
            return
        for pipeline in self._scheduler.pipelines():
            supervisor = self._processors
            if supervisor is None:
                return
            if pipeline.key in self._processing or pipeline.finished:
                continue
            self._processing.add(pipeline.key)
            await supervisor.start_child(
                processor_spec(pipeline, self._handler, self.commit, self._scheduler.fenced)
            )

    async def _stop_processor(self, key: ShardKey) -> None:
        """``key``'s lease was lost: its handler in progress is cancelled."""
        if self._processors is not None and key in self._processing:
            with contextlib.suppress(KeyError):  # it may have returned already
                await self._processors.stop_child(f"{key[0]}:{key[1]}")
        self._processing.discard(key)

    # -- positions --------------------------------------------------------------------------

    def commit(self, batch: RecordBatch) -> None:
        """Mark everything up to the end of ``batch`` (in its shard) as processed.

        With a lease table this is also the lease's checkpoint (written with its next
        renewal). A batch of a shard whose lease was lost since it was read is not committed
        and is no error: the shard's new owner delivers its records again.
        """
        check_type("batch", batch, RecordBatch, "a RecordBatch from this consumer")
        if batch.origin is not self or not self._scheduler.commit(
            (batch.stream, batch.shard_id), batch.last_position
        ):
            raise errors.ValidationError(
                f"commit() takes only this consumer's batches; {batch!r} was read by "
                f"{'another consumer' if batch.origin is not None else 'no consumer'}"
            )

    def positions(self) -> dict[str, Any]:
        """Every shard's committed position or ``finished`` flag, as JSON-serializable data.

        Pass it back as ``ConsumerConfig(positions=...)`` to resume exactly after the last
        committed record of every shard.
        """
        return encode_positions(self._scheduler.saved(), self._streams, self._identities)

    def shard_parents(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """Every listed shard of this worker and its parents, by ``(stream, shard_id)``."""
        return self._scheduler.shard_parents()

    @property
    def worker_id(self) -> str | None:
        """This worker's id in the lease table (None without ``lease_table``)."""
        return self._scheduler.worker_id

    @property
    def leases(self) -> LeaseStats | None:
        """The lease protocol's statistics now (None without ``lease_table`` or before open);
        also ``statistics().leases``."""
        return self._scheduler.lease_statistics()

    @property
    def supervision(self) -> tuple[SupervisorSnapshot, ...]:
        """The consumer's actors as plain data, the shape of ``Producer.supervision`` (a
        tuple of :class:`~kinesis_actors.runtime.SupervisorSnapshot`): the readers'
        supervisor (one source actor per shard: its input is the shard, it has no mailbox)
        and, while :meth:`run` runs, the processors' (each one's mailbox is its shard's
        bounded buffer). Empty before the consumer is open."""
        readers = self._scheduler.readers
        processors = None if self._processors is None else self._processors.statistics()
        return tuple(snapshot for snapshot in (readers, processors) if snapshot is not None)

    @property
    def consumer_arns(self) -> dict[str, str]:
        """EFO: the consumer ARN used per stream (empty when polling)."""
        return dict(self._consumer_arns)

    def statistics(self) -> ConsumerStatistics:
        """The consumer now, as a frozen :class:`ConsumerStatistics`: per shard (keyed
        ``(stream, shard_id)``) its counters, the shards waiting for their parents, the
        discovery counters, the lease statistics and the supervision trees."""
        scheduler = self._scheduler
        shards = scheduler.shard_statistics()
        discoveries, list_calls, failures = scheduler.discovery_counts()
        return ConsumerStatistics(
            shards=shards,
            waiting_shards=scheduler.waiting_shards(),
            discoveries=discoveries,
            list_shards_calls=list_calls,
            discovery_failures=failures,
            buffered_batches=sum(shard.buffer_depth for shard in shards.values()),
            leases=scheduler.lease_statistics(),
            supervision=self.supervision,
        )

    @property
    def metrics(self) -> dict[str, Any]:
        """Deprecated: :meth:`statistics` (a frozen snapshot keyed by ``(stream, shard_id)``).

        The same figures as a dict: per shard (``"stream/shard_id"``) counters, the lease
        statistics as a dict, the discovery counters and the waiting shards."""
        renamed("Consumer.metrics", "Consumer.statistics()")
        return legacy_metrics(self.statistics())
