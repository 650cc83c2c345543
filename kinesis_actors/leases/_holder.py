"""What a worker holds, and the writes that keep it: the base of :class:`LeaseCoordinator`.

:class:`LeaseHolder` owns the state of the leases held (:class:`Held`, each written under its
own lock), the last listing of the table by key, the expiry tracker, the statistics and the
queue of :class:`LeaseAcquired` / :class:`LeaseLost` events for the reader. It does the writes
on a held lease: renewals (a loop of rounds that keeps its cadence and drops a lease not
renewed for ``failover_time``) and the conditional write and release protocol - a failed
condition is settled by reading the item back: a write of ours that landed after its reply
was lost is kept, anything else ends the lease (:class:`LeaseLost`), never the worker.

Finding and taking leases, shard sync, the lifecycle and the user's calls are
:mod:`._coordinator`'s, which subclasses this.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

import anyio
import anyio.lowlevel

from ..errors import KinesisError
from ._config import LeaseConfig
from ._events import LeaseAcquired, LeaseEvent, LeaseHandoff, LeaseLost, LeaseStats
from ._items import Lease
from ._policy import ExpiryTracker, write_landed
from ._table import PERMANENT_FAULTS, LeaseTable

__all__ = ["EPSILON", "Held", "LeaseHolder"]

logger = logging.getLogger("kinesis_actors.leases")

#: Renewals in flight at once (the KCL renews on a thread pool too).
_RENEW_CONCURRENCY = 16
#: How much earlier than ``failover_time`` a lease not renewed is dropped (the KCL's epsilon).
EPSILON = 0.025


@dataclass(slots=True)
class Held:
    """A held lease: owned by the coordinator, written under ``lock``."""

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
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class LeaseHolder:
    """The leases a worker holds, their events and their writes (see the module's doc)."""

    def __init__(
        self,
        table: LeaseTable,
        worker_id: str,
        config: LeaseConfig,
        clock: Callable[[], float],
    ) -> None:
        self._table = table
        self._worker_id = worker_id
        self._config = config
        self._clock = clock
        self._tracker = ExpiryTracker(config.failover_time)
        self._held: dict[str, Held] = {}
        self._by_key: dict[str, Lease] = {}
        self._events: deque[LeaseEvent] = deque()  # Bounded by 2 per lease (see _push).
        self._changed = anyio.Event()
        self._failure: BaseException | None = None
        self._stats = LeaseStats(worker_id=worker_id)

    # -- events ------------------------------------------------------------------------------

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _push(self, event: LeaseEvent) -> None:
        if isinstance(event, LeaseLost):
            for queued in self._events:
                if isinstance(queued, LeaseAcquired) and (queued.stream, queued.shard_id) == (
                    event.stream,
                    event.shard_id,
                ):
                    self._events.remove(queued)  # never received: nothing to stop
                    self._wake()
                    return
        self._events.append(event)
        self._wake()

    async def next_event(self) -> LeaseEvent:
        """The next :class:`LeaseAcquired` or :class:`LeaseLost`, awaiting one.

        Raises the coordinator's failure (for example
        :class:`~kinesis_actors.leases.WorkerIdConflictError`) once it has stopped on one.
        """
        await anyio.lowlevel.checkpoint()
        while True:
            if self._failure is not None:
                raise self._failure
            if self._events:
                return self._events.popleft()
            await self._changed.wait()

    def __aiter__(self) -> AsyncIterator[LeaseEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[LeaseEvent]:
        while True:
            yield await self.next_event()

    # -- renewals ----------------------------------------------------------------------------

    async def _renew_loop(self) -> None:
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
                    if held.handing_to is not None and late:
                        # The reader did not hand it over in time: the coordinator does.
                        if await self._hand_over(key, held, held.pending, ()) and held.ready:
                            self._push(LeaseLost(held.stream, held.lease.shard_id, "handed over"))
                        return
                    await self._write(key, held, held.pending)
                except PERMANENT_FAULTS:
                    raise
                except KinesisError as error:
                    self._transient(f"renewal of {key}", error)

    async def _write(
        self, key: str, held: Held, checkpoint: tuple[str, int] | None, pin: int | None = None
    ) -> Lease | None:
        """Renew ``held`` (with ``checkpoint``, and ``pin`` as its ``latestPinnedAt``), under
        its lock; None if it was lost (or handed over)."""
        started = self._clock()
        handing = held.handing_to is not None
        new = await self._table.renew(
            held.lease, self._worker_id, checkpoint, pin=pin, handing_over=handing
        )
        if new is None:
            new = await self._settle(key, held, held.handing_to or self._worker_id, checkpoint)
            if new is None and not handing and held.handing_to is not None:
                if self._held.get(key) is not held:
                    return None  # asked before it was handed out, and handed over at once
                # A handoff was asked meanwhile: the renewal goes on under its condition.
                new = await self._table.renew(
                    held.lease, self._worker_id, checkpoint, pin=pin, handing_over=True
                )
                if new is None:
                    new = await self._settle(key, held, held.handing_to, checkpoint)
            if new is None:
                return None
        latency = self._clock() - started
        worst = max(latency, self._stats.renewal_latency_max or 0.0)
        self._stats = replace(
            self._stats,
            renewals=self._stats.renewals + 1,
            checkpoints=self._stats.checkpoints + (checkpoint is not None),
            renewal_latency_last=latency,
            renewal_latency_max=worst,
        )
        held.lease, held.renewed_at = new, started
        if checkpoint is not None and held.pending == checkpoint:
            held.pending = None
        self._by_key[key] = new
        return new

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
        takes a counter that keeps moving while we do not hold the lease (see ``_observe``)."""
        current = await self._table.get(key)
        sequence = None if checkpoint is None else checkpoint[0]
        if current is not None and write_landed(held.lease, current, owner, sequence):
            self._stats = replace(self._stats, replies_settled=self._stats.replies_settled + 1)
            return current
        if (
            current is not None
            and held.handing_to is None
            and current.checkpoint_owner == self._worker_id
            and current.owner not in (None, self._worker_id)
        ):
            await self._handoff_asked(key, held, current)
            return None
        self._drop(key, held, "taken")
        if current is not None and current.finished:
            self._ended_elsewhere()  # nobody but its reader ends a shard: check the stream
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
        held.lease, held.handing_to, held.handoff_since = current, current.owner, self._clock()
        self._by_key[key] = current
        logger.info("%s is asked to hand %s over to %s", self._worker_id, key, current.owner)
        if held.ready:
            self._push(LeaseHandoff(held.stream, held.lease.shard_id, str(current.owner)))
        else:
            await self._hand_over(key, held, None, ())

    async def _hand_over(
        self,
        key: str,
        held: Held,
        checkpoint: tuple[str, int] | None,
        children: tuple[str, ...],
    ) -> Lease | None:
        """Complete the handoff of ``held`` with ``checkpoint``, under its lock; None if the
        lease was lost first."""
        taker = held.handing_to
        new = await self._table.hand_over(held.lease, self._worker_id, checkpoint, children)
        if new is None:
            new = await self._settle(key, held, taker, checkpoint)
            if new is None or new.checkpoint_owner is not None:
                return None
        self._stats = replace(self._stats, handoffs_given=self._stats.handoffs_given + 1)
        self._let_go(key, new, checkpoint)
        logger.info("%s handed %s over to %s", self._worker_id, key, taker)
        return new

    async def _release(
        self,
        key: str,
        held: Held,
        checkpoint: tuple[str, int] | None,
        children: tuple[str, ...],
    ) -> Lease | None:
        """Release ``held`` (with ``checkpoint``), under its lock; None if it was lost."""
        new = await self._table.release(held.lease, self._worker_id, checkpoint, children)
        if new is None:
            new = await self._settle(key, held, None, checkpoint)
            if new is None:
                return None
        self._let_go(key, new, checkpoint)
        return new

    def _let_go(self, key: str, new: Lease, checkpoint: tuple[str, int] | None) -> None:
        """A release or a handover was written: the lease is no longer held."""
        if checkpoint is not None:
            self._stats = replace(self._stats, checkpoints=self._stats.checkpoints + 1)
        self._held.pop(key, None)
        self._tracker.forget(key)
        self._by_key[key] = new

    def _transient(self, what: str, error: KinesisError) -> None:
        """A transient fault the client's retries did not mend (``what`` failed): counted
        and logged; the round runs again at its next interval."""
        self._stats = replace(self._stats, transient_errors=self._stats.transient_errors + 1)
        logger.warning("%s of %s failed, retried next round: %s", what, self._worker_id, error)

    def _ended_elsewhere(self) -> None:
        """A held lease was found ``SHARD_END`` by another hand; the coordinator checks it
        against the stream's shards at once (see ``_sync.ended_but_open``)."""

    def _drop(self, key: str, held: Held, reason: str) -> None:
        if self._held.get(key) is not held:
            return
        del self._held[key]
        self._tracker.forget(key)
        self._stats = replace(self._stats, lost=self._stats.lost + 1)
        logger.warning("%s lost lease %s (%s)", self._worker_id, key, reason)
        if held.ready:
            self._push(LeaseLost(held.stream, held.lease.shard_id, reason))
