"""What a worker holds, and the writes that keep it: a component of :class:`LeaseCoordinator`.

:class:`LeaseHolder` owns the state of the leases held (:class:`Held`, each written under its
own lock, and only here), what is known of the table (the last listing by key, kept current
by every write, and the expiry tracker), the counters of its own writes, and the
:class:`~._outbox.EventOutbox` through which :class:`LeaseAcquired` / :class:`LeaseLost` /
:class:`LeaseHandoff` reach the reader. It does the writes on a held lease: renewals (a
loop of rounds that keeps its cadence and drops a lease not renewed for ``failover_time``)
and the conditional write and release protocol - a failed condition is settled by reading
the item back: a write of ours that landed after its reply was lost is kept, anything else
ends the lease (:class:`LeaseLost`), never the worker.

The coordinator (:mod:`._coordinator`) owns one and drives it through the methods and
read-only properties below, and so does its take rounds' :class:`~._taker.LeaseTaker`, which
it hands the holder to: the taker decides what to take and when a lease may be read, the
coordinator when to stop, and they own everything else (the streams, the task group, take
rounds, shard sync, their own counters). Nothing here writes their fields: a shard found
ended elsewhere is told through the ``on_shard_end`` callback, the counters through
:meth:`report`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import anyio

from ..errors import KinesisError
from ._config import LeaseConfig
from ._events import LeaseAcquired, LeaseHandoff, LeaseLost, LeaseStats
from ._items import SHARD_END, Lease
from ._outbox import EventOutbox
from ._policy import ExpiryTracker, write_landed
from ._table import PERMANENT_FAULTS, LeaseTable

__all__ = ["EPSILON", "Held", "LeaseHolder"]

logger = logging.getLogger("kinesis_actors.leases")

#: Renewals in flight at once (the KCL renews on a thread pool too).
_RENEW_CONCURRENCY = 16
#: How much earlier than ``failover_time`` a lease not renewed is dropped (the KCL's epsilon).
EPSILON = 0.025
#: Writes tried for one renewal or one answer to a handoff when the handoff's state changes
#: under them (asked, asked again by another worker, withdrawn), each under the new condition.
_WRITES = 3


@dataclass(slots=True)
class Held:
    """A held lease: created by the take rounds (:class:`~._taker.LeaseTaker`), then written
    only by the :class:`LeaseHolder`, under ``lock``."""

    lease: Lease
    stream: str
    renewed_at: float
    previous_owner: str | None = None
    ready: bool = False
    ready_at: float = 0.0
    pending: tuple[str, int] | None = None
    needs_pin: bool = False
    pinned_before: int | None = None
    handing_to: str | None = None  # a handoff asked by this worker (see LeaseHandoff)
    handoff_since: float = 0.0
    # The ask was withdrawn after the reader was told to stop: its answer releases the lease.
    handoff_withdrawn: bool = False
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def answering(self) -> bool:
        """Whether a handoff is under way: asked (or asked and withdrawn), its answer due."""
        return self.handing_to is not None or self.handoff_withdrawn


@dataclass(slots=True)
class _Counts:
    """The holder's share of :class:`LeaseStats`: counted on the renewal path as plain
    increments (no frozen copy per renewal), turned into the snapshot by :meth:`report`."""

    renewals: int = 0
    checkpoints: int = 0
    lost: int = 0
    released: int = 0  # handoffs answered after their ask was withdrawn
    replies_settled: int = 0
    transient_errors: int = 0
    handoffs_given: int = 0
    renewal_latency_last: float | None = None
    renewal_latency_max: float | None = None


class LeaseHolder:
    """The leases a worker holds, their events and their writes (see the module's doc)."""

    def __init__(
        self,
        table: LeaseTable,
        worker_id: str,
        config: LeaseConfig,
        clock: Callable[[], float],
        on_shard_end: Callable[[], None],
    ) -> None:
        self._table = table
        self._worker_id = worker_id
        self._config = config
        self._clock = clock
        self._on_shard_end = on_shard_end
        self._tracker = ExpiryTracker(config.failover_time)
        self._held: dict[str, Held] = {}
        self._by_key: dict[str, Lease] = {}
        self._outbox = EventOutbox()
        self._counts = _Counts()

    # -- what the coordinator and the taker read ---------------------------------------------

    @property
    def held(self) -> Mapping[str, Held]:
        """The leases held, by key (read-only: :meth:`hold` adds one, the writes remove)."""
        return self._held

    @property
    def by_key(self) -> Mapping[str, Lease]:
        """The table as last known, by key: the last listing, and every write since."""
        return self._by_key

    @property
    def outbox(self) -> EventOutbox:
        """The events for the reader: the holder puts them in, the coordinator's reader takes
        them out (and the coordinator fails it when it stops)."""
        return self._outbox

    def expired(self, lease: Lease, now: float, *, after: float | None = None) -> bool:
        """Whether ``lease`` may be taken without stealing (see :class:`ExpiryTracker`)."""
        return self._tracker.expired(lease, now, after=after)

    def expires_at(self, lease: Lease) -> float | None:
        """When ``lease`` expires by this worker's history (see :class:`ExpiryTracker`)."""
        return self._tracker.expires_at(lease)

    def lapsed(self, key: str) -> bool:
        """Whether ``key`` is held but went ``failover_time - EPSILON`` without a renewal by
        this worker's clock: another worker may take it now. It is dropped at the holder's
        next look (a renewal adopted late does not bring it back), and until then nothing of
        it may be delivered: a process stopped past its failover time (SIGSTOP, a debugger, a
        long collection) wakes with its deliveries and its renewal loop due at once, in no set
        order. The clock is monotonic, so a host's suspension is not seen."""
        held = self._held.get(key)
        if held is None:
            return False
        return self._clock() - held.renewed_at >= self._config.failover_time - EPSILON

    def changes_by_same_owner(self, key: str) -> int:
        """How often ``key``'s counter moved under one owner (see :class:`ExpiryTracker`)."""
        return self._tracker.changes_by_same_owner(key)

    def report(self, stats: LeaseStats) -> LeaseStats:
        """``stats`` (the coordinator's and the taker's counters) with the holder's added:
        what is held now, the renewals and the counts shared (lost replies settled,
        transient faults)."""
        counts = self._counts
        return replace(
            stats,
            held=len(self._held),
            ready=sum(1 for h in self._held.values() if h.ready),
            renewals=counts.renewals,
            checkpoints=counts.checkpoints,
            lost=counts.lost,
            released=stats.released + counts.released,
            replies_settled=stats.replies_settled + counts.replies_settled,
            transient_errors=stats.transient_errors + counts.transient_errors,
            handoffs_given=counts.handoffs_given,
            renewal_latency_last=counts.renewal_latency_last,
            renewal_latency_max=counts.renewal_latency_max,
        )

    # -- what the coordinator and the taker tell ---------------------------------------------

    def observe(self, leases: Iterable[Lease], now: float) -> None:
        """A complete listing of the table (this worker's streams' leases), seen at ``now``."""
        listed = list(leases)
        self._tracker.observe(listed, now)
        self._by_key = {lease.key: lease for lease in listed}

    def learn(self, lease: Lease) -> None:
        """What the taker learnt of ``lease``: a write of its own made it (an ask for a
        handoff), or a read after a take that failed its condition found it."""
        self._by_key[lease.key] = lease

    def hold(self, held: Held) -> None:
        """A lease taken or handed to this worker: held from now on, renewed by
        :meth:`renew_rounds`."""
        key = held.lease.key
        self._held[key] = held
        self._by_key[key] = held.lease
        self._tracker.forget(key)

    def note(self, held: Held, checkpoint: tuple[str, int]) -> None:
        """A checkpoint to write with ``held``'s next renewal."""
        held.pending = checkpoint

    def hand_out(self, held: Held) -> None:
        """``held`` may be read now (the taker decided): tell the reader, once."""
        if held.ready:
            return
        held.ready = True
        self._outbox.push(
            LeaseAcquired(
                held.stream,
                held.lease.shard_id,
                held.lease.checkpoint,
                held.lease.sub_sequence,
                held.lease.parent_shard_ids,
                held.previous_owner,
                held.pinned_before,
            )
        )

    def tell_lost(self, held: Held, reason: str) -> None:
        """Tell ``held``'s reader, if it was handed out, that it must stop reading."""
        if held.ready:
            self._outbox.push(LeaseLost(held.stream, held.lease.shard_id, reason))

    # -- renewals ----------------------------------------------------------------------------

    async def renew_rounds(self) -> None:
        """Renew the held leases, a round every ``checkpoint_period``, until cancelled."""
        tick = self._config.checkpoint_period
        renew = self._config.renew_period
        limit = anyio.CapacityLimiter(_RENEW_CONCURRENCY)
        valid = self._config.failover_time - EPSILON
        # Rounds keep their cadence whatever a round takes (100 renewals take a few hundred
        # milliseconds), and a lease not renewed for a failover time is dropped on time.
        next_round = self._clock() + tick
        while True:
            wake = next_round
            for held in self._held.values():
                wake = min(wake, held.renewed_at + valid)
            await anyio.sleep(max(0.0, wake - self._clock()))
            now = self._clock()
            for key, held in list(self._held.items()):
                if now - held.renewed_at >= valid:
                    self._drop(key, held, "expired")
            if now < next_round:
                continue
            next_round = max(next_round + tick, now)
            async with anyio.create_task_group() as group:
                for key, held in list(self._held.items()):
                    if held.pending is not None or now - held.renewed_at >= renew - tick / 2:
                        group.start_soon(self._renew, key, held, limit)

    async def _renew(self, key: str, held: Held, limit: anyio.CapacityLimiter) -> None:
        # A renewal retried against an unreachable table gives up when the lease would
        # expire, so that the round ends and the lease is dropped on time (a write that
        # landed all the same is adopted by the next one, see _adopt).
        left = held.renewed_at + self._config.failover_time - EPSILON - self._clock()
        with anyio.move_on_after(max(0.0, left)):
            async with limit, held.lock:
                if self._held.get(key) is not held:
                    return
                late = self._clock() - held.handoff_since > self._config.handoff_timeout
                try:
                    if held.answering and late:
                        # The reader did not hand it over in time: the coordinator does.
                        new = await self.hand_over(key, held, held.pending, ())
                        if new is not None:
                            reason = "released" if new.owner is None else "handed over"
                            self.tell_lost(held, reason)
                        return
                    await self.write(key, held, held.pending)
                except PERMANENT_FAULTS:
                    raise
                except KinesisError as error:
                    self._transient(f"renewal of {key}", error)

    async def write(
        self, key: str, held: Held, checkpoint: tuple[str, int] | None, pin: int | None = None
    ) -> Lease | None:
        """Renew ``held`` (with ``checkpoint``, and ``pin`` as its ``latestPinnedAt``: then
        it no longer needs one), under its lock; None if it was lost (or handed over), or,
        rarely, if the handoff's state changed under more than :data:`_WRITES` writes."""
        started = self._clock()
        for _ in range(_WRITES):
            owner = held.handing_to or self._worker_id  # whose the lease is once written
            new = await self._table.renew(
                held.lease,
                self._worker_id,
                checkpoint,
                pin=pin,
                handing_over=owner != self._worker_id,
            )
            if new is None:
                new = await self._settle(key, held, owner, checkpoint)
            # Still held after a failed condition: a handoff was asked meanwhile (or again,
            # by another worker), or its ask withdrawn; the renewal goes on under the
            # condition that holds now. Not held: lost, or handed over at once (not read).
            if new is not None or self._held.get(key) is not held:
                break
        if new is None:
            return None
        if held.handing_to is not None and new.owner not in (None, held.handing_to):
            # A renewal while handing over holds on checkpointOwner alone: it passes over a
            # withdrawal and another worker's ask in between. The answer goes to that one.
            logger.info("%s: %s is asked for again, by %s", self._worker_id, key, new.owner)
            held.handing_to = new.owner
        if self.lapsed(key):
            # Its reply came after the lease lapsed (a pause, or a reply held up): others may
            # take it now and its batches were fenced, so a lapse is final. A write that
            # landed only keeps the others off for one more failover time.
            self._drop(key, held, "expired")
            return None
        latency = self._clock() - started
        counts = self._counts
        counts.renewals += 1
        counts.checkpoints += checkpoint is not None
        counts.renewal_latency_last = latency
        counts.renewal_latency_max = max(latency, counts.renewal_latency_max or 0.0)
        held.lease, held.renewed_at = new, started
        if checkpoint is not None and held.pending == checkpoint:
            held.pending = None
        if pin is not None:
            held.needs_pin = False
        self._by_key[key] = new
        return new

    async def write_through(
        self, key: str, held: Held, checkpoint: tuple[str, int]
    ) -> Lease | None:
        """Write ``checkpoint`` now, under ``held``'s lock (a checkpoint the caller waits
        for): :meth:`write`, tried again while the lease stays held but a handoff keeps
        changing under the writes (each change is another worker's ask or its withdrawal,
        and a change is what made the last try fail), until it lands; None if the lease is
        lost, or lapses first (then it is dropped as expired, like any lapsed lease)."""
        while True:
            new = await self.write(key, held, checkpoint)
            if new is not None or self._held.get(key) is not held:
                return new
            if self.lapsed(key):
                self._drop(key, held, "expired")
                return None

    async def _settle(
        self, key: str, held: Held, owner: str | None, checkpoint: tuple[str, int] | None
    ) -> Lease | None:
        """A write's condition failed: settle what happened by reading the item back
        (consistently). Exactly the state our write makes (``owner`` after it: ours for a
        renewal, None for a release) means it landed and only its reply was lost (the client
        retried, and the retry failed the condition our own write had moved): the lease as
        written. Anything else means the lease is no longer ours to write - another owner, or
        our id with a counter we did not write (an operator's edit, or a write of an earlier
        run) - and it is dropped (:class:`LeaseLost`), to be taken again like any other: None.

        A failed condition is never by itself evidence of another process under our id; that
        takes a counter that keeps moving while we do not hold the lease (the take rounds'
        check of each listing)."""
        current = await self._table.get(key)
        sequence = None if checkpoint is None else checkpoint[0]
        if current is not None and write_landed(held.lease, current, owner, sequence):
            self._counts.replies_settled += 1
            return current
        # While a handoff is under way, an ask and its withdrawal leave the counter as it is:
        # only the counter of our last write, or of one landed with its reply lost, is ours.
        ours = current is not None and current.counter - held.lease.counter in (0, 1)
        if (
            current is not None
            and current.checkpoint_owner == self._worker_id
            and current.owner not in (None, self._worker_id)
            and (ours or not held.answering)
        ):
            await self._handoff_asked(key, held, current)  # asked, or asked again
            return None
        if (
            current is not None
            and held.handing_to is not None
            and current.owner == self._worker_id
            and current.checkpoint_owner is None
            and ours
        ):
            self._handoff_withdrawn(key, held, current)
            return None
        self._drop(key, held, "taken")
        if current is not None and current.finished:
            self._on_shard_end()  # nobody but its reader ends a shard: check the stream
        if current is not None and current.owner == self._worker_id:
            logger.warning(
                "lease %s still names %s as owner, but its counter is %d where this worker "
                "wrote %d: someone else wrote it (a hand edit?); dropped, to be taken again",
                key,
                self._worker_id,
                current.counter,
                held.lease.counter,
            )
        return None

    async def _handoff_asked(self, key: str, held: Held, current: Lease) -> None:
        """Another worker asked for ``held`` (``current`` names it the ``leaseOwner`` and us
        the ``checkpointOwner``): tell the reader (:class:`LeaseHandoff`), and keep renewing
        under the handoff's condition until it hands over. A lease not handed out yet has
        nothing to stop: it is handed over at once."""
        # Asked before (by this worker or another, or withdrawn since): the reader was told
        # then, and its answer, on its way, goes to whoever asks now, by the same deadline.
        told = held.answering
        held.lease, held.handing_to = current, current.owner
        held.handoff_withdrawn = False
        if not told:
            held.handoff_since = self._clock()
        self._by_key[key] = current
        logger.info("%s is asked to hand %s over to %s", self._worker_id, key, current.owner)
        if told:
            return
        if held.ready:
            self._outbox.push(LeaseHandoff(held.stream, held.lease.shard_id, str(current.owner)))
        else:
            await self.hand_over(key, held, None, ())

    def _handoff_withdrawn(self, key: str, held: Held, current: Lease) -> None:
        """The asker of ``held`` withdrew its ask as it left (``current`` names us the owner
        again, with no ``checkpointOwner``): a lease not handed out goes on as before; one
        whose reader was told to stop is released at its answer's checkpoint instead
        (:meth:`hand_over`), for any worker to take at its next round, with no duplicate."""
        taker = held.handing_to
        held.lease, held.handing_to = current, None
        held.handoff_withdrawn = held.ready
        self._by_key[key] = current
        logger.info(
            "%s: %s withdrew its ask for %s%s",
            self._worker_id,
            taker,
            key,
            " (released once its reader answers)" if held.ready else "",
        )

    async def hand_over(
        self,
        key: str,
        held: Held,
        checkpoint: tuple[str, int] | None,
        children: tuple[str, ...],
    ) -> Lease | None:
        """Complete the handoff of ``held`` with ``checkpoint``, under its lock: the new
        lease, or None if it was lost first (or, rarely, the handoff's state changed under
        more than :data:`_WRITES` writes: then it stays held, the checkpoint noted, for the
        next answer or the coordinator's own after ``handoff_timeout``). Asked again by
        another worker meanwhile, it is handed to that one; a handoff whose ask was withdrawn
        (before or during this write) ends as a release at ``checkpoint`` (see
        :meth:`_handoff_withdrawn`)."""
        if checkpoint is not None and checkpoint[0] != SHARD_END:
            held.pending = checkpoint  # if this answer does not land, the next one writes it
        for _ in range(_WRITES):
            withdrawn, taker = held.handoff_withdrawn, held.handing_to
            if taker is None and not withdrawn:
                return None  # withdrawn before it was handed out: it goes on as before
            if withdrawn:
                new = await self._table.release(held.lease, self._worker_id, checkpoint, children)
            else:
                new = await self._table.hand_over(held.lease, self._worker_id, checkpoint, children)
            if new is None:
                new = await self._settle(key, held, None if withdrawn else taker, checkpoint)
            if new is not None and new.checkpoint_owner is None:
                if withdrawn:
                    self._counts.released += 1
                else:
                    self._counts.handoffs_given += 1
                self._let_go(key, new, checkpoint)
                logger.info(
                    "%s %s %s",
                    self._worker_id,
                    "released" if withdrawn else "handed",
                    f"{key} (its ask was withdrawn)" if withdrawn else f"{key} over to {taker}",
                )
                return new
            if new is not None or self._held.get(key) is not held:
                return None
        return None

    async def release(
        self,
        key: str,
        held: Held,
        checkpoint: tuple[str, int] | None,
        children: tuple[str, ...],
    ) -> Lease | None:
        """Release ``held`` (with ``checkpoint``), under its lock; None if it was lost. Asked
        for meanwhile, it is handed to the asker instead, with the same checkpoint."""
        new = await self._table.release(held.lease, self._worker_id, checkpoint, children)
        if new is None:
            new = await self._settle(key, held, None, checkpoint)
            if new is None and held.handing_to is not None and self._held.get(key) is held:
                # Answered here: its reader has nothing to do.
                self._outbox.unqueue(LeaseHandoff, held.stream, held.lease.shard_id)
                return await self.hand_over(key, held, checkpoint, children)
            if new is None:
                return None
        self._let_go(key, new, checkpoint)
        return new

    def _let_go(self, key: str, new: Lease, checkpoint: tuple[str, int] | None) -> None:
        """A release or a handover was written: the lease is no longer held."""
        if checkpoint is not None:
            self._counts.checkpoints += 1
        self._held.pop(key, None)
        self._tracker.forget(key)
        self._by_key[key] = new

    def _transient(self, what: str, error: KinesisError) -> None:
        """A transient fault of a write the client's retries did not mend (``what``
        failed): counted and logged; the round runs again at its next interval."""
        self._counts.transient_errors += 1
        logger.warning("%s of %s failed, retried next round: %s", what, self._worker_id, error)

    def _drop(self, key: str, held: Held, reason: str) -> None:
        if self._held.get(key) is not held:
            return
        del self._held[key]
        self._tracker.forget(key)
        self._counts.lost += 1
        logger.warning("%s lost lease %s (%s)", self._worker_id, key, reason)
        self.tell_lost(held, reason)
