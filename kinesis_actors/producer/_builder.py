"""What to send next: a PutRecords call built from the waiting room's lanes.

A call takes Kinesis records from the lanes whose pacing lets them send, the lane whose head
record waited longest first, round robin until the call is full: from each, a KPL aggregate
of its head domains' runs (:meth:`~._waiting.WaitingRoom.take_runs`) or one record sent as
itself. A lane's shard opens a :class:`~._ratelimit.Grant` of its tokens once per call; a
paced lane looks again on a grid of ``batch_quantum`` seconds. When a call is due at all
(a call's worth ready, or the oldest record's ``linger`` up) is decided here too.

Kept apart from the :class:`~._pipeline.Pipeline`, which owns the waiting room and the rest
of a record's life (intake, answers, retries, the time-to-live) and builds one of these on its
room: this is the one policy that reads the room, the shard limiter and the aggregation
settings together. It takes records and paces lanes through the room's methods and writes no
state of its own after it is built; the records of a call whose building raised (a bug of
ours) it gives back to the room as stranded (:meth:`~._waiting.WaitingRoom.strand`), for the
drain that fails the producer to fail. Sans-IO: the caller passes ``now``.
"""

from __future__ import annotations

import math

from ..records import Aggregator, OutboundRecord
from ._calls import Call, Part
from ._domains import Domain, Lane, key_bytes
from ._entry import Entry
from ._ratelimit import Grant, ShardRateLimiter
from ._waiting import WaitingRoom

__all__ = ["BATCH_QUANTUM", "CallBuilder"]

BATCH_QUANTUM = 0.2
"""Seconds of a paced shard's tokens one call carries: at a stream's capacity a shard gets a
call five times a second. Each call costs the process a wake-up or two and a round through
the loop, the dispatcher and the senders, which at 50 ms was most of what a record cost at
capacity beyond an unpaced run (measured: 100-byte aggregated records, 2 shards, client CPU
a record 1.6-1.8x the unpaced figure at 50 ms, about 1.2-1.3x at 200 ms). The records wait
in the queue at capacity anyway; a shard that keeps up never waits for a quantum."""

# The smallest aggregate worth building; below it a part would be mostly overhead.
_MIN_AGGREGATE_ROOM = 64


class CallBuilder:
    """Builds a pipeline's calls from its waiting room, under its shards' pacing.

    ``full_records``/``full_bytes``: once this much is ready, a call goes without waiting for
    ``linger``. ``max_call_bytes`` must hold the largest valid record.
    """

    def __init__(
        self,
        room: WaitingRoom,
        limiter: ShardRateLimiter,
        *,
        aggregation: bool,
        aggregation_max_bytes: int,
        max_call_records: int,
        max_call_bytes: int,
        full_records: int,
        full_bytes: int,
        linger: float,
        batch_quantum: float = BATCH_QUANTUM,
    ) -> None:
        self._room = room
        self._limiter = limiter
        self._aggregation = aggregation
        self._aggregation_max_bytes = aggregation_max_bytes
        self._max_call_records = max_call_records
        self._max_call_bytes = max_call_bytes
        self._full_records = full_records
        self._full_bytes = full_bytes
        self._linger = linger
        self._batch_quantum = batch_quantum

    @property
    def linger(self) -> float:
        """How long a ready record may wait for company before a call goes anyway."""
        return self._linger

    def _due(self, now: float) -> bool:
        room = self._room
        if room.ready_records >= self._full_records:
            return True
        if room.ready_bytes >= self._full_bytes:
            if not self._aggregation:
                return True
            # A call takes an aggregate from each of at most max_call_records lanes a round:
            # over more lanes than that, what is ready fills it only in their proportion.
            # Going at the byte mark over 2,048 lanes sent aggregates of 66 records where
            # waiting for a call's worth makes them 131 (benchmarks.producer_cpu,
            # unpaced-1024-deep; the CPU a record follows the aggregates' count).
            lanes = room.ready_lanes()
            if room.ready_bytes * self._max_call_records >= self._full_bytes * lanes:
                return True
        oldest = room.oldest_ready()
        return oldest is not None and now >= oldest + self._linger

    def build(self, now: float, *, force: bool = False) -> Call | None:
        """The next call, or ``None`` if none should go yet (``force``: ignore ``linger``)."""
        room = self._room
        if room.ready_records == 0 or not (force or self._due(now)):
            return None
        if room.sendable_at() > now:
            return None  # every lane with ready records is paced: no pass over them
        parts: list[Part | Entry] = []
        nbytes = 0
        grants: dict[str, Grant] = {}
        # Lanes whose head record waited longest go first: they meet a shard's tokens first.
        # In dict order, the first half of a saturated shard always took the quantum's
        # tokens before the other: it ran dry and sent each record as it came, a domain and
        # an aggregate entry per record (measured: 115 keys per aggregate against 24 this way,
        # and half the build stage's CPU), while the other held the queue's whole backlog.
        # Oldest first, both halves wait alike and keep runs of several records per key; at
        # many shards, the lanes a call of 500 Kinesis records has no room for come next.
        try:
            lanes = room.open_lanes(now)
            while lanes and len(parts) < self._max_call_records:
                still = []
                for lane in lanes:
                    if len(parts) >= self._max_call_records:
                        break
                    part = self._build_part(lane, now, self._max_call_bytes - nbytes, grants)
                    if part is not None:
                        parts.append(part)
                        nbytes += part.size
                        still.append(lane)
                lanes = still
            charge_grant = self._limiter.charge_grant
            for grant in grants.values():
                charge_grant(grant, now)
            return Call(parts, nbytes) if parts else None
        except BaseException:
            for built in parts:
                room.strand(built.entries)
            raise

    def _build_part(
        self, lane: Lane, now: float, room: int, grants: dict[str, Grant]
    ) -> Part | Entry | None:
        """One Kinesis record from the lane, or ``None`` (and maybe a ``resume_at``).

        The lane's first record in this call opens its :class:`~._ratelimit.Grant`, the
        shard's tokens at ``now``, which its next records of the call spend; the buckets are
        charged once per call. A paced lane opens only on a grid of ``batch_quantum``
        seconds (multiples of it on the caller's clock), once its shard has earned half a
        quantum of tokens or more (see :meth:`_resume_at`): a saturated shard then gets one
        well-filled call per quantum instead of a call per trickle of tokens (measured: 4-7
        records per call and a whole core at capacity, before the quantum).
        """
        waiting = self._room
        head = waiting.head(lane)
        if head is None:
            return None
        first = head if type(head) is Entry else head.entries[0]
        shard_id = lane.shard_id
        limiter = self._limiter
        grant = grants.get(shard_id)
        if grant is None:
            opened = limiter.open(shard_id, first.size, self._batch_quantum / 2, now)
            if not isinstance(opened, Grant):
                waiting.pace(lane, self._resume_at(now + opened))
                return None
            grant = grants[shard_id] = opened
        elif not grant.allows(first.size):
            # Out of tokens: the buckets, charged, say exactly how long to wait.
            limiter.charge_grant(grant, now)
            delay = limiter.delay(shard_id, 1, first.size, now)
            if delay > 0:
                waiting.pace(lane, self._resume_at(now + delay))
                return None
            grant = grants[shard_id] = limiter.grant(shard_id, now)
        if first.size > room:
            return None
        # A record of over half an aggregate gains nothing from company (measured: 10 KiB
        # records averaged 3.9 per aggregate, at a higher CPU cost than sending them alone).
        if not self._aggregation or first.size * 2 > self._aggregation_max_bytes:
            return self._single(lane, head, grant)
        key_bytes = first.size - len(first.data)  # the aggregate travels under this key
        available = int(grant.nbytes)
        cap = min(self._aggregation_max_bytes, room, available) - key_bytes
        if cap < _MIN_AGGREGATE_ROOM or cap < len(first.data):
            return self._single(lane, head, grant)
        aggregator = Aggregator(cap)
        taken, runs = waiting.take_runs(lane, aggregator)
        if not taken:
            return None
        try:
            if len(taken) == 1:  # an aggregator of one would send the record as itself
                return self._sent_alone(lane, taken[0], runs[0], grant)
            return self._part(lane, aggregator.build(), taken, runs, grant)
        except BaseException:
            waiting.strand(taken)
            raise

    def _resume_at(self, earliest: float) -> float:
        """When a paced lane looks again: the first point of the quantum's grid from
        ``earliest`` on.

        The grid, not ``earliest`` itself: a lane that opened a quantum after it last spent
        its tokens, late by the loop's latency, went on a period of a quantum plus that
        latency, and its calls drifted across the seconds; a second then held one call less
        (a 50 ms quantum: 95-97 % of the shard's limit in its lowest second, measured). On
        the grid the calls keep their spacing, each carrying the tokens of the quantum before
        it, and a quantum that divides a second puts as many in every second. Half a
        quantum earned is enough to open (what a lane has when it looks a little after the
        point where it spent its tokens), so it opens on every point, not every other.
        """
        quantum = self._batch_quantum
        return max(earliest, math.ceil(earliest / quantum) * quantum)

    def _single(self, lane: Lane, domain: Domain | Entry, grant: Grant) -> Part | Entry:
        """The domain's first record sent as itself, its own part (see :class:`~._entry.Entry`):
        its size is the entry's (data plus key), with no key to measure again."""
        return self._sent_alone(lane, self._room.take_one(lane, domain), domain, grant)

    def _part(
        self,
        lane: Lane,
        record: OutboundRecord,
        entries: list[Entry],
        runs: list[Domain | Entry],
        grant: Grant,
    ) -> Part:
        data, partition_key = record.data, record.partition_key
        size = len(data) + key_bytes(partition_key)
        # Always spent: if a bucket runs short mid-call (the record bucket, or a record
        # bigger than the byte tokens left), it goes into debt and the lane waits it out.
        grant.spend(size)
        return Part(
            data, partition_key, record.explicit_hash_key, lane.shard_id, entries, size, runs
        )

    @staticmethod
    def _sent_alone(lane: Lane, entry: Entry, domain: Domain | Entry, grant: Grant) -> Part | Entry:
        grant.spend(entry.size)
        # A pinned domain's record travels under the domain's hash key, not its own: a part
        # of one. (A lone record's key is never pinned.)
        if type(domain) is Domain and domain.pinned:
            return Part(
                entry.data,
                entry.partition_key,
                domain.explicit_hash_key,
                lane.shard_id,
                [entry],
                entry.size,
                [domain],
            )
        entry.lane = lane.shard_id
        return entry
