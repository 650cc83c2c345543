"""The lease coordinator: one actor per worker that takes, holds and hands over leases.

The decisions are :mod:`._policy`'s and :mod:`._sync`'s; keeping a held lease (renewals, the
write/adopt/release protocol, the event queue, what is known of the table) is the
:class:`~._holder.LeaseHolder`'s, a component this class owns and drives through its methods
(it writes none of the holder's fields, nor the holder any of its), and shard sync's listing
and creates are :class:`~._shard_sync.ShardSync`'s. This module owns the rest (the streams,
the task group, the handoffs asked, its own counters of :class:`LeaseStats`) and runs three
loops in one task group: renewals (the holder's), take rounds (a consistent Scan - every
round on the two watchers, about once a failover time elsewhere, see
:class:`~._policy.ScanSchedule` - then takes, steals and opening children whose parents
finished) and shard sync. Calls from the consumer's tasks (``checkpoint``, ``finish``,
``release_all``) take the lease's lock, so a lease's writes never race each other and the
counter held is always the last one written.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, TypeVar

import anyio

from .._deprecated import renamed
from ..client import StreamRef, service_now
from ..errors import ConfigError, KinesisError
from ..runtime import RestartIntensity, RestartIntensityExceeded
from ._config import LeaseConfig
from ._errors import LeaseLostError, WorkerIdConflictError
from ._events import LeaseEvent, LeaseStats
from ._holder import EPSILON, Held, LeaseHolder
from ._items import LATEST, SHARD_END, TRIM_HORIZON, Lease
from ._policy import ScanSchedule, live_owners, parents_finished, plan_takes, write_landed
from ._shard_sync import ShardSync
from ._streams import Streams, describe_stream
from ._sync import INITIAL_POSITIONS
from ._table import PERMANENT_FAULTS, Caller, LeaseTable

__all__ = ["LeaseCoordinator"]

logger = logging.getLogger("kinesis_actors.leases")

_T = TypeVar("_T")

#: How much earlier than the service's clock (as the Kinesis client's replies tell it) a LATEST
#: lease's start is pinned: a later owner reads from the pin, and the arrival timestamps are
#: stamped by other hosts of the service (a few records read twice are allowed, one skipped
#: is not).
PIN_MARGIN_MS = 2000
#: Faults that stop the coordinator: no retry mends them, and its user must hear of them.
FATAL: tuple[type[KinesisError], ...] = (*PERMANENT_FAULTS, WorkerIdConflictError)
#: A loop that crashes on something unexpected (a bug) is restarted, up to this many times in
#: ``_LOOP_PERIOD`` seconds; one more and the coordinator stops with the causes.
_LOOP_RESTARTS = 3
_LOOP_PERIOD = 60.0
#: Takes, asks and pins of one round run this many at a time: a dead worker's 250 leases are
#: about 16 waves of writes, not 250 one after another, and the table sees a bounded burst.
_ROUND_CONCURRENCY = 16


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
        self._initial = initial_position
        self._multi = len(names) > 1 if multi_stream is None else multi_stream
        self._rng = rng or random.Random()
        self._streams: Streams | None = None
        self._shards = ShardSync(kinesis, self._table, initial_position)
        self._sync_wanted = anyio.Event()
        self._releasing = False
        # Handoffs this worker asked for: lease key -> (asked at, asked of).
        self._asked: dict[str, tuple[float, str]] = {}
        self._schedule = ScanSchedule(self._worker_id, self._config.failover_time)
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
        return await self._holder.next_event()

    def __aiter__(self) -> AsyncIterator[LeaseEvent]:
        return self._holder.events()

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> LeaseCoordinator:
        await self._table.ensure(create=self._config.create_table)
        refs = [await describe_stream(self._kinesis, name) for name in self._names]
        self._streams = Streams(refs, multi=self._multi, table=self._table.name)
        self._observe(await self._table.list())  # validates before anything is written
        await self._sync_all()
        await self._take_round()
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
        failure = self._holder.failure
        if exc_type is None and failure is not None:
            raise failure

    async def _run(self) -> None:
        with anyio.CancelScope() as self._scope:
            async with anyio.create_task_group() as loops:
                loops.start_soon(self._guard, "renewal", self._holder.renew_rounds)
                loops.start_soon(self._guard, "take", self._take_loop)
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
        if self._holder.fail(error):
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

    def _holding(self, stream: str, shard_id: str) -> tuple[str, Held]:
        if self._holder.failure is not None:
            raise self._holder.failure
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

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if another worker holds the lease
        (nothing is written; :class:`LeaseLost` is sent too).
        """
        key, held = self._holding(stream, shard_id)
        async with held.lock:
            if await self._holder.write(key, held, (sequence, sub_sequence)) is None:
                raise LeaseLostError(
                    f"the lease of {stream}/{shard_id} was taken by another worker; the "
                    "checkpoint was not written",
                    stream=stream,
                    shard_id=shard_id,
                )

    async def hand_over(
        self, stream: str, shard_id: str, checkpoint: tuple[str, int] | None = None
    ) -> None:
        """Answer a :class:`LeaseHandoff`: the shard's reader has stopped, and ``checkpoint``
        ``(sequence, sub_sequence)`` (else the last noted one) is where the new owner resumes.
        One conditional write hands the lease over (the KCL 3.x's protocol).

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if the lease was lost first.
        """
        key, held = self._holding(stream, shard_id)
        if held.handing_to is None:
            raise RuntimeError(f"nobody asked for the lease of {stream}/{shard_id}")
        async with held.lock:
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
        self._open_ready()
        self._sync_wanted.set()

    async def release_all(
        self, final_checkpoints: Mapping[tuple[str, str], tuple[str, int]] | None = None
    ) -> None:
        """Hand every held lease over for a clean stop: write the final checkpoint of each
        (``(stream, shard_id) -> (sequence, sub_sequence)``, else the last noted one) and
        remove this worker as owner, in one conditional write per lease, so another worker
        takes it at its next scan, without waiting for ``failover_time`` and with no
        duplicate. A lease lost meanwhile is skipped (and reported as :class:`LeaseLost`).
        The coordinator takes nothing more afterwards.
        """
        self._releasing = True
        finals = dict(final_checkpoints or {})

        async def release(key: str, held: Held) -> None:
            async with held.lock:
                if self._holder.held.get(key) is not held:
                    return
                checkpoint = finals.get((held.stream, held.lease.shard_id), held.pending)
                try:
                    if held.handing_to is not None:
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
                self._stats = replace(self._stats, released=self._stats.released + 1)
                self._holder.tell_lost(held, "released")

        async with anyio.create_task_group() as group:
            for key, held in list(self._holder.held.items()):
                group.start_soon(release, key, held)
        if self._holder.failure is not None:
            raise self._holder.failure

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
        return self._holder.report(own)

    def snapshot(self) -> LeaseStats:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed("LeaseCoordinator.snapshot()", "LeaseCoordinator.statistics()")
        return self.statistics()

    def _known(self) -> Streams:
        if self._streams is None:
            raise RuntimeError("the coordinator is not open: use 'async with'")
        return self._streams

    # -- take rounds -------------------------------------------------------------------------

    def _observe(self, leases: list[Lease]) -> list[Lease]:
        streams = self._known()
        ours = [lease for lease in leases if streams.owner_of(lease) is not None]
        holder = self._holder
        holder.observe(ours, self._clock())
        for lease in ours:
            if (
                lease.owner == self._worker_id
                and lease.key not in holder.held
                and lease.checkpoint_owner is None  # else its owner renews it, handing it to us
                and lease.key not in self._asked
                and holder.changes_by_same_owner(lease.key) >= 2
            ):
                changes = holder.changes_by_same_owner(lease.key)
                raise WorkerIdConflictError(
                    f"lease {lease.key!r} is owned by this worker's id {self._worker_id!r} "
                    f"and was renewed {changes} times (counter now {lease.counter}) while "
                    "this process did not hold it: another live process uses the same "
                    "worker_id; give each live worker its own",
                    worker_id=self._worker_id,
                    lease_key=lease.key,
                )
        return ours

    def _following(self) -> bool:
        """Whether this worker needs every round's listing for its own sake: a handoff it
        asked for is pending, or a lease it holds waits on its parents."""
        return bool(self._asked) or any(
            not held.ready and not held.needs_pin and held.lease.parent_shard_ids
            for held in self._holder.held.values()
        )

    async def _take_round(self) -> None:
        """One round: list the table (a watcher's round, see :class:`ScanSchedule`, or one
        due), take, steal and follow handoffs by that listing; every round pins and hands
        ready leases to their readers."""
        now = self._clock()
        if not self._schedule.due(
            now, following=self._following(), period=self._config.take_period
        ):
            if not self._releasing:
                pins = [(k, h) for k, h in self._holder.held.items() if h.needs_pin]
                await self._each(pins, lambda pin: self._pin(*pin))
            self._open_ready()
            return
        ours = self._observe(await self._table.list())
        now = self._clock()
        self._schedule.listed(
            live_owners(ours, lambda lease: self._holder.expired(lease, now)), now
        )
        self._stats = replace(
            self._stats, listings=self._stats.listings + 1, watching=self._schedule.watching
        )
        if not self._releasing:
            still = 2 * self._config.renew_period
            plan = plan_takes(
                ours,
                worker_id=self._worker_id,
                held=self._holder.held.keys(),
                expired=lambda lease: self._holder.expired(lease, now),
                # A handoff in progress is followed by _follow_handoffs, never cut short.
                reclaimable=lambda lease: (
                    lease.checkpoint_owner is None and self._holder.expired(lease, now, after=still)
                ),
                max_leases=self._config.max_leases,
                max_leases_to_steal=self._config.max_leases_to_steal,
                rescue=self._schedule.watching,
                rng=self._rng,
            )
            live = sum(1 for lease in ours if not lease.finished)
            self._stats = replace(self._stats, workers=plan.workers, leases=live)
            await self._each(plan.take, lambda lease: self._take(lease, stolen=False))
            if self._config.graceful_handoff:
                await self._each(plan.steal, self._ask)
            else:
                await self._each(plan.steal, lambda lease: self._take(lease, stolen=True))
            await self._follow_handoffs(now)
            pins = [(k, h) for k, h in self._holder.held.items() if h.needs_pin]
            await self._each(pins, lambda pin: self._pin(*pin))
        self._open_ready()

    async def _each(self, items: Sequence[_T], action: Callable[[_T], Awaitable[None]]) -> None:
        """``action`` on every item, :data:`_ROUND_CONCURRENCY` at a time. The first error
        of the table ends the round as one sequential round would end: the others are
        cancelled, and it is raised once (not as a group) for the take loop to log."""
        if not items:
            return
        if len(items) == 1:
            await action(items[0])
            return
        limit = anyio.CapacityLimiter(_ROUND_CONCURRENCY)
        failed: list[KinesisError] = []

        async def one(item: _T, scope: anyio.CancelScope) -> None:
            async with limit:
                try:
                    await action(item)
                except KinesisError as error:
                    failed.append(error)
                    scope.cancel()

        async with anyio.create_task_group() as group:
            for item in items:
                group.start_soon(one, item, group.cancel_scope)
        if failed:
            fatal = [error for error in failed if isinstance(error, FATAL)]
            raise (fatal or failed)[0]

    async def _take(self, lease: Lease, *, stolen: bool) -> None:
        info = self._known().owner_of(lease)
        if info is None:
            return
        started = self._clock()
        new = await self._table.take(lease, self._worker_id)
        if new is None:
            # Someone else was faster, or its owner renewed it - or our take landed and only
            # its reply was lost (the client's retry then failed the condition): read it.
            current = await self._table.get(lease.key)
            if current is None or not write_landed(lease, current, self._worker_id, None):
                return
            new = current
            self._stats = replace(self._stats, replies_settled=self._stats.replies_settled + 1)
        # A stolen lease's reader stops at its owner's next renewal: wait that long before
        # reading, so that no shard is read twice at once. So does one taken back from our
        # own id (an earlier run that may only have been paused).
        reclaimed = lease.owner == self._worker_id
        ready_at = started + self._config.renew_period + EPSILON if stolen or reclaimed else 0.0
        previous = lease.owner if lease.owner != self._worker_id else None
        held = self._new_held(new, info.name, started, previous, ready_at)
        self._holder.hold(held)
        self._open(lease.key, held, self._clock())
        if stolen:
            self._stats = replace(self._stats, stolen=self._stats.stolen + 1)
        else:
            self._stats = replace(self._stats, taken=self._stats.taken + 1)
        logger.info(
            "%s %s lease %s (from %s)",
            self._worker_id,
            "stole" if stolen else "took",
            lease.key,
            lease.owner,
        )

    async def _ask(self, lease: Lease) -> None:
        """Ask ``lease``'s live owner to hand it over (see :class:`LeaseHandoff`)."""
        owner = lease.owner
        if owner is None or self._known().owner_of(lease) is None:
            return
        new = await self._table.ask_handoff(lease, self._worker_id)
        if new is None:  # lost to a renewal or a take - or landed with its reply lost
            current = await self._table.get(lease.key)
            if current is None or (current.owner, current.checkpoint_owner) != (
                self._worker_id,
                owner,
            ):
                return
            new = current
        self._asked[lease.key] = (self._clock(), owner)
        self._holder.learn(new)
        self._stats = replace(self._stats, handoffs_asked=self._stats.handoffs_asked + 1)
        logger.info("%s asked %s to hand %s over", self._worker_id, owner, lease.key)

    async def _follow_handoffs(self, now: float) -> None:
        """The handoffs asked for, by the last listing (and the asks since): a lease handed
        over is held (and read at once: its owner stopped first); one not handed over in
        time, or whose owner died, is taken as before; one that changed hands otherwise is
        forgotten."""
        by_key = self._holder.by_key
        held = self._holder.held
        patience = self._config.handoff_timeout + self._config.failover_time
        for key, (asked_at, owner) in list(self._asked.items()):
            lease = by_key.get(key)
            if lease is None or lease.owner != self._worker_id or key in held:
                del self._asked[key]
            elif lease.checkpoint_owner is None:
                del self._asked[key]
                self._adopt_handed(lease, owner)
            elif now - asked_at > patience or self._holder.expired(lease, now):
                del self._asked[key]
                await self._take(lease, stolen=True)

    def _adopt_handed(self, lease: Lease, previous: str) -> None:
        info = self._known().owner_of(lease)
        if info is None or lease.finished:
            return
        held = self._new_held(lease, info.name, self._clock(), previous, 0.0)
        self._holder.hold(held)
        self._open(lease.key, held, self._clock())
        self._stats = replace(self._stats, handoffs_received=self._stats.handoffs_received + 1)
        logger.info("%s was handed %s by %s", self._worker_id, lease.key, previous)

    def _new_held(
        self, lease: Lease, stream: str, now: float, previous: str | None, ready_at: float
    ) -> Held:
        """A lease just taken or handed to us, to hold: a LATEST one with no parents is
        pinned before it is read, unless an earlier owner pinned it already."""
        if lease.checkpoint != LATEST or lease.parent_shard_ids:
            return Held(lease, stream, now, previous, ready_at=ready_at)
        pinned = lease.latest_pinned_at
        return Held(
            lease,
            stream,
            now,
            previous,
            ready_at=ready_at,
            pinned_before=pinned,
            needs_pin=pinned is None and self._initial == LATEST,
        )

    async def _pin(self, key: str, held: Held) -> None:
        """Pin a LATEST lease's start (``latestPinnedAt``, the service's clock minus a margin)
        before its first reader takes its iterator, so that a later owner reads from there:
        written like a renewal, and retried next take round if it fails (the lease is not
        handed out until it is pinned).

        The time is the service's (:func:`~kinesis_actors.client.service_now`, from the
        ``Date`` of the Kinesis client's replies), never this host's: the pin is compared
        with arrival timestamps, and a host whose clock ran 30 s fast pinned a time 28 s
        after its reader's start, so the next owner skipped what arrived in between."""
        async with held.lock:
            if self._holder.held.get(key) is not held or not held.needs_pin:
                return
            pin = int(service_now(self._kinesis).timestamp() * 1000) - PIN_MARGIN_MS
            try:
                new = await self._holder.write(key, held, None, pin=pin)
            except FATAL:
                raise
            except KinesisError as error:
                self._transient(f"pinning the start of {key}", error)
                return
            if new is not None:  # pinned: it needs no pin any more
                self._open(key, held, self._clock())

    def _open_ready(self) -> None:
        now = self._clock()
        for key, held in self._holder.held.items():
            self._open(key, held, now)

    def _open(self, key: str, held: Held, now: float) -> None:
        """Hand ``held`` to its reader if it may be read now: pinned, not finished, its
        parents finished and (stolen or reclaimed) its previous owner's reader stopped.
        Called when a take is won, not only at the end of the round: a dead worker's 250
        leases reach their readers as they are taken, not all after the last."""
        if held.ready or held.needs_pin or now < held.ready_at or held.lease.finished:
            return
        if not parents_finished(self._known().parents_of(held.lease), self._holder.by_key):
            return
        logger.debug("%s may read %s", self._worker_id, key)
        self._holder.hand_out(held)

    async def _take_loop(self) -> None:
        period = self._config.take_period
        next_round = self._clock() + period
        while True:
            # Rounds start every period, not a period after the last one ended: the failover
            # bound counts on it.
            await anyio.sleep(max(0.0, next_round - self._clock()))
            next_round = max(next_round + period, self._clock())
            try:
                await self._take_round()
            except FATAL:
                raise
            except KinesisError as error:
                self._transient("a take round", error)

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
        if not self._schedule.watching:
            listed = await self._table.list()
            fresh = [lease for lease in listed if streams.owner_of(lease) is not None]
        # A lambda: each listing of the table replaces the holder's by_key.
        await self._shards.sync_all(streams, lambda: [*fresh, *self._holder.by_key.values()])
