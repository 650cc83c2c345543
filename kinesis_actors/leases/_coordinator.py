"""The lease coordinator: one actor per worker that takes, holds and hands over leases.

The decisions are :mod:`._policy`'s and :mod:`._sync`'s. The work is shared by components
this class owns and drives through their methods (it writes none of their fields, nor they
any of its): keeping a held lease (renewals, the write/adopt/release protocol, the event
queue, what is known of the table) is the :class:`~._holder.LeaseHolder`'s; the take rounds
(a consistent Scan - every other round on the two watchers, about once a failover time elsewhere,
see :class:`~._policy.ScanSchedule` - then takes, steals or asks for handoffs, the handoffs
asked, pins, and opening leases whose parents finished) are the
:class:`~._taker.LeaseTaker`'s; shard sync's listing and creates are
:class:`~._shard_sync.ShardSync`'s. This module owns the rest: the public calls, the
streams, the lifecycle and the task group, the supervision of the three loops it runs in
that group (renewals, the holder's; take rounds, the taker's; shard sync, its own) and its
own counters of :class:`LeaseStats`. Calls from the consumer's tasks (``checkpoint``,
``finish``, ``release_all``) take the lease's lock, so a lease's writes never race each
other and the counter held is always the last one written.

A failed write condition on a held lease ends that lease at once (:class:`LeaseLost`); a
lease that could not be renewed for ``failover_time`` (the table unreachable) is dropped too,
before any other worker may take it. Transient errors of a round are logged and the round is
retried at its next interval; a fatal one (:class:`WorkerIdConflictError`,
:class:`LeaseTableError`) stops the coordinator and is raised by :meth:`next_event`,
:meth:`checkpoint` and the ``async with`` block.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

import anyio

from .._deprecated import renamed
from ..client import StreamRef
from ..errors import ConfigError, KinesisError
from ..runtime import RestartIntensity, RestartIntensityExceeded
from ._config import LeaseConfig
from ._errors import LeaseLostError
from ._events import LeaseEvent, LeaseStats
from ._holder import Held, LeaseHolder
from ._items import SHARD_END, TRIM_HORIZON, Lease
from ._shard_sync import ShardSync
from ._streams import Streams, describe_stream
from ._sync import INITIAL_POSITIONS
from ._table import Caller, LeaseTable
from ._taker import FATAL, LeaseTaker

__all__ = ["ROUND_WAIT_MAX", "LeaseCoordinator", "round_wait"]

logger = logging.getLogger("kinesis_actors.leases")

#: The longest :meth:`LeaseCoordinator.release_all` waits for a take round under way, whatever
#: the failover time: a consumer's close gives the whole hand-over 10 s, and a round's calls
#: take milliseconds unless the table is failing (then a lease the round took and could not
#: give back expires, as any lease left does).
ROUND_WAIT_MAX = 5.0


def round_wait(config: LeaseConfig) -> float:
    """How long ``release_all`` waits for a take round under way: half a failover time (past
    a failover time a lease left expires anyway), at most :data:`ROUND_WAIT_MAX`."""
    return min(config.failover_time / 2, ROUND_WAIT_MAX)


#: A loop that crashes on something unexpected (a bug) is restarted, up to this many times in
#: ``_LOOP_PERIOD`` seconds; one more and the coordinator stops with the causes.
_LOOP_RESTARTS = 3
_LOOP_PERIOD = 60.0


class _CallableClock:
    """A :class:`~kinesis_actors.runtime.Clock` over the coordinator's clock function."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.now = clock


def _cause(error: BaseException) -> BaseException:
    """The failure inside ``error``: a task group's group is looked through, a fatal fault
    first (the coordinator's user gets a typed error, never an ExceptionGroup)."""
    if not isinstance(error, BaseExceptionGroup):
        return error
    leaves: list[BaseException] = []
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop(0)
        if isinstance(current, BaseExceptionGroup):
            pending[:0] = list(current.exceptions)
        else:
            leaves.append(current)
    for leaf in leaves:
        if isinstance(leaf, FATAL):
            return leaf
    return leaves[0] if leaves else error


class LeaseCoordinator:
    """Shares the shards of ``streams`` with the other workers of one lease table.

    An async context manager: entering checks (or creates) the table, reads the streams'
    identities, checks the table's leases are this application's and runs a first shard sync
    and take round; then one task group renews held leases every ``renew_interval``, takes
    leases every ``take_interval`` and syncs shards every ``shard_sync_interval``. Leaving
    stops those tasks; leases not handed over with :meth:`release_all` first are left to
    expire (the others take them after ``failover_time``).

    What happens to leases is told through :meth:`next_event` (or ``async for event in
    coordinator``): :class:`LeaseAcquired` when a shard may be read, :class:`LeaseLost` when it
    must not be read any more. Pending events are bounded by twice the number of leases (a
    loss cancels an acquisition not yet received).

    One stream uses the KCL's single-stream lease keys (the shard id), so a KCL application's
    table is resumed as it is; several streams (or ``multi_stream=True``) use the multi-stream
    form ``account:stream:creationEpoch:shardId``.

    ``initial_position`` is the checkpoint of leases created for shards that have no lease
    yet and no leased parent: ``"TRIM_HORIZON"``, ``"LATEST"`` or ``"AT_TIMESTAMP"``.
    ``clock`` (monotonic seconds; default the event loop's) and ``rng`` are injectable.
    """

    def __init__(
        self,
        dynamodb: Caller,
        kinesis: Caller,
        table: str,
        streams: str | Sequence[str],
        *,
        worker_id: str,
        initial_position: str = TRIM_HORIZON,
        config: LeaseConfig | None = None,
        multi_stream: bool | None = None,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        names = [streams] if isinstance(streams, str) else list(streams)
        # Names or stream ARNs (another account's); one stream of each name, as in a Consumer.
        if not names or len({StreamRef.parse(n, option="streams").name for n in names}) != len(
            names
        ):
            raise ConfigError(
                f"streams must be one or more distinct stream names or ARNs, got {streams!r}"
            )
        if not isinstance(worker_id, str) or not worker_id:
            raise ConfigError(f"worker_id must be a non-empty string, got {worker_id!r}")
        if initial_position not in INITIAL_POSITIONS:
            raise ConfigError(
                f"initial_position must be one of {', '.join(INITIAL_POSITIONS)}, "
                f"got {initial_position!r}"
            )
        if not multi_stream and multi_stream is not None and len(names) > 1:
            raise ConfigError("multi_stream=False needs exactly one stream")
        self._table = LeaseTable(dynamodb, table)
        self._worker_id = worker_id
        self._config = config or LeaseConfig()
        self._clock = clock or anyio.current_time
        self._holder = LeaseHolder(
            self._table, worker_id, self._config, self._clock, on_shard_end=self._want_sync
        )
        self._stats = LeaseStats(worker_id=worker_id)
        self._kinesis = kinesis
        self._names = names
        self._multi = len(names) > 1 if multi_stream is None else multi_stream
        self._streams: Streams | None = None
        self._shards = ShardSync(kinesis, self._table, initial_position)
        self._sync_wanted = anyio.Event()
        self._taker = LeaseTaker(
            self._table,
            self._holder,
            worker_id,
            self._config,
            self._clock,
            known=self._known,
            kinesis=kinesis,
            initial_position=initial_position,
            rng=rng or random.Random(),
        )
        self._scope: anyio.CancelScope | None = None
        self._task_group: Any = None

    @property
    def worker_id(self) -> str:
        """This worker's id, the ``leaseOwner`` of its leases."""
        return self._worker_id

    @property
    def table(self) -> LeaseTable:
        """The lease table's I/O (for tools that list it)."""
        return self._table

    # -- events ------------------------------------------------------------------------------

    async def next_event(self) -> LeaseEvent:
        """The next :class:`LeaseAcquired`, :class:`LeaseLost` or :class:`LeaseHandoff`,
        awaiting one.

        Raises the coordinator's failure (for example
        :class:`~kinesis_actors.leases.WorkerIdConflictError`) once it has stopped on one.
        """
        return await self._holder.outbox.next_event()

    def __aiter__(self) -> AsyncIterator[LeaseEvent]:
        return self._holder.outbox.events()

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> LeaseCoordinator:
        await self._table.ensure(create=self._config.create_table)
        refs = [await describe_stream(self._kinesis, name) for name in self._names]
        self._streams = Streams(refs, multi=self._multi, table=self._table.name)
        self._taker.observe(await self._table.list())  # validates before anything is written
        await self._sync_all()
        await self._taker.take_round()
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task_group, self._task_group = self._task_group, None
        if task_group is not None:
            task_group.cancel_scope.cancel()  # the loops, started or not yet
            await task_group.__aexit__(None, None, None)
        failure = self._holder.outbox.failure
        if exc_type is None and failure is not None:
            raise failure

    async def _run(self) -> None:
        with anyio.CancelScope() as self._scope:
            async with anyio.create_task_group() as loops:
                loops.start_soon(self._guard, "renewal", self._holder.renew_rounds)
                loops.start_soon(self._guard, "take", self._taker.take_rounds)
                loops.start_soon(self._guard, "shard sync", self._sync_loop)

    async def _guard(self, name: str, loop: Callable[[], Any]) -> None:
        """Supervise one loop: a fatal fault stops the coordinator (told to its user as the
        typed error itself); anything else unexpected restarts the loop, counted in
        ``LeaseStats.restarts``, until more than ``_LOOP_RESTARTS`` in ``_LOOP_PERIOD`` s."""
        intensity = RestartIntensity(
            _LOOP_RESTARTS, _LOOP_PERIOD, clock=_CallableClock(self._clock)
        )
        while True:
            try:
                await loop()
            except Exception as caught:
                error = _cause(caught)
                if not isinstance(error, Exception):
                    raise
                if not isinstance(error, FATAL):
                    if intensity.record(error):
                        self._stats = replace(self._stats, restarts=self._stats.restarts + 1)
                        logger.error(  # noqa: TRY400 - the traceback is the error's, not ours
                            "lease coordinator %s: its %s loop crashed and is restarted",
                            self._worker_id,
                            name,
                            exc_info=error,
                        )
                        continue
                    error = RestartIntensityExceeded(
                        f"lease coordinator {self._worker_id} ({name} loop)",
                        _LOOP_RESTARTS,
                        _LOOP_PERIOD,
                        intensity.causes,
                    )
                self._fail(error)
                return

    def _fail(self, error: Exception) -> None:
        """Stop on ``error``: the loops end, and the user's next call raises it."""
        if self._holder.outbox.fail(error):
            logger.error("lease coordinator %s stopped: %s", self._worker_id, error)
        if self._scope is not None:
            self._scope.cancel()

    def _transient(self, what: str, error: KinesisError) -> None:
        """A transient fault of a round the client's retries did not mend (``what``
        failed): counted and logged; the round runs again at its next interval."""
        self._stats = replace(self._stats, transient_errors=self._stats.transient_errors + 1)
        logger.warning("%s of %s failed, retried next round: %s", what, self._worker_id, error)

    # -- the user's calls --------------------------------------------------------------------

    def held(self) -> frozenset[tuple[str, str]]:
        """``(stream, shard_id)`` of every lease handed to the reader and still held."""
        return frozenset(
            (h.stream, h.lease.shard_id) for h in self._holder.held.values() if h.ready
        )

    def deliverable(self, stream: str, shard_id: str) -> bool:
        """Whether what was read of ``stream/shard_id`` may be delivered: its lease is held,
        handed to the reader, and renewed within a failover time by this worker's clock.
        False once it lapsed (another worker may already read the shard; see
        :meth:`LeaseHolder.lapsed`) and from then on, through its drop, until the consumer
        has let the shard go."""
        streams = self._streams
        if streams is None or stream not in streams.by_name:
            return False
        key = streams.key(stream, shard_id)
        held = self._holder.held.get(key)
        return held is not None and held.ready and not self._holder.lapsed(key)

    def _holding(self, stream: str, shard_id: str) -> tuple[str, Held]:
        if self._holder.outbox.failure is not None:
            raise self._holder.outbox.failure
        key = self._known().key(stream, shard_id)
        held = self._holder.held.get(key)
        if held is None or not held.ready:
            raise LeaseLostError(
                f"{self._worker_id} does not hold the lease of {stream}/{shard_id}",
                stream=stream,
                shard_id=shard_id,
            )
        return key, held

    def note_checkpoint(
        self, stream: str, shard_id: str, sequence: str, sub_sequence: int = 0
    ) -> None:
        """Remember a checkpoint, written with the lease's next renewal (or within
        ``checkpoint_interval``): the batched form of :meth:`checkpoint`, for every commit.

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if the lease is not held.
        """
        _, held = self._holding(stream, shard_id)
        self._holder.note(held, (sequence, sub_sequence))

    async def checkpoint(
        self, stream: str, shard_id: str, sequence: str, sub_sequence: int = 0
    ) -> None:
        """Write the lease's checkpoint now: a conditional update on this worker's ownership
        and the counter it holds (the KCL's condition), which also renews the lease.

        A write that meets a handoff changing under it (another worker's ask, or its
        withdrawal) is tried again under the condition that holds then: on return the
        checkpoint is written.

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if the lease was lost first:
        another worker holds it, or it lapsed unrenewed (nothing is written;
        :class:`LeaseLost` is sent too).
        """
        key, held = self._holding(stream, shard_id)
        async with held.lock:
            if await self._holder.write_through(key, held, (sequence, sub_sequence)) is None:
                raise LeaseLostError(
                    f"the lease of {stream}/{shard_id} was lost (taken by another worker, "
                    "or lapsed); the checkpoint was not written",
                    stream=stream,
                    shard_id=shard_id,
                )

    async def hand_over(
        self, stream: str, shard_id: str, checkpoint: tuple[str, int] | None = None
    ) -> None:
        """Answer a :class:`LeaseHandoff`: the shard's reader has stopped, and ``checkpoint``
        ``(sequence, sub_sequence)`` (else the last noted one) is where the new owner resumes.
        One conditional write hands the lease over (the KCL 3.x's protocol). If the asker
        withdrew its ask meanwhile (it left), the lease is released there instead; if
        another worker asked since, it is handed to that one.

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if the lease was lost first,
        or is not being handed over (the coordinator answered by itself after
        ``handoff_timeout``).
        """
        key, held = self._holding(stream, shard_id)
        async with held.lock:
            if self._holder.held.get(key) is not held or not held.answering:
                # Never asked for - or answered by the coordinator itself after
                # handoff_timeout (and maybe held again since): nothing to hand over now.
                raise LeaseLostError(
                    f"the lease of {stream}/{shard_id} is not being handed over",
                    stream=stream,
                    shard_id=shard_id,
                )
            final = checkpoint if checkpoint is not None else held.pending
            new = await self._holder.hand_over(key, held, final, ())
        if new is None:
            raise LeaseLostError(
                f"the lease of {stream}/{shard_id} was lost before it was handed over",
                stream=stream,
                shard_id=shard_id,
            )

    async def finish(self, stream: str, shard_id: str) -> None:
        """The shard was read to its end: checkpoint ``SHARD_END`` (with the shard's children,
        as the KCL does) and release the lease, so its children may be read by any worker.

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if the lease was lost first.
        """
        key, held = self._holding(stream, shard_id)
        async with held.lock:
            children = self._shards.children.get((stream, shard_id), ())
            if held.handing_to is not None:  # asked for meanwhile: the taker gets it ended
                new = await self._holder.hand_over(key, held, (SHARD_END, 0), children)
            else:
                new = await self._holder.release(key, held, (SHARD_END, 0), children)
        if new is None:
            raise LeaseLostError(
                f"the lease of {stream}/{shard_id} was taken before it was finished",
                stream=stream,
                shard_id=shard_id,
            )
        self._taker.open_ready()
        self._sync_wanted.set()

    async def release_all(
        self, final_checkpoints: Mapping[tuple[str, str], tuple[str, int]] | None = None
    ) -> None:
        """Hand every held lease over for a clean stop: write the final checkpoint of each
        (``(stream, shard_id) -> (sequence, sub_sequence)``, else the last noted one) and
        remove this worker as owner, in one conditional write per lease, so another worker
        takes it at its next scan, without waiting for ``failover_time`` and with no
        duplicate. A lease lost meanwhile is skipped (and reported as :class:`LeaseLost`).
        The handoffs this worker asked for and was not handed yet are withdrawn: their
        owners keep them (or release them, once they stopped reading for the handoff), and
        one handed over already is released unread. The coordinator takes nothing more
        afterwards.
        """
        asks = self._taker.stop_taking()
        finals = dict(final_checkpoints or {})

        async def release(key: str, held: Held) -> None:
            async with held.lock:
                if self._holder.held.get(key) is not held:
                    return
                checkpoint = finals.get((held.stream, held.lease.shard_id), held.pending)
                # A handoff whose ask was withdrawn ends as a release the holder counts.
                answering = held.answering
                try:
                    if answering:
                        new = await self._holder.hand_over(key, held, checkpoint, ())
                    else:
                        new = await self._holder.release(key, held, checkpoint, ())
                except FATAL as error:
                    self._fail(error)
                    return
                except KinesisError as error:  # left to expire: the others take it then
                    self._transient(f"releasing {key} (left to expire)", error)
                    return
            if new is not None:
                if not (answering and new.owner is None):
                    self._stats = replace(self._stats, released=self._stats.released + 1)
                self._holder.tell_lost(held, "released")

        async def withdraw(key: str) -> None:
            try:
                await self._taker.withdraw_ask(key)
            except FATAL as error:
                self._fail(error)
            except KinesisError as error:  # handed over to nobody: it expires
                self._transient(f"withdrawing the ask for {key} (left to expire)", error)

        async with anyio.create_task_group() as group:
            for key, held in list(self._holder.held.items()):
                group.start_soon(release, key, held)
            for key in asks:
                group.start_soon(withdraw, key)
        # A round under way still gives back or withdraws what lands after stop_taking:
        # closing the coordinator now would cancel that. Bounded (``round_wait``) so that it
        # fits the consumer's close budget whatever the failover time.
        with anyio.move_on_after(round_wait(self._config)):
            await self._taker.round_ended()
        if self._holder.outbox.failure is not None:
            raise self._holder.outbox.failure

    def statistics(self) -> LeaseStats:
        """The protocol's statistics now, a frozen :class:`LeaseStats`."""
        statistics = getattr(self._table.client, "statistics", None)  # a DynamoDBClient's
        client = statistics() if statistics is not None else None
        own = replace(
            self._stats,
            table_retries=getattr(client, "retries", 0),
            table_throttled=getattr(client, "throttled", 0),
            table_calls=self._table.calls,
            shard_syncs=self._shards.syncs,
            leases_created=self._shards.created,
        )
        return self._holder.report(self._taker.report(own))

    def snapshot(self) -> LeaseStats:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed("LeaseCoordinator.snapshot()", "LeaseCoordinator.statistics()")
        return self.statistics()

    def _known(self) -> Streams:
        if self._streams is None:
            raise RuntimeError("the coordinator is not open: use 'async with'")
        return self._streams

    # -- shard sync --------------------------------------------------------------------------

    def _want_sync(self) -> None:
        """A held lease was found ``SHARD_END`` by another hand (the holder tells): check it
        against the stream's shards at once (see ``_sync.ended_but_open``)."""
        self._sync_wanted.set()

    async def _sync_loop(self) -> None:
        while True:
            with anyio.move_on_after(self._config.shard_sync_interval):
                await self._sync_wanted.wait()
            self._sync_wanted = anyio.Event()
            try:
                await self._sync_all()
            except FATAL:
                raise
            except KinesisError as error:
                self._transient("a shard sync", error)

    async def _sync_all(self) -> None:
        """Shard sync, on the leases known now. A non-watcher's last listing may be a
        failover time old, and a shard whose lease it does not see is created anew: a child
        whose parent's lease it missed would start at the initial position (``LATEST``: its
        first records skipped) instead of its parents' end. So it lists the table first (once
        per sync, a minute apart by default); the listing only adds what it knows of the
        table (leases are never deleted, ``SHARD_END`` never undone), and the expiry history
        is left to the take rounds."""
        streams = self._known()
        fresh: list[Lease] = []
        if not self._taker.watching:
            listed = await self._table.list()
            fresh = [lease for lease in listed if streams.owner_of(lease) is not None]
        # A lambda: each listing of the table replaces the holder's by_key.
        await self._shards.sync_all(streams, lambda: [*fresh, *self._holder.by_key.values()])
