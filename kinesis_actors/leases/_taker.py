"""The take rounds: what a worker takes, steals and asks for, and when a lease may be read.

:class:`LeaseTaker` runs the take loop, a round every ``take_interval``: it lists the table
when :class:`~._policy.ScanSchedule` says so (every other round on the two watchers, about once a
failover time elsewhere) and checks the listing (our own id renewed by another process is a
:class:`WorkerIdConflictError`), takes free and expired leases and steals toward the even
share by :func:`~._policy.plan_takes` - or asks the owners to hand them over and follows
those asks (:class:`~._handoffs.HandoffsAsked`) - pins a LATEST lease's start before its first
reader, and hands a lease to its reader once it may be read (pinned, its parents finished, a
stolen lease's previous reader stopped). Between rounds the loop wakes when a watcher's
listing said another worker's lease would expire (see :func:`~._policy.expiry_moments`), to
take it then. It owns the scan schedule, the expiry moments, the handoffs it asked for (one
object), whether it still takes (not after ``release_all``) and the counters of its rounds.

It is separate from :class:`LeaseCoordinator` (:mod:`._coordinator`) because the round is
one job with state of its own that nothing else writes: the coordinator owns one, starts its
loop under its supervision, tells it to stop taking and reads what it exposes; the coordinator
keeps the public calls, the lifecycle, the supervision and shard sync. Keeping a held lease
is the :class:`~._holder.LeaseHolder`'s: the round reads what the holder knows of the table
and tells it what was taken (:meth:`~._holder.LeaseHolder.hold`, ``learn``, ``write``,
``hand_out``), and writes none of its fields, nor the holder any of the round's.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import anyio

from ..client import service_now
from ..errors import KinesisError
from ._config import LeaseConfig
from ._errors import WorkerIdConflictError
from ._events import LeaseStats
from ._handoffs import HandoffsAsked
from ._holder import EPSILON, Held, LeaseHolder
from ._items import LATEST, Lease
from ._policy import (
    ScanSchedule,
    TakePlan,
    expiry_moments,
    live_owners,
    parents_finished,
    plan_takes,
    write_landed,
)
from ._streams import Streams
from ._table import PERMANENT_FAULTS, Caller, LeaseTable
from ._waves import in_waves

__all__ = ["FATAL", "PIN_MARGIN_MS", "LeaseTaker"]

logger = logging.getLogger("kinesis_actors.leases")

_T = TypeVar("_T")

#: How much earlier than the service's clock (as the Kinesis client's replies tell it) a LATEST
#: lease's start is pinned: a later owner reads from the pin, and the arrival timestamps are
#: stamped by other hosts of the service (a few records read twice are allowed, one skipped
#: is not).
PIN_MARGIN_MS = 2000
#: Faults that stop the coordinator: no retry mends them, and its user must hear of them.
FATAL: tuple[type[KinesisError], ...] = (*PERMANENT_FAULTS, WorkerIdConflictError)
#: Takes, asks and pins of one round run this many at a time (see :mod:`._waves`).
_ROUND_CONCURRENCY = 16
#: How long after a lease's expiry moment a watcher wakes to take it: the expiry is strict
#: (silent for *more* than the failover time).
_PAST_EXPIRY = 0.001


@dataclass(slots=True)
class _RoundCounts:
    """The take rounds' share of :class:`LeaseStats` (its defaults are the snapshot's),
    turned into the snapshot by :meth:`LeaseTaker.report`."""

    taken: int = 0
    stolen: int = 0
    replies_settled: int = 0
    transient_errors: int = 0
    handoffs_received: int = 0
    workers: int = 1
    leases: int = 0
    listings: int = 0
    watching: bool = True


class LeaseTaker:
    """A worker's take rounds (see the module's doc).

    ``known`` gives the coordinator's streams (it raises until the coordinator is open);
    ``kinesis`` is the Kinesis client whose replies date a pin (see :meth:`_pin`).
    """

    def __init__(
        self,
        table: LeaseTable,
        holder: LeaseHolder,
        worker_id: str,
        config: LeaseConfig,
        clock: Callable[[], float],
        *,
        known: Callable[[], Streams],
        kinesis: Caller,
        initial_position: str,
        rng: random.Random,
    ) -> None:
        self._table = table
        self._holder = holder
        self._worker_id = worker_id
        self._config = config
        self._clock = clock
        self._known = known
        self._kinesis = kinesis
        self._initial = initial_position
        self._rng = rng
        self._releasing = False
        self._in_round = False  # a round (or a wake between rounds) under way
        self._round_over: anyio.Event | None = None
        self._handoffs = HandoffsAsked(table, holder, worker_id, config, clock=clock, known=known)
        self._schedule = ScanSchedule(worker_id, config.failover_time)
        # A watcher's moments, from its last listing, at which other workers' leases expire
        # (see expiry_moments): it wakes at each to take what expired, between rounds.
        # Bounded by that listing: at most one moment a lease, rebuilt at every listing.
        self._expiries: deque[float] = deque()
        self._counts = _RoundCounts()

    # -- what the coordinator reads ----------------------------------------------------------

    @property
    def watching(self) -> bool:
        """Whether this worker is a watcher by its last listing (see :class:`ScanSchedule`)."""
        return self._schedule.watching

    def report(self, stats: LeaseStats) -> LeaseStats:
        """``stats`` (the coordinator's counters) with the rounds' added: takes, steals,
        handoffs asked and received, what the last listing showed, and the counts shared
        with others (lost replies settled, transient faults)."""
        counts = self._counts
        return replace(
            stats,
            taken=counts.taken,
            stolen=counts.stolen,
            replies_settled=stats.replies_settled + counts.replies_settled,
            transient_errors=stats.transient_errors + counts.transient_errors,
            handoffs_asked=self._handoffs.count,
            handoffs_withdrawn=self._handoffs.withdrawn,
            handoffs_received=counts.handoffs_received,
            workers=counts.workers,
            leases=counts.leases,
            listings=counts.listings,
            watching=counts.watching,
        )

    # -- what the coordinator tells ----------------------------------------------------------

    def stop_taking(self) -> list[str]:
        """``release_all`` began: rounds take, steal, ask and pin nothing more, and hand no
        lease to a reader that was not handed out already (they still list the table).
        Returns the keys of the asks for ``release_all`` to :meth:`withdraw_ask`."""
        self._releasing = True
        return self._handoffs.stop()

    async def withdraw_ask(self, key: str) -> None:
        await self._handoffs.withdraw(key)  # see HandoffsAsked.withdraw

    async def round_ended(self) -> None:
        """Wait until no take round is under way: ``release_all`` waits, so that closing the
        coordinator does not cancel what a round still does once it stopped taking (an ask
        withdrawing itself as it lands, a late take given back, overdue asks withdrawn)."""
        while self._in_round:
            if self._round_over is None or self._round_over.is_set():
                self._round_over = anyio.Event()
            await self._round_over.wait()

    def observe(self, leases: list[Lease]) -> list[Lease]:
        """A complete listing of the table: this worker's streams' leases in it, told to the
        holder. Raises :class:`WorkerIdConflictError` if a lease under our id that we do not
        hold keeps being renewed (see :mod:`._policy`)."""
        streams = self._known()
        ours = [lease for lease in leases if streams.owner_of(lease) is not None]
        holder = self._holder
        holder.observe(ours, self._clock())
        for lease in ours:
            if (
                lease.owner == self._worker_id
                and lease.key not in holder.held
                and lease.checkpoint_owner is None  # else its owner renews it, handing it to us
                and lease.key not in self._handoffs
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

    # -- take rounds -------------------------------------------------------------------------

    def _following(self) -> bool:
        """Whether this worker needs every round's listing for its own sake: a handoff it
        asked for is pending, or a lease it holds waits on its parents (neither once
        ``release_all`` began: it follows nothing more)."""
        if self._releasing:
            return False
        return self._handoffs.pending or any(
            not held.ready and not held.needs_pin and held.lease.parent_shard_ids
            for held in self._holder.held.values()
        )

    async def _under_way(self, body: Callable[[], Awaitable[None]]) -> None:
        """Run a round's ``body``, known to be under way meanwhile (see :meth:`round_ended`)."""
        self._in_round = True
        try:
            await body()
        finally:
            self._in_round = False
            if self._round_over is not None:
                self._round_over.set()

    async def take_round(self) -> None:
        """One round: list the table (a watcher's round, see :class:`ScanSchedule`, or one
        due), take, steal and follow handoffs by that listing; every round pins and hands
        ready leases to their readers."""
        await self._under_way(self._take_round)

    async def _take_round(self) -> None:
        now = self._clock()
        if not self._schedule.due(
            now, following=self._following(), period=self._config.take_period
        ):
            if not self._releasing:
                await self._pin_all()
            self.open_ready()
            return
        try:
            listing = await self._table.list()
        except BaseException:
            # The moments came from a listing this one was to bring up to date: without it
            # they may be a failover time old, and every lease would seem to expire (a Scan
            # throttled while writes pass would turn them into a burst of takes bound to
            # fail). Nothing is taken until a listing succeeds, as before the moments.
            self._expiries.clear()
            raise
        ours = self.observe(listing)
        now = self._clock()
        self._schedule.listed(
            live_owners(ours, lambda lease: self._holder.expired(lease, now)), now
        )
        counts = self._counts
        counts.listings += 1
        counts.watching = self._schedule.watching
        self._expiries.clear()
        if not self._releasing:
            if self._schedule.watching:
                self._expiries.extend(
                    expiry_moments(
                        ours,
                        worker_id=self._worker_id,
                        held=self._holder.held.keys(),
                        expires_at=self._holder.expires_at,
                        after=now,
                    )
                )
            plan = self._plan(ours, now)
            live = sum(1 for lease in ours if not lease.finished)
            counts.workers, counts.leases = plan.workers, live
            await self._each(plan.take, lambda lease: self._take(lease, stolen=False))
            if self._config.graceful_handoff:
                await self._each(plan.steal, self._handoffs.ask)
            else:
                await self._each(plan.steal, lambda lease: self._take(lease, stolen=True))
            await self._follow_handoffs(now)
            await self._pin_all()
        self.open_ready()

    def _plan(self, ours: Sequence[Lease], now: float) -> TakePlan:
        """What to take and steal by ``ours`` (a listing, or the table as last known) at
        ``now`` (see :func:`~._policy.plan_takes`)."""
        still = 2 * self._config.renew_period
        return plan_takes(
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

    async def between_rounds(self) -> None:
        """A wake between rounds (see :meth:`next_wake`): a watcher takes the leases that
        expired since its listing said when they would - by the table as last known, each
        take conditional on the counter seen, so an owner that renewed after all keeps its
        lease (and what the failed take read is learnt, not tried again) - and every held
        lease that may now be read is handed to its reader."""
        await self._under_way(self._between_rounds)

    async def _between_rounds(self) -> None:
        now = self._clock()
        due = False
        while self._expiries and self._expiries[0] < now:
            self._expiries.popleft()
            due = True
        if due and not self._releasing and self._schedule.watching:
            plan = self._plan(list(self._holder.by_key.values()), now)
            await self._each(plan.take, lambda lease: self._take(lease, stolen=False))
            await self._pin_all()
        self.open_ready()

    def next_wake(self, next_round: float) -> float:
        """When the take loop wakes next: the next round, or a watcher's next expiry moment
        if that comes first."""
        if self._expiries:
            return min(next_round, self._expiries[0] + _PAST_EXPIRY)
        return next_round

    async def _each(self, items: Sequence[_T], action: Callable[[_T], Awaitable[None]]) -> None:
        """``action`` on every item, :data:`_ROUND_CONCURRENCY` at a time; the first error of
        the table ends the round (see :func:`~._waves.in_waves`)."""
        await in_waves(items, action, at_once=_ROUND_CONCURRENCY, fatal=FATAL)

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
                if current is not None:
                    self._holder.learn(current)  # not expired in this form
                return
            new = current
            self._counts.replies_settled += 1
        # A stolen lease's reader stops at its owner's next renewal: wait that long before
        # reading, so that no shard is read twice at once. So does one taken back from our
        # own id (an earlier run that may only have been paused).
        reclaimed = lease.owner == self._worker_id
        ready_at = started + self._config.renew_period + EPSILON if stolen or reclaimed else 0.0
        previous = lease.owner if lease.owner != self._worker_id else None
        held = self._new_held(new, info.name, started, previous, ready_at)
        self._holder.hold(held)
        if self._releasing:
            await self._give_back(lease.key, held)
            return
        self._open(lease.key, held, self._clock())
        if stolen:
            self._counts.stolen += 1
        else:
            self._counts.taken += 1
        logger.info(
            "%s %s lease %s (from %s)",
            self._worker_id,
            "stole" if stolen else "took",
            lease.key,
            lease.owner,
        )

    async def _give_back(self, key: str, held: Held) -> None:
        """A take that landed after ``release_all`` began (it was in flight then): release
        ``held`` at once, unread, as ``release_all`` released the leases it found held. If
        that fails it stays held, renewed but never handed to a reader (see :meth:`_open`),
        until the coordinator closes and it expires."""
        async with held.lock:
            if self._holder.held.get(key) is not held:
                return
            try:
                new = await self._holder.release(key, held, None, ())
            except FATAL:
                raise
            except KinesisError as error:
                self._counts.transient_errors += 1
                logger.warning(
                    "%s could not give %s back after release_all (left to expire): %s",
                    self._worker_id,
                    key,
                    error,
                )
                return
        if new is not None:
            logger.info("%s gave %s back: release_all began as it was taken", self._worker_id, key)

    async def _follow_handoffs(self, now: float) -> None:
        """The handoffs asked for, settled by the last listing (and the asks since, see
        :meth:`~._handoffs.HandoffsAsked.settle`): a lease handed over is held (and read at
        once: its owner stopped first); one not handed over in time, or whose owner died,
        is taken as before. Nothing once ``release_all`` began (during this round's takes
        and asks): it has listed what it releases, and a lease adopted after that would be
        held, renewed and never read nor released; the asks stay as they are."""
        if self._releasing:
            return
        handed, overdue = self._handoffs.settle(now)
        for lease, previous in handed:
            self._adopt_handed(lease, previous)
        for lease in overdue:
            if self._releasing:  # release_all began during a take below: not taken, given back
                await self._handoffs.withdraw(lease.key, settled=True)
            else:
                await self._take(lease, stolen=True)

    def _adopt_handed(self, lease: Lease, previous: str) -> None:
        info = self._known().owner_of(lease)
        if info is None or lease.finished:
            return
        held = self._new_held(lease, info.name, self._clock(), previous, 0.0)
        self._holder.hold(held)
        self._open(lease.key, held, self._clock())
        self._counts.handoffs_received += 1
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

    async def _pin_all(self) -> None:
        """Pin every held lease that waits for its pin (see :meth:`_pin`)."""
        pins = [(key, held) for key, held in self._holder.held.items() if held.needs_pin]
        await self._each(pins, lambda pin: self._pin(*pin))

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

    def open_ready(self) -> None:
        """Hand every held lease that may be read now to its reader (see :meth:`_open`)."""
        now = self._clock()
        for key, held in self._holder.held.items():
            self._open(key, held, now)

    def _open(self, key: str, held: Held, now: float) -> None:
        """Hand ``held`` to its reader if it may be read now: pinned, not finished, its
        parents finished and (stolen or reclaimed) its previous owner's reader stopped.
        Called when a take is won, not only at the end of the round: a dead worker's 250
        leases reach their readers as they are taken, not all after the last. Never once
        ``release_all`` began: what is still held then is a lease it could not release, or
        one a take brought in after it whose give-back failed, both left to expire."""
        if held.ready or held.needs_pin or now < held.ready_at or held.lease.finished:
            return
        if self._releasing:
            return
        if not parents_finished(self._known().parents_of(held.lease), self._holder.by_key):
            return
        logger.debug("%s may read %s", self._worker_id, key)
        self._holder.hand_out(held)

    async def take_rounds(self) -> None:
        """Take rounds, one every ``take_period``, until cancelled; a round's transient
        fault is counted and logged, a fatal one raised."""
        period = self._config.take_period
        next_round = self._clock() + period
        while True:
            # Rounds start every period, not a period after the last one ended: the failover
            # bound counts on it.
            await anyio.sleep(max(0.0, self.next_wake(next_round) - self._clock()))
            try:
                if self._clock() >= next_round:
                    next_round = max(next_round + period, self._clock())
                    await self.take_round()
                else:
                    await self.between_rounds()
            except FATAL:
                raise
            except KinesisError as error:
                self._transient("a take round", error)

    def _transient(self, what: str, error: KinesisError) -> None:
        """A transient fault of a round the client's retries did not mend (``what``
        failed): counted and logged; the round runs again at its next interval."""
        self._counts.transient_errors += 1
        logger.warning("%s of %s failed, retried next round: %s", what, self._worker_id, error)
