"""Where accepted records wait in the producer: ordering domains in lanes, one lane per shard.

Records wait in *ordering domains*, one per ``(partition_key, explicit_hash_key)``; domains
wait in *lanes*, one per predicted shard (one lane, ``"*"``, for streams whose records the
service places itself), each lane a queue of its ready domains. A predicted shard has two
lanes, one per half of its hash range, and an aggregate is built from one lane, so it never
holds records from both sides of its shard's midpoint: a split there (SplitShard's usual
point, and UpdateShardCount's when it doubles) puts every aggregate in flight across it
whole into the child that owns all its keys (see ``docs/producer.md``, "Resharding and key
order"). A lane whose shard is found gone is *stale* (and the unpredicted lane always is):
it builds Kinesis records of one domain each, until the map is current. An aggregate already
in flight across a split elsewhere than the midpoint can still land records of a key on the
child that does not own it: that key's domain is then *pinned* (:meth:`WaitingRoom.pin`) to
the hash key the aggregate landed by, so its later records follow those to the same shard
(and, through later reshards, to that hash key's owners) and never sit in both siblings; a
map on which one shard owns both the pin and the key's own hash key lifts it. A key's only
record (keys that never repeat, UUIDs) waits *lone*, as itself in its lane's queue, with no
domain: a key gets a domain (:meth:`WaitingRoom._promote`) when a second record of it comes
while the first waits or is in flight, when the first fails and goes again, or when it is
pinned; with ``preserve_order`` a lone record in flight keeps its key's place until its
answer. A domain is idle, ready, in flight (with ``preserve_order``, at most one Kinesis
record of it at a time) or waiting out a backoff; this keeps those states, the counts of
ready records and bytes and of waiting records, and the heap of backoffs. Records are placed
here (:meth:`WaitingRoom.place_many`), taken out to be sent, a lane's head record alone or
its domains' runs into an aggregate (:meth:`WaitingRoom.take_runs`), put back to back off
(:meth:`WaitingRoom.requeue`), expired (:meth:`WaitingRoom.expire`) or drained. Which lane a
hash key waits in (the shard map's halves, stale shards, pins) is its
:class:`~._lanes.LaneMap`'s. What to send and when (pacing, linger, call limits) is the
:class:`~._builder.CallBuilder`'s, and retries and the time-to-live the
:class:`~._pipeline.Pipeline`'s, which owns a waiting room; both change its state only
through these methods. Sans-IO: nothing here awaits or reads a clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from ..records import Aggregator, ShardMap
from ._calls import Part
from ._domains import IDLE, IN_FLIGHT, READY, WAITING, Domain, DomainKey, Lane
from ._entry import Entry
from ._lanes import LaneMap

__all__ = ["WaitingRoom"]

IDLE_DOMAINS = 4096
"""Idle domains kept for their keys' next records before they are pruned."""

_data = attrgetter("data")  # C callables, mapped over a run of entries
_size = attrgetter("size")
_enqueued = attrgetter("enqueued")
_oldest = attrgetter("oldest")

_SWEEP_LEFT = 64
"""Places left in a lane's queue by lone records before the lane may be swept of them (see
:meth:`WaitingRoom._left`): fewer are dropped at the head for free."""

_RUN_SLICE = 512
"""The most records of one domain handed to an aggregate at once: more than a 51,200-byte
aggregate holds of 100-byte records, and a bound on what a hot key's backlog costs a call."""


def _move(entries: list[Entry], count: int, taken: list[Entry]) -> int:
    """The first ``count`` of a domain's entries onto ``taken``: their bytes."""
    moved = entries[:count]
    del entries[:count]
    taken += moved
    return sum(map(_size, moved))


class WaitingRoom:
    """Accepted records not in flight, by domain and lane; ``ready_records``/``ready_bytes``
    count what can be sent now, ``pending_records`` everything waiting here. Every field
    here, and those of its domains and lanes (but a lane's ``stale``, its lane map's), is
    written by this class alone."""

    def __init__(self, *, preserve_order: bool) -> None:
        self._preserve_order = preserve_order
        # The map's lanes, stale shards and pinned keys (see ``_lanes``). Its pins (a
        # read-only view: the lane map alone writes it) and its lane lookup are kept at hand
        # for place_many and new_domain, which run for every new key (measured: 6 % of a new
        # key's pipeline CPU through the lane map's property and attribute).
        self._lanes = LaneMap()
        self._pins = self._lanes.pins
        self._lane = self._lanes.lane
        # Domains are kept when they fall idle (a key's next record reuses its domain, lane
        # lookup and list: measured, one new domain per two records with 1,000 keys) until
        # there are _prune_at of them; then every idle empty one goes (to the spares below),
        # and the next prune waits for twice as many as are left. So bounded, with the
        # spares, by 2 x max(IDLE_DOMAINS, 2 x active).
        self._domains: dict[DomainKey, Domain] = {}
        # Keys with one record and no domain (see _promote): the record itself while it is
        # ready in its lane, its hash key while it is in flight (with preserve_order; without,
        # a key leaves here when its record is taken). Bounded by the queue, like the records.
        self._lone: dict[str, Entry | int] = {}
        self._prune_at = IDLE_DOMAINS
        # Pruned domains, made new for the next keys (no more than _prune_at): with keys that
        # come a few times each every key needs a domain, and allocating them was what
        # made the collector run (measured: 2.1 us a record of put_many, mostly full
        # collections, against 0.02 with 1,000 keys).
        self._spare_domains: list[Domain] = []
        # Bounded by the domains: one entry per backoff started, popped when it ends.
        self._waiting: list[tuple[float, int, DomainKey]] = []
        self._waiting_seq = 0
        # The lanes at a glance, from one pass over them (:meth:`_summarize`): when the oldest
        # head record was accepted and when the first lane with ready records may send (its
        # ``resume_at``), inf for none, and how many lanes have ready records. Kept while
        # records only arrive (place_many folds them in), dropped (None) by whatever takes,
        # moves or reorders ready records, so a look that sends nothing costs no pass over
        # every lane: at 1,024 shards two such passes a look were what grew with the shard
        # count (measured in benchmarks.producer_cpu).
        self._summary: tuple[float, float, int] | None = None
        # Records a step raised while holding (a bug of ours: see strand()), for drain().
        self._stranded: list[Entry] = []
        self.ready_records = 0
        self.ready_bytes = 0
        self.pending_records = 0

    # -- shard map ----------------------------------------------------------------------------

    @property
    def shard_map(self) -> ShardMap | None:
        """The map records are predicted with; ``None`` means one lane for the whole stream."""
        return self._lanes.shard_map

    @property
    def needs_refresh(self) -> bool:
        """A record's hash key had no lane of the map, or a shard was found gone."""
        return self._lanes.needs_refresh

    def set_shard_map(self, shard_map: ShardMap | None) -> list[str]:
        """Predict with ``shard_map`` from now on: every waiting domain moves to its new lane.

        Returns the shards whose lanes are gone (their pacing can be forgotten).
        """
        self._summary = None
        lanes = self._lanes
        old, lifted = lanes.reset(shard_map)
        for pinned, own in lifted:
            domain = self._domains.get(pinned)
            if domain is not None:  # sends under the key's own hash key again
                domain.hash_key = own
                domain.explicit_hash_key = None if isinstance(pinned, str) else pinned[1]
                domain.pinned = False
        for domain in self._domains.values():
            domain.lane = lanes.lane(domain.hash_key)
            domain.queued = False
        for domain in self._domains.values():
            if domain.state == READY:
                domain.lane.ready.append(domain)
                domain.queued = True
        for held in self._lone.values():
            if type(held) is Entry:
                lane = held.lone_lane = lanes.lane(held.hash_key)
                lane.ready.append(held)
        for lane_key, lane in old.items():
            kept = lanes.get(lane_key)
            if kept is not None:
                kept.resume_at = lane.resume_at
        live = {lane.shard_id for lane in lanes.lanes()}
        gone = (lane.shard_id for lane in old.values() if lane.shard_id not in live)
        return list(dict.fromkeys(gone))  # a shard's two halves, once

    @property
    def pinned_keys(self) -> int:
        """Keys pinned now (see :meth:`pin`)."""
        return len(self._lanes.pins)

    def pin(self, entries: Iterable[Entry], hash_key: int) -> int:
        """``entries`` were records of a Kinesis record that landed by ``hash_key`` on a shard
        that may not own theirs: each key whose domain sends elsewhere now sends to
        ``hash_key`` too, so its next records go where those went (a key with no domain gets
        one, pinned). Returns how many keys could not be pinned (past
        :data:`~._lanes.MAX_PINS`)."""
        pin = self._lanes.pin
        refused = 0
        seen: set[DomainKey] = set()
        for entry in entries:
            ehk = entry.explicit_hash_key
            key = entry.partition_key if ehk is None else (entry.partition_key, ehk)
            if key in seen:
                continue
            seen.add(key)
            domain = self._domains.get(key)
            if domain is None:
                if entry.hash_key == hash_key:
                    continue  # its own hash key: where its next records go anyway
                domain = (
                    self._promote(key)
                    if isinstance(key, str) and key in self._lone
                    else self.new_domain(key, entry.hash_key)
                )
            if domain.hash_key == hash_key:
                continue
            if not pin(key, hash_key, entry.hash_key):  # an entry's hash key is its key's own
                refused += 1
                continue
            self._follow(domain, hash_key)
        return refused

    def _follow(self, domain: Domain, hash_key: int) -> None:
        """Point ``domain`` at ``hash_key``: its Kinesis records carry it, and its lane is
        that hash key's (a queue entry in its old lane is dropped as stale)."""
        self._pin(domain, hash_key)
        lane = self._lanes.lane(hash_key)
        if lane is domain.lane:
            return
        self._summary = None
        domain.lane = lane
        domain.queued = False
        if domain.state == READY:
            domain.queued = True
            lane.ready.append(domain)

    def mark_stale(self, shard_id: str) -> None:
        """``shard_id`` is gone (a record predicted for it landed elsewhere): until the next
        map, its lanes build Kinesis records of one domain each (see the module's header),
        and the map needs a refresh."""
        self._lanes.mark_stale(shard_id)

    # -- records in and out -------------------------------------------------------------------

    def place_many(self, entries: Iterable[Entry], now: float) -> int:
        """Put accepted records at the back of their domains (a key's only record at the back
        of its lane, as itself), each stamped ``enqueued = now``; how many there were."""
        domains, lone, pins = self._domains, self._lone, self._pins
        new_domain, lane_of = self.new_domain, self._lane
        count = ready_records = ready_bytes = 0
        sendable_at = math.inf  # the earliest resume_at of a lane that gained a ready domain
        new_lanes = 0  # lanes that had no domain queued (an undercount if one held stale ones)
        for entry in entries:
            entry.enqueued = now
            ehk = entry.explicit_hash_key
            key = entry.partition_key if ehk is None else (entry.partition_key, ehk)
            domain = domains.get(key)
            if domain is None:
                if ehk is None and not (pins and key in pins):
                    partition_key = entry.partition_key  # the key, as a str
                    held = lone.get(partition_key)
                    if held is None:  # a new key: its record waits as itself
                        lone[partition_key] = entry
                        lane = entry.lone_lane = lane_of(entry.hash_key)
                        if not lane.ready:
                            new_lanes += 1
                        lane.ready.append(entry)
                        if lane.resume_at < sendable_at:  # noqa: PLR1730
                            sendable_at = lane.resume_at
                        count += 1
                        ready_records += 1
                        ready_bytes += entry.size
                        continue
                    domain = self._promote(partition_key)
                else:
                    domain = new_domain(key, entry.hash_key)
            domain.entries.append(entry)
            domain.nbytes += entry.size
            count += 1
            state = domain.state
            if state == IDLE:  # _make_ready(domain, front=False), inlined
                domain.state = READY
                ready_records += len(domain.entries)
                ready_bytes += domain.nbytes
                lane = domain.lane
                # Not min(): a call per new key was 2 % of a new key's record (profiled).
                if lane.resume_at < sendable_at:  # noqa: PLR1730
                    sendable_at = lane.resume_at
                if not domain.queued:
                    domain.queued = True
                    if not lane.ready:
                        new_lanes += 1
                    lane.ready.append(domain)
            elif state == READY:
                ready_records += 1
                ready_bytes += entry.size
        summary = self._summary
        if summary is not None and ready_records:
            # Records stamped ``now`` are the newest: the oldest head changes only if no lane
            # had one.
            oldest, first, lanes = summary
            self._summary = (min(oldest, now), min(first, sendable_at), lanes + new_lanes)
        self.pending_records += count
        self.ready_records += ready_records
        self.ready_bytes += ready_bytes
        return count

    def take_one(self, lane: Lane, domain: Domain | Entry) -> Entry:
        """The first record of ``domain``, the lane's head, taken to be sent alone."""
        entry = domain if isinstance(domain, Entry) else domain.entries.pop(0)
        size = entry.size
        self.ready_records -= 1
        self.ready_bytes -= size
        self.pending_records -= 1
        if isinstance(domain, Entry):  # a lone record: its key in flight, or free
            self._summary = None
            lane.ready.popleft()
            if self._preserve_order:
                self._lone[entry.partition_key] = entry.hash_key
            else:
                del self._lone[entry.partition_key]
        else:
            domain.nbytes -= size
            self._took_from(lane, domain)
        return entry

    def take_runs(
        self, lane: Lane, aggregator: Aggregator
    ) -> tuple[list[Entry], list[Domain | Entry]]:
        """Records from the lane's head domains into ``aggregator``, a domain's run at a time
        (:meth:`~kinesis_actors.records.Aggregator.add_run`), until it is full or the lane
        has nothing ready: the records taken, in the aggregate's order, and their domains.
        From a stale lane, one domain's run only: its records share one hash key."""
        taken: list[Entry] = []
        runs: list[Domain | Entry] = []
        add, add_run = aggregator.add, aggregator.add_run
        ready = lane.ready
        in_order = self._preserve_order
        one_domain = lane.stale
        ready_state = READY
        records = nbytes_taken = 0
        # head and _took_from inlined, and the counters written once (in ``finally``, so an
        # add_run that raises leaves them true): this runs per domain of every aggregate
        # (measured: ~0.08 us a 100-byte record of put_many).
        lone = self._lone
        try:
            while ready:
                domain = ready[0]
                if isinstance(domain, Entry):  # a lone record (see _promote)
                    key = domain.partition_key
                    # Promoted or expired (and maybe refilled, lone elsewhere): stale here.
                    if lone.get(key) is not domain or domain.lone_lane is not lane:
                        ready.popleft()
                        continue
                    if not add(domain.data, key, None):
                        break
                    records += 1
                    nbytes_taken += domain.size
                    taken.append(domain)
                    runs.append(domain)
                    ready.popleft()
                    if in_order:
                        lone[key] = domain.hash_key
                    else:
                        del lone[key]
                    if one_domain:
                        break
                    continue
                if domain.state != ready_state or domain.lane is not lane:  # stale: dropped
                    ready.popleft()
                    if domain.lane is lane:
                        domain.queued = False
                    continue
                entries = domain.entries
                length = len(entries)
                if not length:
                    break
                if length > _RUN_SLICE:
                    count, nbytes = self._take_backlog(domain, add_run, taken)
                else:
                    lead = entries[0]
                    if length == 1:  # a domain's one record: add
                        count = int(add(lead.data, lead.partition_key, domain.explicit_hash_key))
                    else:
                        count = add_run(
                            list(map(_data, entries)),
                            lead.partition_key,
                            domain.explicit_hash_key,
                        )
                    if count == length:  # the whole run (the common case)
                        nbytes = domain.nbytes
                        domain.nbytes = 0
                        taken += entries
                        entries.clear()
                    else:
                        nbytes = _move(entries, count, taken)
                        domain.nbytes -= nbytes
                records += count
                nbytes_taken += nbytes
                if count == 0:
                    break
                runs.append(domain)
                ready.popleft()
                domain.queued = False
                if in_order:  # in flight: what it still holds is no longer ready
                    if entries:
                        self.ready_records -= len(entries)
                        self.ready_bytes -= domain.nbytes
                    domain.state = IN_FLIGHT
                elif entries:
                    ready.append(domain)  # round robin between the keys of a lane
                    domain.queued = True
                else:
                    self._leave_ready(domain, IDLE)
                if entries or one_domain:
                    break  # the aggregate is full, or must hold one hash key
        except BaseException:
            self._stranded += taken  # out of their domains, in no aggregate: drain's to fail
            raise
        finally:
            self.ready_records -= records
            self.ready_bytes -= nbytes_taken
            self.pending_records -= records
            self._summary = None
        return taken, runs

    @staticmethod
    def _take_backlog(
        domain: Domain, add_run: Callable[[list[bytes], str, str | None], int], taken: list[Entry]
    ) -> tuple[int, int]:
        """A hot key's long backlog into the aggregate, _RUN_SLICE records at a time (so an
        aggregate reads what it can hold, not the whole backlog): how many records and bytes
        were taken, onto ``taken``. Stops when the aggregate is full or the domain empty."""
        entries = domain.entries
        key, explicit_hash_key = entries[0].partition_key, domain.explicit_hash_key
        count = nbytes = 0
        while entries:
            datas = list(map(_data, entries[:_RUN_SLICE]))
            took = add_run(datas, key, explicit_hash_key)
            nbytes += _move(entries, took, taken)
            count += took
            if took < len(datas):
                break  # full
        domain.nbytes -= nbytes
        return count, nbytes

    def _promote(self, key: str) -> Domain:
        """A domain for ``key``, whose one record waits or is in flight as itself: its next
        record (or a retry, or a pin) needs the domain's order. A waiting record moves into
        it (its lane's queue names the domain instead; the record's own place there turns
        stale); one in flight leaves the domain in flight, released by its answer."""
        held = self._lone[key]
        if type(held) is int:
            domain = self.new_domain(key, held)
            del self._lone[key]
            domain.state = IN_FLIGHT
            return domain
        assert type(held) is Entry
        self._summary = None
        domain = self.new_domain(key, held.hash_key)
        del self._lone[key]  # after the domain is made: a step that raises loses no record
        domain.entries.append(held)
        domain.nbytes = held.size
        domain.state = READY  # counted ready already, as itself
        domain.queued = True
        domain.lane.ready.append(domain)
        self._left(held.lone_lane)  # last: the record is in its domain
        return domain

    def _left(self, lane: Lane | None) -> None:
        """A lone record or a domain left its place in ``lane``'s queue (the record joined a
        domain, or either expired), which only the queue's head drops: once such places are
        half the queue, sweep them out, so that a lane whose head does not move (paced, or
        lingering past the records' time-to-live) holds no more of them than live ones."""
        assert lane is not None
        lane.left += 1
        ready = lane.ready
        if lane.left < _SWEEP_LEFT or 2 * lane.left <= len(ready):
            return
        lone = self._lone
        live: list[Domain | Entry] = []
        for item in ready:  # head's test, for every place
            if isinstance(item, Entry):
                if lone.get(item.partition_key) is item and item.lone_lane is lane:
                    live.append(item)
            elif item.state == READY and item.lane is lane:
                live.append(item)
            elif item.lane is lane:
                item.queued = False
        ready.clear()
        ready.extend(live)
        lane.left = 0

    def new_domain(self, key: DomainKey, hash_key: int) -> Domain:
        """An idle domain for ``key``, in the lane of ``hash_key``: a pruned one made new if
        there is one. The caller has checked that ``key`` has none."""
        pins = self._pins
        pinned = pins.get(key) if pins else None
        lane = self._lane(hash_key if pinned is None else pinned[0])
        spares = self._spare_domains
        if spares:  # a pruned domain (idle, empty, in no lane's queue) made new for this key
            domain = spares.pop()
            domain.key = key
            domain.hash_key = hash_key
            domain.explicit_hash_key = None if isinstance(key, str) else key[1]
            domain.pinned = False
            domain.lane = lane
            domain.nbytes = 0
            domain.not_before = 0.0
        else:
            domain = Domain(key, hash_key, lane)
        self._domains[key] = domain
        if pinned is not None:
            self._pin(domain, pinned[0])
        return domain

    @staticmethod
    def _pin(domain: Domain, hash_key: int) -> None:
        """``domain`` sends under ``hash_key`` from now on (the caller moves it to its lane)."""
        domain.hash_key = hash_key
        domain.explicit_hash_key = str(hash_key)
        domain.pinned = True

    def _make_ready(self, domain: Domain, *, front: bool) -> None:
        self._summary = None  # an older head, or a lane with ready records again
        domain.state = READY
        self.ready_records += len(domain.entries)
        self.ready_bytes += domain.nbytes
        if not domain.queued:
            domain.queued = True
            if front:
                domain.lane.ready.appendleft(domain)
            else:
                domain.lane.ready.append(domain)

    def _leave_ready(self, domain: Domain, state: int) -> None:
        self._summary = None
        if domain.state == READY:
            self.ready_records -= len(domain.entries)
            self.ready_bytes -= domain.nbytes
        domain.state = state
        if state == IDLE and len(self._domains) > self._prune_at:
            self._prune()

    def _prune(self) -> None:
        """Forget every idle domain with nothing waiting (see ``_prune_at``)."""
        domains, spares = self._domains, self._spare_domains
        idle = [key for key, d in domains.items() if d.state == IDLE and not d.entries]
        self._prune_at = max(IDLE_DOMAINS, 2 * (len(domains) - len(idle)))
        for key in idle:
            domain = domains.pop(key)
            # One still named in a lane's queue (stale there) is left to the collector: made
            # new, the stale entry would stand for it.
            if not domain.queued and len(spares) < self._prune_at:
                spares.append(domain)

    def head(self, lane: Lane) -> Domain | Entry | None:
        """The lane's first ready domain or lone record, dropping stale queue entries on the
        way. A lone record's place is live while its key maps to it and it was placed in
        this lane (``lone_lane``): a place it left when it joined a domain or expired stays
        behind until the head reaches it (or :meth:`_left` sweeps it), and the entry may by
        then be refilled (entries are recycled) and wait lone in another lane. Refilled into
        this same lane, it has two places here; the first taken sends it, the other is stale
        from then on."""
        ready = lane.ready
        lone = self._lone
        while ready:
            domain = ready[0]
            if isinstance(domain, Entry):
                if lone.get(domain.partition_key) is domain and domain.lone_lane is lane:
                    return domain
                ready.popleft()
                continue
            if domain.state == READY and domain.lane is lane:
                return domain
            ready.popleft()
            if domain.lane is lane:
                domain.queued = False
        return None

    def oldest_ready(self) -> float | None:
        """When the oldest ready record was accepted (approximately: the lanes' heads)."""
        oldest, _, _ = self._summary or self._summarize()
        return None if oldest == math.inf else oldest

    def sendable_at(self) -> float:
        """The earliest ``resume_at`` of a lane with ready records (inf if none): no lane may
        send before it, whatever else is due."""
        _, first, _ = self._summary or self._summarize()
        return first

    def ready_lanes(self) -> int:
        """How many lanes have ready records, or fewer (a lane whose queue held only stale
        entries when a domain joined it goes uncounted until the next pass): how many lanes
        a call could draw Kinesis records from."""
        _, _, lanes = self._summary or self._summarize()
        return lanes

    def _summarize(self) -> tuple[float, float, int]:
        """One pass over the lanes: the summary :meth:`oldest_ready`, :meth:`sendable_at` and
        :meth:`ready_lanes` read until ready records are taken, moved or reordered."""
        oldest = first = math.inf
        lanes = 0
        head = self.head
        for lane in self._lanes.lanes():
            if lane.ready:
                domain = head(lane)
                if domain is not None and domain.entries:
                    lanes += 1
                    stamp = domain.entries[0].enqueued
                    oldest = min(oldest, stamp)
                    first = min(first, lane.resume_at)
        summary = self._summary = (oldest, first, lanes)
        return summary

    def open_lanes(self, now: float) -> list[Lane]:
        """The lanes with ready records that their pacing lets send at ``now``, the one whose
        head record waited longest first (each lane's ``oldest`` set to its head's stamp)."""
        lanes = []
        head = self.head
        for lane in self._lanes.lanes():
            if lane.ready and lane.resume_at <= now:
                domain = head(lane)
                if domain is not None and domain.entries:
                    lane.oldest = domain.entries[0].enqueued
                    lanes.append(lane)
        lanes.sort(key=_oldest)
        return lanes

    def pace(self, lane: Lane, resume_at: float) -> None:
        """The lane's shard has no room before ``resume_at``: it sends nothing until then."""
        lane.resume_at = resume_at
        self._summary = None

    def paced_shards(self, now: float) -> int:
        """How many shards have ready records in a lane paced past ``now`` (a shard with two
        such lanes counts once)."""
        return len(
            {lane.shard_id for lane in self._lanes.lanes() if lane.ready and lane.resume_at > now}
        )

    def _took_from(self, lane: Lane, domain: Domain) -> None:
        """After taking records from the lane's head domain: in flight, rotate or idle."""
        self._summary = None
        lane.ready.popleft()
        domain.queued = False
        if self._preserve_order:
            self._leave_ready(domain, IN_FLIGHT)
        elif domain.entries:
            lane.ready.append(domain)  # round robin between the keys of a lane
            domain.queued = True
        else:
            self._leave_ready(domain, IDLE)

    def release(self, part: Part | Entry) -> None:
        """The in-flight Kinesis record ``part`` came back: its domains may move again.

        An aggregate names its domains (one run each: with ``preserve_order`` a domain has one
        run in flight), so this costs a step per domain, not per record; a record sent alone
        finds its own.
        """
        if not self._preserve_order:
            return
        domains, lone = self._domains, self._lone
        runs: Sequence[Domain | Entry] = part.domains if isinstance(part, Part) else (part,)
        for run in runs:
            if isinstance(run, Entry):
                ehk = run.explicit_hash_key
                key = run.partition_key
                found = domains.get(key if ehk is None else (key, ehk))
                if found is None:
                    if ehk is None and type(lone.get(key)) is int:
                        del lone[key]  # a lone record's answer: its key is free again
                    continue
                domain = found
            else:
                domain = run
            if domain.state != IN_FLIGHT:
                continue
            if domain.entries:
                self._make_ready(domain, front=True)
            else:
                domain.state = IDLE  # _leave_ready(domain, IDLE), its prune once below
        if len(domains) > self._prune_at:
            self._prune()

    def release_due(self, now: float) -> None:
        """Domains whose backoff is over become ready again, at the front of their lanes'
        queues (ahead of newer ones), or where they stood if their place there was kept
        (without ``preserve_order``: a domain that had records ready when a failure of its
        came back keeps its place, and goes on from it)."""
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            _, _, key = heapq.heappop(waiting)
            domain = self._domains.get(key)
            if domain is None or domain.state != WAITING or domain.not_before > now:
                continue
            if domain.entries:
                self._make_ready(domain, front=True)
            else:
                self._leave_ready(domain, IDLE)

    def first_backoff_end(self) -> float | None:
        """When the earliest backoff started ends (maybe one already cut short), if any."""
        waiting = self._waiting
        return waiting[0][0] if waiting else None

    # -- retries, expiry and drain --------------------------------------------------------------

    def requeue(self, key: DomainKey, entries: list[Entry], backoff: float) -> None:
        """Put a domain's failed records back at its front, oldest first; the domain then
        waits until ``backoff`` (or its current backoff, if later) before they go again."""
        domain = self._domains.get(key)
        if domain is None:
            domain = (
                self._promote(key)
                if isinstance(key, str) and key in self._lone
                else self.new_domain(key, entries[0].hash_key)
            )
        was_waiting = domain.state == WAITING
        if domain.state == READY:
            self._leave_ready(domain, WAITING)
        domain.state = WAITING
        queued = domain.entries
        waited = len(queued)
        queued[:0] = entries
        if waited and entries[-1].enqueued > queued[len(entries)].enqueued:
            # Without preserve_order a key's records in flight can fail in any order, and
            # the younger ones came back first. Oldest first again (a stable sort: records
            # accepted together keep their order), where the TTL sweep looks.
            queued.sort(key=_enqueued)
        domain.nbytes += sum(entry.size for entry in entries)
        self.pending_records += len(entries)
        # A domain reused after it went idle may carry an old, later not_before.
        domain.not_before = max(domain.not_before, backoff) if was_waiting else backoff
        self._waiting_seq += 1
        heapq.heappush(self._waiting, (domain.not_before, self._waiting_seq, key))

    def expire(
        self, now: float, expired: Callable[[Entry, float], bool]
    ) -> tuple[list[Entry], float]:
        """Take out every record ``expired`` at ``now`` (a domain's oldest are at its front):
        them, in order, and when the oldest record left was accepted (inf if none)."""
        gone: list[Entry] = []
        earliest = math.inf
        for domain in list(self._domains.values()):
            entries = domain.entries
            count = 0
            while count < len(entries) and expired(entries[count], now):
                count += 1
            if count:
                self._summary = None
                out = entries[:count]
                del entries[:count]  # at once: one memmove, not one per record
                nbytes = sum(map(_size, out))
                domain.nbytes -= nbytes
                self.pending_records -= count
                if domain.state == READY:
                    self.ready_records -= count
                    self.ready_bytes -= nbytes
                gone += out
            if entries:
                earliest = min(earliest, entries[0].enqueued)
            elif domain.state in (READY, WAITING):
                self._leave_ready(domain, IDLE)
                if domain.queued:  # its place in its lane's queue is stale (see head)
                    self._left(domain.lane)
        lone = self._lone
        for key, held in list(lone.items()):
            if type(held) is Entry:
                if expired(held, now):
                    self._summary = None
                    del lone[key]  # its place in its lane's queue is stale (see head)
                    gone.append(held)
                    self.pending_records -= 1
                    self.ready_records -= 1
                    self.ready_bytes -= held.size
                    self._left(held.lone_lane)  # last: the counts are true first
                else:
                    earliest = min(earliest, held.enqueued)
        return gone, earliest

    def strand(self, entries: Iterable[Entry]) -> None:
        """Records a step of the producer held when it raised (a bug of ours): taken from here
        and in no call, or given to :meth:`place_many` and maybe not placed. Kept for
        :meth:`drain`, which fails the producer's every unsettled record after such a crash;
        without this they were settled by nothing, and a flush waited for them for ever."""
        self._stranded += entries

    def drain(self) -> list[Entry]:
        """Take out every record waiting here, and forget every domain, lane and backoff;
        stranded records too, each once (one may also have been placed)."""
        gone: list[Entry] = []
        for domain in self._domains.values():
            gone += domain.entries
            domain.entries = []
        gone += [held for held in self._lone.values() if type(held) is Entry]
        self._lone.clear()
        if self._stranded:
            gone = list({id(entry): entry for entry in gone + self._stranded}.values())
            self._stranded = []
        self._domains.clear()
        self._lanes.clear()
        self._summary = None
        self._waiting.clear()
        self.ready_records = self.ready_bytes = self.pending_records = 0
        return gone
