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
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ._items import Lease

__all__ = ["ExpiryTracker", "TakePlan", "parents_finished", "plan_takes", "write_landed"]


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
    rng: random.Random | None = None,
) -> TakePlan:
    """Decide a take round from a listing of the (unfinished) leases this worker may hold.

    ``held`` are the lease keys this worker holds; ``expired`` says whether a lease is free or
    expired (see :class:`ExpiryTracker`); ``reclaimable`` whether a lease owned by our own id
    that we do not hold has stood still long enough to be taken back (see the module's doc;
    None: only once expired). Finished leases (``SHARD_END``) need no owner and are left out
    of the count and the plan.
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
