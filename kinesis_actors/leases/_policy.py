"""The lease protocol's decisions, sans-IO: expiry, what to take, what to steal, the gate.

Nothing here awaits or reads a clock: the coordinator passes ``now`` (monotonic seconds, its
own clock) and a random generator, and does the I/O.

**Expiry (the KCL's rule).** Clocks of different machines are never compared. A lease is
expired when its ``leaseCounter`` has not changed for ``failover_time`` on *this* worker's
clock since this worker last saw it change; a lease seen for the first time counts as just
changed (a worker that starts waits one failover time before taking a silent owner's leases).
A lease without an owner is free at once.

**Balance.** ``workers`` are the distinct owners of leases that are not expired, this worker
included; the target share is ``ceil(leases / workers)`` (capped by ``max_leases``). A worker
below its target takes expired and free leases first, in random order so that workers
starting together spread out. Only when none is left does it steal, from the most loaded
worker, and only when that worker holds at least two more than this one (more than the
target, or the target while this worker needs two or more: the KCL's rule, which avoids
ping-pong between two workers one lease apart). A round steals toward the even share, one
lease at a time from whoever holds the most at that point (so from several workers), capped
by ``max_leases_to_steal`` when it is set: a worker joining a group of 1,000 leases reaches
its share in one round, where the KCL's one steal a round needs one round per lease.

**The gate.** A child shard's lease is handed to the reader only when every parent's lease
is finished (checkpoint ``SHARD_END``) or gone: per-key order across a split or a merge holds
whichever worker read the parent.

**Our own id, not held.** A lease owned by this worker's id that this process does not hold
is either left by an earlier run with the same id (a restart: most deployments keep a stable
id) or renewed by another live process using the id. It counts as ours while we watch it (so
a restarted worker does not steal from the survivors meanwhile), and once its counter has
stood still for two renewal intervals - no live process renews it, a live one would have
renewed twice - it is taken back at once, without waiting the failover time at whose end
the survivors would take it (and the restarted worker then steal its share back from them).
Two counter changes seen while it stays so make it a conflict (one change may be a write of
ours that landed after we gave up on it).

**Who scans (:class:`ScanSchedule`).** Expiry is seen only by a worker that lists the table
often: one that lists it once a failover time sees a counter change up to a
failover time late, and a dead owner's lease expires up to twice the failover time after its
last renewal. Two workers are enough to keep the bound for any one death: the *watchers*, the
two lowest ids among the live owners (and this worker), list the whole table every other
round and take every free or expired lease they find, beyond their share if need be (the
others then steal back toward the even share). A listing also says when each other worker's
lease will expire unless its counter moves (:func:`expiry_moments`): a watcher takes it at
that moment, between rounds, so a dead owner's lease is taken at most one listing interval
(two rounds) after the failover time, as when watchers listed every round and took at the
round after the expiry, for half the listings. When a watcher dies the other one still watches its
leases. Every other worker lists the table once a failover time (to steal its share and to
learn whether it has become a watcher), and every round while it needs the listing: during
its first failover time (its expiry history is empty: a restarted worker takes back its own
id's leases), while a handoff it asked for is pending, while a lease it holds waits on a
parent. One watcher would not do: the KCL 3.x's leader scans alone, and a new leader starts
its expiry history afresh, so a dead leader's leases wait a further lease duration.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ._items import Lease

__all__ = [
    "WATCHERS",
    "ExpiryTracker",
    "ScanSchedule",
    "TakePlan",
    "expiry_moments",
    "live_owners",
    "parents_finished",
    "plan_takes",
    "write_landed",
]

#: How many workers list the whole table every other take round (see the module's doc): two, so
#: that the death of either leaves one watching its leases.
WATCHERS = 2


@dataclass(slots=True)
class _Seen:
    counter: int
    changed_at: float
    owner: tuple[str | None, str | None]  # (leaseOwner, checkpointOwner)
    changes: int = 0


class ExpiryTracker:
    """When each lease's counter was last seen to change, on this worker's clock."""

    def __init__(self, failover_time: float) -> None:
        self.failover_time = failover_time
        self._seen: dict[str, _Seen] = {}

    def observe(self, leases: Iterable[Lease], now: float) -> None:
        """Record a complete listing of the table, seen at ``now``."""
        present: set[str] = set()
        for lease in leases:
            present.add(lease.key)
            seen = self._seen.get(lease.key)
            owner = (lease.owner, lease.checkpoint_owner)
            if seen is None:
                self._seen[lease.key] = _Seen(lease.counter, now, owner)
            elif seen.counter != lease.counter:
                seen.changes = seen.changes + 1 if seen.owner == owner else 0
                seen.counter, seen.changed_at, seen.owner = lease.counter, now, owner
            elif seen.owner != owner:  # a handoff asked: the counter stays, the owners move
                seen.owner, seen.changes = owner, 0
        for key in self._seen.keys() - present:
            del self._seen[key]

    def expired(self, lease: Lease, now: float, *, after: float | None = None) -> bool:
        """Whether ``lease`` may be taken without stealing: free, or silent for too long
        (``after`` seconds, by default the failover time)."""
        if lease.owner is None:
            return True
        seen = self._seen.get(lease.key)
        if seen is None or seen.counter != lease.counter:
            return False  # not observed yet in this form: it just changed
        return now - seen.changed_at > (self.failover_time if after is None else after)

    def expires_at(self, lease: Lease) -> float | None:
        """When ``lease`` expires by this worker's history (the moment after which
        :meth:`expired` says so, unless its counter changes first); None for a free lease or
        one not observed in this form."""
        if lease.owner is None:
            return None
        seen = self._seen.get(lease.key)
        if seen is None or seen.counter != lease.counter:
            return None
        return seen.changed_at + self.failover_time

    def changes_by_same_owner(self, key: str) -> int:
        """How often the counter changed under one owner (and one ``checkpointOwner``) since
        that owner was first seen."""
        seen = self._seen.get(key)
        return 0 if seen is None else seen.changes

    def forget(self, key: str) -> None:
        """Drop what is known of ``key`` (it changed hands through us)."""
        self._seen.pop(key, None)


@dataclass(frozen=True, slots=True)
class TakePlan:
    """What one take round does: ``take`` free or expired leases, ``steal`` live ones."""

    take: tuple[Lease, ...]
    steal: tuple[Lease, ...]
    target: int
    workers: int


def plan_takes(
    leases: Sequence[Lease],
    *,
    worker_id: str,
    held: Collection[str],
    expired: Callable[[Lease], bool],
    reclaimable: Callable[[Lease], bool] | None = None,
    max_leases: int | None = None,
    max_leases_to_steal: int | None = None,
    rescue: bool = False,
    rng: random.Random | None = None,
) -> TakePlan:
    """Decide a take round from a listing of the (unfinished) leases this worker may hold.

    ``held`` are the lease keys this worker holds; ``expired`` says whether a lease is free or
    expired (see :class:`ExpiryTracker`); ``reclaimable`` whether a lease owned by our own id
    that we do not hold has stood still long enough to be taken back (see the module's doc;
    None: only once expired). Finished leases (``SHARD_END``) need no owner and are left out
    of the count and the plan. ``rescue`` (a watcher's round, see :class:`ScanSchedule`):
    take every free and expired lease, beyond the share if need be (``max_leases`` still
    caps), and steal nothing while any is left.
    """
    rng = rng or random.Random()
    live = [lease for lease in leases if not lease.finished]
    owners: Counter[str] = Counter()
    candidates: list[Lease] = []
    own: list[Lease] = []  # our id's, taken back first
    watched = 0  # our id's, not yet known to be left by an earlier run
    for lease in live:
        if lease.key in held:
            continue
        if lease.owner == worker_id:
            if expired(lease) or (reclaimable is not None and reclaimable(lease)):
                own.append(lease)
            else:
                watched += 1
        elif expired(lease):
            candidates.append(lease)
        elif lease.owner is not None:
            owners[lease.owner] += 1
    workers = len(owners) + 1
    target = math.ceil(len(live) / workers) if live else 0
    if max_leases is not None:
        target = min(target, max_leases)
    ours = sum(1 for lease in live if lease.key in held) + watched
    need = target - ours
    if rescue and (own or candidates):
        room = len(own) + len(candidates) if max_leases is None else max_leases - ours
        need = max(need, room)
    if need <= 0:
        return TakePlan((), (), target, workers)
    if own or candidates:
        rng.shuffle(own)
        rng.shuffle(candidates)
        return TakePlan(tuple((own + candidates)[:need]), (), target, workers)
    if not owners:
        return TakePlan((), (), target, workers)
    pools = {
        owner: [
            lease
            for lease in live
            if lease.owner == owner and lease.checkpoint_owner is None and not expired(lease)
        ]
        for owner in owners
    }
    for pool in pools.values():
        rng.shuffle(pool)
    limit = need if max_leases_to_steal is None else min(need, max_leases_to_steal)
    stolen: list[Lease] = []
    # One lease at a time from whoever holds the most at that point, while it holds at
    # least two more than this worker would: the shares meet in one round, and no lease
    # moves between two workers one apart.
    while len(stolen) < limit:
        most = max(owners.values())
        if most - (ours + len(stolen)) < 2:
            break
        loaded = sorted(owner for owner, count in owners.items() if count == most and pools[owner])
        if not loaded:
            break
        victim = rng.choice(loaded)
        stolen.append(pools[victim].pop())
        owners[victim] -= 1
    return TakePlan((), tuple(stolen), target, workers)


def expiry_moments(
    leases: Iterable[Lease],
    *,
    worker_id: str,
    held: Collection[str],
    expires_at: Callable[[Lease], float | None],
    after: float,
) -> list[float]:
    """When the leases other workers hold expire by this worker's history (``expires_at``,
    see :meth:`ExpiryTracker.expires_at`), in order: the moments after ``after`` (the
    listing they come from, or at it) at which a watcher takes what expired without waiting for its
    next round (see the module's doc). Leases held here, finished, free, or under our own id
    are left out - the rounds deal with those - except one whose handoff to us we asked for
    (``checkpointOwner`` set): its owner renews it, and takes it to its grave if it dies."""
    moments = []
    for lease in leases:
        if lease.finished or lease.owner is None or lease.key in held:
            continue
        if lease.owner == worker_id and lease.checkpoint_owner is None:
            continue
        moment = expires_at(lease)
        if moment is not None and moment >= after:
            moments.append(moment)
    moments.sort()
    return moments


def live_owners(leases: Iterable[Lease], expired: Callable[[Lease], bool]) -> set[str]:
    """The owners of unfinished leases that are not expired: the workers known to be alive."""
    return {
        lease.owner
        for lease in leases
        if lease.owner is not None and not lease.finished and not expired(lease)
    }


class ScanSchedule:
    """Whether a take round lists the whole table, or does without (see the module's doc).

    Every listing is told to :meth:`listed` with the live owners it showed; a round asks
    :meth:`due`. Rounds that skip the listing still follow their own leases (renewals say
    what they need of those) and hand ready leases to the reader.
    """

    def __init__(self, worker_id: str, failover_time: float) -> None:
        self.worker_id = worker_id
        self.failover_time = failover_time
        self._started_at: float | None = None  # the first listing
        self._listed_at: float | None = None
        self._watchers: tuple[str, ...] = (worker_id,)

    @property
    def watchers(self) -> tuple[str, ...]:
        """The watchers by the last listing: the :data:`WATCHERS` lowest ids among the live
        owners and this worker."""
        return self._watchers

    @property
    def watching(self) -> bool:
        """Whether this worker is a watcher by the last listing."""
        return self.worker_id in self._watchers

    def listed(self, owners: Collection[str], now: float) -> None:
        """A listing of the whole table was made at ``now``; ``owners`` are its live owners."""
        if self._started_at is None:
            self._started_at = now
        self._listed_at = now
        self._watchers = tuple(sorted({*owners, self.worker_id})[:WATCHERS])

    def due(self, now: float, *, following: bool, period: float) -> bool:
        """Whether the round at ``now`` lists the table: one in this worker's first failover
        time (from its first listing) does, and one that is ``following`` a handoff it asked
        for or a lease waiting on its parents; otherwise a watcher's every other round, and
        another worker's once its last listing is a failover time old (each less half a
        round ``period``, so that the listing falls on the nearest round rather than the one
        after)."""
        if self._listed_at is None or self._started_at is None or following:
            return True
        if now - self._started_at < self.failover_time:
            return True
        every = 2 * period if self.watching else self.failover_time
        return now - self._listed_at >= every - period / 2


def parents_finished(parent_keys: Iterable[str], by_key: Mapping[str, Lease]) -> bool:
    """Whether every parent lease (``parent_keys``, the parents' lease keys) is finished
    (``SHARD_END``) or absent from ``by_key``, a listing of the table."""
    for key in parent_keys:
        found = by_key.get(key)
        if found is not None and not found.finished:
            return False
    return True


def write_landed(held: Lease, current: Lease, owner: str | None, checkpoint: str | None) -> bool:
    """Whether ``current`` is exactly what one write of ours to ``held`` makes: the counter one
    more, the owner the write leaves (``owner``: ours for a renewal, None for a release) and
    the checkpoint it wrote (``checkpoint``, or unchanged when None).

    A write whose reply was lost may have landed, and the client's retry then fails its
    condition; this tells that case from a lease taken by another worker or edited by hand.
    (Another process renewing under our id could look the same once; it is caught by the
    counter it keeps moving, see the module doc.)
    """
    expected = held.checkpoint if checkpoint is None else checkpoint
    return (
        current.counter == held.counter + 1
        and current.owner == owner
        and current.checkpoint == expected
    )
