"""The producer's sans-IO core: from accepted records to PutRecords calls and back.

Records wait in *ordering domains*, one per ``(partition_key, explicit_hash_key)`` (a key's
only record waits as itself, with no domain, until the key needs one); domains wait in
*lanes*, one per predicted shard (one lane, ``"*"``, for streams whose records the service
places itself). A PutRecords call is built by taking Kinesis records from the lanes round
robin; each Kinesis record is a KPL aggregate of records predicted for its lane (a reader
may drop records of keys its shard does not own), or one plain record. Each lane is paced by
its shard's token buckets.

With ``preserve_order`` a domain has at most one Kinesis record in flight: its next records
wait until that one is acknowledged. A failed record goes back to the front of its domain,
which then waits out a jittered backoff, so a retry is never overtaken by a later record of
its key. Every record leaves through ``settle`` exactly once, acknowledged or failed with a
typed error.

Across a reshard: an aggregate holds records of one half of its shard's hash
range, so a split at the midpoint leaves every aggregate in flight whole on one child; an
acknowledgement from another shard than predicted turns the lane stale at once, and until a
listing shows the new shards its Kinesis records hold one key each, which land on the shard
that owns the key whatever the split. Aggregates already in flight across a split elsewhere
may put keys on the wrong child: those records are counted, once a map says who owns them
(``misplaced_records``). See ``docs/producer.md``, "Resharding and key order".

Where records wait (domains, lanes, their states, the backoff heap) is the
:class:`~._waiting.WaitingRoom` this class owns and changes only through its methods; what to
send next (aggregates, pacing, linger) is its :class:`~._builder.CallBuilder`'s, which takes
from that room on this class's behalf (one caller drives both); here is what came back
(acknowledgements, failures, retries), the time-to-live and when to look again.

Nothing here awaits or reads a clock: the caller passes ``now`` and asks
:meth:`Pipeline.next_wakeup` when to come back.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from .. import errors
from ..records import ShardMap, deaggregate_into
from ._builder import BATCH_QUANTUM, CallBuilder
from ._calls import Call, Part
from ._domains import DomainKey, domain_key
from ._entry import Entry
from ._handle import PutResult
from ._lanes import UNPREDICTED_LANE, WHOLE_STREAM_LANE
from ._ratelimit import ShardRateLimiter
from ._retries import RecordRetries
from ._waiting import WaitingRoom

__all__ = [
    "UNPREDICTED_LANE",
    "WHOLE_STREAM_LANE",
    "Acknowledge",
    "Call",
    "Entry",
    "Part",
    "Pipeline",
    "Settle",
]

# Deadline sweeps run when the earliest waiting record expires, but at most every
# max(_SWEEP_FLOOR, ttl * _SWEEP_SHARE): a record may outlive ``record_ttl`` by that much
# (1 % of it) before it is failed, never sent again. Each sweep visits every domain, so the
# bound also caps their cost when records expire all the time (a stalled stream).
_SWEEP_FLOOR = 0.005
_SWEEP_SHARE = 0.01

Settle = Callable[["Entry", PutResult | None, BaseException | None], None]
#: ``acknowledge(parts, shard_ids, sequence_numbers)``: a call's Kinesis records that were
#: written, in three columns (a part's user records are in sub-sequence order). One call per
#: PutRecords answer, not per record (measured: a call per Kinesis record cost ~4 % of a
#: non-aggregated put), and no tuple per record: held until the answer is settled, those were
#: what young collections caught.
Acknowledge = Callable[[list["Part | Entry"], list[str], list[str]], None]


def _unbelievable(result: object) -> errors.MalformedReplyError:
    """A PutRecords result with neither a position nor an error: its outcome is unknown."""
    return errors.MalformedReplyError(
        f"a PutRecords result with neither a position nor an error: {result!r:.99}",
        operation="PutRecords",
    )


class Pipeline:
    """Holds every accepted, unsettled record that is not in flight (in its waiting room),
    and applies what came back; its :class:`~._builder.CallBuilder` decides what to send.

    ``full_records``/``full_bytes``, ``linger``, ``max_call_records``/``max_call_bytes`` and
    the aggregation settings are the builder's (see there); ``max_call_bytes`` must hold the
    largest valid record.
    """

    def __init__(
        self,
        *,
        limiter: ShardRateLimiter,
        settle: Settle,
        acknowledge: Acknowledge | None = None,
        aggregation: bool,
        aggregation_max_bytes: int,
        max_call_records: int,
        max_call_bytes: int,
        full_records: int,
        full_bytes: int,
        linger: float,
        preserve_order: bool,
        retry_base: float,
        retry_max: float,
        record_ttl: float | None,
        max_unknown_outcomes: int = 3,
        batch_quantum: float = BATCH_QUANTUM,
        rng: random.Random | None = None,
    ) -> None:
        self._limiter = limiter
        self._settle = settle
        self._acknowledge = acknowledge
        self._retries = RecordRetries(
            retry_base=retry_base,
            retry_max=retry_max,
            record_ttl=record_ttl,
            max_unknown_outcomes=max_unknown_outcomes,
            rng=rng,
        )
        self._ttl = record_ttl
        self._room = WaitingRoom(preserve_order=preserve_order)
        self._builder = CallBuilder(
            self._room,
            limiter,
            aggregation=aggregation,
            aggregation_max_bytes=aggregation_max_bytes,
            max_call_records=max_call_records,
            max_call_bytes=max_call_bytes,
            full_records=full_records,
            full_bytes=full_bytes,
            linger=linger,
            batch_quantum=batch_quantum,
        )
        self._next_sweep = 0.0
        # Set by drain(): every record that would wait here again fails with it instead.
        self._drained: BaseException | None = None
        self.mispredicted = 0
        # Aggregates of several hash keys acknowledged on another shard than predicted, as
        # (that shard, their records' hash keys), until a map says whether that shard owns
        # them. Bounded: a lane is stale from its first such answer, and a stale lane builds
        # no aggregate of several hash keys, so these are aggregates that were in flight then.
        self._landed_elsewhere: list[tuple[str, list[int]]] = []
        self.misplaced_records = 0
        self.misplaced_keys = 0
        self.pins_refused = 0
        self.kinesis_records_sent = 0
        self.bytes_sent = 0
        self.retries = 0
        self.throttled = 0

    # -- the waiting room's counts, read-only -----------------------------------------------

    @property
    def ready_records(self) -> int:
        """Records that could be sent now (not in flight, not backing off)."""
        return self._room.ready_records

    @property
    def ready_bytes(self) -> int:
        """The bytes of :attr:`ready_records`."""
        return self._room.ready_bytes

    @property
    def pending_records(self) -> int:
        """Every record waiting here (ready, behind its key's record in flight, backing off)."""
        return self._room.pending_records

    @property
    def needs_refresh(self) -> bool:
        """A record had no predicted shard, or landed on another: the map is out of date."""
        return self._room.needs_refresh

    @property
    def shard_map(self) -> ShardMap | None:
        """The map records are predicted with; ``None`` means one lane for the whole stream."""
        return self._room.shard_map

    @property
    def pinned_keys(self) -> int:
        """Keys pinned now (see :meth:`~._waiting.WaitingRoom.pin`)."""
        return self._room.pinned_keys

    def set_shard_map(self, shard_map: ShardMap | None) -> list[str]:
        """Predict with ``shard_map`` from now on; the pacing of shards gone is forgotten.

        Aggregates that landed on another shard than predicted are checked against it first:
        their user records on a shard that does not own their hash key are counted in
        ``misplaced_records`` (and their keys in ``misplaced_keys``).
        """
        if self._landed_elsewhere:
            self._count_misplaced(shard_map)
        gone = self._room.set_shard_map(shard_map)
        for shard_id in gone:
            self._limiter.forget(shard_id)
        return gone

    def _count_misplaced(self, shard_map: ShardMap | None) -> None:
        """User records of aggregates acknowledged on a shard that does not own their hash
        key: an aggregate in flight when its shard split, the split's point inside it (see
        ``docs/producer.md``, "Resharding and key order"). Those keys have records in both
        children, which readers of the children may deliver out of order. A shard the map no
        longer lists (closed again) cannot be checked: not counted."""
        landed, self._landed_elsewhere = self._landed_elsewhere, []
        if shard_map is None:
            return
        ranges = {found.shard_id: found for found in shard_map}
        keys: set[int] = set()
        for shard_id, hash_keys in landed:
            found = ranges.get(shard_id)
            if found is None:
                continue
            strays = [key for key in hash_keys if key not in found]
            self.misplaced_records += len(strays)
            keys.update(strays)
        self.misplaced_keys += len(keys)

    # -- intake -------------------------------------------------------------------------------

    def add(self, entry: Entry) -> None:
        """Queue one accepted record, stamped with its own ``enqueued``: :meth:`add_many` of one."""
        self.add_many((entry,), entry.enqueued)

    def add_many(self, entries: Sequence[Entry], now: float) -> None:
        """Queue accepted records in their domains, stamped ``enqueued = now`` (the
        dispatcher's intake: one call per look into the queue, not one per record)."""
        try:
            count = self._room.place_many(entries, now)
        except BaseException:
            self._room.strand(entries)  # some may be placed: drain fails each once
            raise
        ttl = self._ttl
        if count and ttl is not None and now + ttl < self._next_sweep:
            self._next_sweep = now + ttl  # the sweep that fails them if they wait

    # -- building calls -----------------------------------------------------------------------

    def next_call(self, now: float, *, force: bool = False) -> Call | None:
        """The next PutRecords call to send, or ``None`` if nothing should go yet.

        ``force`` (flush, close) ignores ``linger``; rate limits and ordering still hold.
        """
        self._room.release_due(now)
        self._sweep(now)
        return self._builder.build(now, force=force)

    # -- outcomes -----------------------------------------------------------------------------

    def complete(self, call: Call, results: list[dict[str, Any]], now: float) -> None:
        """Apply a PutRecords response: settle what succeeded, requeue or fail the rest."""
        if len(results) != len(call.parts):
            mismatch = errors.MalformedReplyError(
                f"PutRecords answered {len(results)} results for {len(call.parts)} records",
                operation="PutRecords",
            )
            self.unknown(call, mismatch, now)
            return
        written: list[Part | Entry] = []
        shard_ids: list[str] = []
        sequence_numbers: list[str] = []
        # Successes per lane, [records, bytes], given to the pacing once per lane and answer
        # (before a throttle of that lane, to keep their order: recovery is additive, so that
        # is the same).
        succeeded: dict[str, list[int]] = {}
        mapped = self._room.shard_map is not None
        nbytes = 0
        release = self._room.release
        for part, result in zip(call.parts, results, strict=True):
            if not isinstance(result, dict):
                self._failed(part, _unbelievable(result), now, succeeded, unknown=True)
                continue
            code = result.get("ErrorCode")
            if code is None:
                shard_id, sequence_number = result.get("ShardId"), result.get("SequenceNumber")
                if isinstance(shard_id, str) and isinstance(sequence_number, str):
                    # Acknowledged: settled with the answer's others after the loop.
                    lane = part.lane
                    if mapped and shard_id != lane:
                        self._mispredicted(part, shard_id)
                    counts = succeeded.get(lane)
                    if counts is None:
                        succeeded[lane] = [1, part.size]
                    else:
                        counts[0] += 1
                        counts[1] += part.size
                    nbytes += part.size
                    written.append(part)
                    shard_ids.append(shard_id)
                    sequence_numbers.append(sequence_number)
                    release(part)
                else:
                    self._failed(part, _unbelievable(result), now, succeeded, unknown=True)
            else:
                error = errors.error_from_code(
                    str(code), result.get("ErrorMessage") or "", operation="PutRecords"
                )
                self._failed(part, error, now, succeeded)
        on_success = self._limiter.on_success
        for lane, (records, lane_bytes) in succeeded.items():
            on_success(lane, records, now, lane_bytes)
        self.kinesis_records_sent += len(written)
        self.bytes_sent += nbytes
        if written:
            if self._acknowledge is not None:
                self._acknowledge(written, shard_ids, sequence_numbers)
            else:
                settle = self._settle
                for part, shard_id, sequence_number in zip(
                    written, shard_ids, sequence_numbers, strict=True
                ):
                    for index, entry in enumerate(part.entries):
                        settle(entry, PutResult(shard_id, sequence_number, index), None)

    def _mispredicted(self, part: Part | Entry, shard_id: str) -> None:
        """``part``, predicted for its lane's shard, was written to ``shard_id``: that shard
        was split or merged. Its lanes turn stale at once (not at the next listing, up to
        ``shard_map_min_refresh_interval`` away). An aggregate of several hash keys landed
        whole by its explicit hash key, maybe with records of keys that shard does not own:
        those keys are pinned to that hash key at once, before their next records are built
        (with ``preserve_order`` none is in flight), and the aggregate is kept to be checked
        against the next map.

        The hash key each record carried is read from the aggregate itself, and the keys to
        pin from its records, not from the domains the part names: without
        ``preserve_order`` a domain whose run went out may fall idle, be pruned and be made
        new for another key before this answer (a test pins the keys that were misplaced,
        not that other key)."""
        self.mispredicted += 1
        self._room.mark_stale(part.lane)
        # A part of one record is a pinned key's record sent alone (its data the user's,
        # which may itself look like an aggregate): nothing else in it to place. Aggregates
        # built here hold two records or more.
        if isinstance(part, Part) and part.explicit_hash_key is not None and len(part.entries) > 1:
            partition_keys: list[str] = []
            carried: list[str | None] = []
            if deaggregate_into(part.data, partition_keys, carried, []) != len(part.entries):
                raise AssertionError("an aggregate built here does not hold its records")
            hash_keys = [
                entry.hash_key if by is None else int(by)
                for entry, by in zip(part.entries, carried, strict=True)
            ]
            if hash_keys.count(hash_keys[0]) != len(hash_keys):
                self._landed_elsewhere.append((shard_id, hash_keys))
                self.pins_refused += self._room.pin(part.entries, int(part.explicit_hash_key))

    def fail(self, call: Call, error: BaseException, now: float) -> None:
        """The whole call failed with ``error``: not written, unless ``error`` says it may be.

        A :class:`~kinesis_actors.errors.MalformedReplyError` (a 2xx reply that cannot be
        believed) is an unknown outcome, handled as in :meth:`unknown`.
        """
        unknown = isinstance(error, errors.MalformedReplyError)
        for part in call.parts:
            self._failed(part, error, now, unknown=unknown)

    def unknown(self, call: Call, error: BaseException, now: float) -> None:
        """The call's records may or may not have been written: send them again, bounded."""
        for part in call.parts:
            self._failed(part, error, now, unknown=True)

    def _failed(
        self,
        part: Part | Entry,
        error: BaseException,
        now: float,
        succeeded: dict[str, list[int]] | None = None,
        *,
        unknown: bool = False,
    ) -> None:
        """One Kinesis record of a call failed, or its outcome is ``unknown``.

        A throttle of the whole call reaches the pacing of every shard in it, exactly like a
        throttle of each record would. ``succeeded``: the answer's successes not
        yet given to the pacing, per lane; a throttle of a lane gives them first.
        """
        if isinstance(error, errors.ThrottlingError):
            self.throttled += 1
            if part.lane != UNPREDICTED_LANE:
                if succeeded:
                    counts = succeeded.pop(part.lane, None)
                    if counts is not None:
                        self._limiter.on_success(part.lane, counts[0], now, counts[1])
                self._limiter.on_throttled(part.lane, now)
        after_failure = self._retries.after_failure
        again: list[Entry] = []
        for entry in part.entries:
            final = after_failure(entry, error, now, unknown=unknown)
            if final is None:
                again.append(entry)
            else:
                self._settle(entry, None, final)
        self._requeue(again, now)
        self._room.release(part)

    def _requeue(self, entries: list[Entry], now: float) -> None:
        """Put failed records back at the front of their domains, which then back off.

        After :meth:`drain` nothing here will be sent again: an answer that lands then (an
        abort cancels the calls in flight, but a sender whose answer had already arrived
        still reports it) fails its records with the drain's error instead.
        """
        if self._drained is not None:
            for entry in entries:
                self._settle(entry, None, self._drained)
            return
        by_key: dict[DomainKey, list[Entry]] = {}
        for entry in entries:
            by_key.setdefault(domain_key(entry.partition_key, entry.explicit_hash_key), []).append(
                entry
            )
        requeue, backoff_until = self._room.requeue, self._retries.backoff_until
        for key, group in by_key.items():
            self.retries += len(group)
            requeue(key, group, backoff_until(max(entry.attempts for entry in group), now))
            if self._ttl is not None:  # the sweep, not the backoff, ends a record at its deadline
                deadline = min(entry.enqueued for entry in group) + self._ttl
                self._next_sweep = min(self._next_sweep, deadline)

    # -- time-to-live -------------------------------------------------------------------------

    def _sweep(self, now: float) -> None:
        """Fail the records that outlived ``record_ttl`` while waiting (not those in flight).

        Runs when the earliest waiting record's deadline comes (the dispatcher wakes for it),
        so a record backing off is failed at its deadline, not after its backoff, and never
        sent after it. A domain's front record is its oldest (retries go back to the front,
        oldest first: see :meth:`_requeue`).
        """
        ttl = self._ttl
        if ttl is None or now < self._next_sweep:
            return
        gone, earliest = self._room.expire(now, self._retries.expired)
        expired_error, settle = self._retries.expired_error, self._settle
        for entry in gone:
            settle(entry, None, expired_error(entry))
        self._next_sweep = max(earliest + ttl, now + max(_SWEEP_FLOOR, ttl * _SWEEP_SHARE))

    # -- scheduling and shutdown ----------------------------------------------------------------

    def paced_shards(self, now: float) -> int:
        """How many shards have ready records held back at ``now`` only because the shard's
        pacing (its token buckets) has no room yet: the producer keeping to the stream's
        limits. A shard may have several lanes; it counts once."""
        return self._room.paced_shards(now)

    def next_wakeup(self, now: float, *, force: bool = False) -> float | None:
        """The next moment something may become sendable without any new event, if any."""
        room = self._room
        candidates = []
        if room.ready_records:
            oldest = room.oldest_ready()
            if oldest is not None and not force:
                candidates.append(oldest + self._builder.linger)
            # The first paced lane to open; when one may send now (so this is past), a call
            # goes at the linger above or when a sender is free, and its building paces the
            # rest anew.
            candidates.append(room.sendable_at())
        backoff_end = room.first_backoff_end()
        if backoff_end is not None:
            candidates.append(backoff_end)
        if self._ttl is not None and room.pending_records and math.isfinite(self._next_sweep):
            candidates.append(self._next_sweep)
        later = [t for t in candidates if now < t < math.inf]
        return min(later) if later else None

    def strand(self, call: Call) -> None:
        """A built call that never reached a sender (its hand-out raised): its records are
        the drain's to fail, as the room's stranded ones."""
        for part in call.parts:
            self._room.strand(part.entries)

    def drain(self, error: BaseException) -> int:
        """Fail every record still waiting here with ``error`` (a cancelled close), and every
        record that an answer landing later would put back (see :meth:`_requeue`)."""
        self._drained = error
        gone = self._room.drain()
        settle = self._settle
        for entry in gone:
            settle(entry, None, error)
        return len(gone)

    def abandon(self, call: Call, error: BaseException) -> None:
        """A call whose outcome will never be known (its sender was cancelled): fail it all.

        Its keys are released as an answer would release them, so with ``preserve_order``
        their next records may go; after :meth:`drain` there is nothing left to release.
        """
        for part in call.parts:
            for entry in part.entries:
                self._settle(entry, None, error)
            if self._drained is None:
                self._room.release(part)
