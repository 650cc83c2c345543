"""Reading one shard for the planner: probe, anchor, tail search, and reads under limits.

The I/O half of ``_policy`` for one shard and one trigger; ``_planner`` runs one of these per
shard, concurrently, and turns the outcomes into the next offset. Iterators that start exactly
at a cut are kept (they live 5 minutes at the service), so an idle shard costs one GetRecords
per trigger and a busy one two (the anchor's GetShardIterator and GetRecords).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kinesis_actors.client import StreamRef, stream_params
from kinesis_actors.errors import ExpiredIteratorError, MalformedReplyError, ValidationError
from kinesis_actors.records import build_record_batch, deaggregate

from ._offsets import AFTER, BEFORE, Bound, ShardEntry
from ._policy import (
    CutTime,
    PlannerSettings,
    Records,
    Seen,
    after_tail,
    anchor_cut,
    check_records_reply,
    cut_time,
    row_bound,
    seen,
    take_rows,
)

__all__ = ["Outcome", "ShardReads"]

ShardKey = tuple[str, str]
Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

_ITERATOR_LIFE = 240.0
"""Kept iterators are dropped after 4 minutes (the service expires them after 5)."""
_HOPS = 3
"""Empty pages followed (MillisBehindLatest > 0) to find the first record past a point."""
_TAIL_PAGES = 10
_TAIL_PEEK = 5
"""Records read after the first one before searching: a quiet shard's tail ends there."""
_PROBE = _TAIL_PEEK + 1
"""The probe reads the first record and the tail's first step in one call."""
_TAIL_SPAN_MS = 100
_SEARCH_STEPS = 8
_LIMIT_PAGES = 20


@dataclass(slots=True)
class Outcome:
    """What planning one shard gave: its new entry (None: it stays), whether its cut is as
    late as the trigger allows, how far behind the tip, and the rows read under limits."""

    entry: ShardEntry | None = None
    final: bool = True
    behind_ms: int = 0
    rows: int = 0
    nbytes: int = 0
    stop: bool = False
    idle: bool = False
    """The probe found nothing after the start, at the tip (``_idle`` paces the next one)."""


@dataclass(slots=True)
class _Kept:
    """An iterator that starts exactly at ``entry``'s cut."""

    entry: str
    iterator: str
    since: float


def _known_first(entry: ShardEntry) -> Seen | None:
    """The first record after ``entry`` when the entry says it: a cut just before a record
    the driver saw (an anchor), whose arrival time it kept."""
    bound = entry.bound
    if bound is None or bound.sub != BEFORE or entry.arrival_ms is None:
        return None
    return Seen(bound.sequence, entry.arrival_ms)


def _whole_tail(page: Records) -> bool:
    """Whether a probe page holds every record from the cut to the tip: fewer than asked,
    and the service says it is not behind (as the tail search decides a quiet shard's end)."""
    return (
        not page.ended
        and page.next_iterator is not None
        and len(page.records) < _PROBE
        and page.millis_behind == 0
    )


def _consumed(entry: ShardEntry, cut: ShardEntry, first: dict[str, Any]) -> bool:
    """Whether ``cut`` (after ``first``) adds nothing to ``entry``, a cut inside ``first``'s
    aggregate at its last user record: a move of zero rows, which would be an empty batch."""
    start, bound = entry.bound, cut.bound
    if start is None or bound is None or not BEFORE < start.sub < AFTER:
        return False
    if bound.sequence != start.sequence:
        return False
    users = deaggregate(first["Data"], first.get("PartitionKey", ""))
    return start.sub >= len(users) - 1


class ShardReads:
    """The planner's calls for single shards, with the iterators kept between triggers."""

    def __init__(
        self,
        call: Call,
        settings: PlannerSettings,
        clock: Callable[[], float],
        *,
        refs: Mapping[str, str] | None = None,
    ) -> None:
        """``refs``: a stream's name → its name or ARN as given (what the calls send)."""
        self._call = call
        self._refs = dict(refs or {})
        # GetRecords names an ARN-given stream too, as the KCL does for another account's.
        self._arns = {
            name: arn for name, ref in self._refs.items() if (arn := StreamRef.parse(ref).arn)
        }
        self._settings = settings
        self._clock = clock
        self._kept: dict[ShardKey, _Kept] = {}

    async def iterator(self, key: ShardKey, params: dict[str, Any]) -> str:
        reply = await self._call(
            "GetShardIterator",
            {**stream_params(self._refs.get(key[0], key[0])), "ShardId": key[1], **params},
        )
        iterator = reply.get("ShardIterator")
        if not isinstance(iterator, str):
            raise MalformedReplyError(
                "GetShardIterator without a ShardIterator", operation="GetShardIterator"
            )
        return iterator

    async def records(self, key: ShardKey, iterator: str, limit: int) -> Records:
        params: dict[str, Any] = {"ShardIterator": iterator, "Limit": limit}
        if key[0] in self._arns:
            params["StreamARN"] = self._arns[key[0]]
        reply = await self._call("GetRecords", params)
        return check_records_reply(reply, where=f"{key[0]}/{key[1]}")

    def keep(self, key: ShardKey, entry: ShardEntry, iterator: str | None) -> None:
        if iterator is None:
            self._kept.pop(key, None)
        else:
            self._kept[key] = _Kept(entry.describe(), iterator, self._clock())

    async def from_(self, key: ShardKey, entry: ShardEntry, limit: int) -> tuple[str, Records]:
        """A page from ``entry``'s cut: through the kept iterator when there is one."""
        kept = self._kept.pop(key, None)
        if (
            kept is not None
            and kept.entry == entry.describe()
            and self._clock() - kept.since < _ITERATOR_LIFE
        ):
            try:
                return kept.iterator, await self.records(key, kept.iterator, limit)
            except ExpiredIteratorError:
                pass
        iterator = await self.iterator(key, entry.iterator_params())
        return iterator, await self.records(key, iterator, limit)

    async def first(
        self, key: ShardKey, iterator: str, page: Records, limit: int = 1
    ) -> tuple[str, Records]:
        """Follow empty pages that are behind the tip, to the first record (bounded)."""
        hops = 0
        while not page.records and not page.ended and page.millis_behind > 0 and hops < _HOPS:
            assert page.next_iterator is not None
            iterator = page.next_iterator
            page = await self.records(key, iterator, limit)
            hops += 1
        return iterator, page

    async def anchor_mode(
        self, key: ShardKey, entry: ShardEntry, now_ms: int, target_ms: int | None
    ) -> Outcome:
        known = _known_first(entry)
        if known is not None:
            outcome = await self.from_known(key, entry, known, now_ms, target_ms)
            if outcome is not None:
                return outcome
        iterator, probe = await self.from_(key, entry, _PROBE)
        iterator, probe = await self.first(key, iterator, probe, _PROBE)
        if not probe.records:
            if probe.ended:
                return Outcome(ShardEntry(finished=True))
            if probe.millis_behind > 0:
                return Outcome(final=False)  # empty pages past the hops: look again next time
            self.keep(key, entry, probe.next_iterator)  # idle: one call next time too
            return Outcome(idle=True)
        first = seen(probe.records[0])
        when = cut_time(self._settings, now_ms=now_ms, first=first, target_ms=target_ms)
        if _whole_tail(probe):
            return self.cut_in_page(key, entry, first, iterator=iterator, probe=probe, when=when)
        anchor, anchor_iterator, ended, behind = await self.anchor(key, when.ms)
        if anchor is not None:
            cut = anchor_cut(entry, first, anchor)
            if cut is not None:
                self.keep(key, cut, anchor_iterator)
                return Outcome(cut, when.final, behind)
            if when.final:  # the anchor is the first record: it arrived within the settle lag
                self.keep(key, entry, iterator)
                return Outcome(None, True, behind)
            # A window past the first record found the first record or one before it: the
            # arrival times are out of order here. Read on instead, so the shard moves.
        elif ended:
            return Outcome(ShardEntry(finished=True), when.final)
        cut, following = await self.tail(key, entry, first, probe, when.ms)
        if cut is not None and _consumed(entry, cut, probe.records[0]):
            return Outcome(None, when.final)
        self.keep(key, cut or entry, following)
        return Outcome(cut, when.final)

    async def from_known(
        self, key: ShardKey, entry: ShardEntry, first: Seen, now_ms: int, target_ms: int | None
    ) -> Outcome | None:
        """A cut just before a record the driver saw (``first``, the previous anchor) needs
        no probe: that record is the first after it. Only the anchor is asked for (two
        calls); None when the answer needs the probe after all (no anchor: the tail)."""
        when = cut_time(self._settings, now_ms=now_ms, first=first, target_ms=target_ms)
        anchor, anchor_iterator, ended, behind = await self.anchor(key, when.ms)
        if anchor is None:
            return Outcome(ShardEntry(finished=True), when.final) if ended else None
        cut = anchor_cut(entry, first, anchor)
        if cut is not None:
            self.keep(key, cut, anchor_iterator)
            return Outcome(cut, when.final, behind)
        if when.final and anchor.sequence == first.sequence:
            # The anchor is the cut's own record (it arrived within the settle lag): its
            # iterator starts at the cut.
            self.keep(key, entry, anchor_iterator)
            return Outcome(None, True, behind)
        return None

    def cut_in_page(
        self,
        key: ShardKey,
        entry: ShardEntry,
        first: Seen,
        *,
        iterator: str,
        probe: Records,
        when: CutTime,
    ) -> Outcome:
        """The probe read the shard to its tip (``_whole_tail``): the cut is in the page, before
        its first record at or after ``T`` or after its last; no anchor, no tail search."""
        if first.arrival_ms >= when.ms:
            # Nothing before T: as an anchor on the first record (it arrived within the lag).
            self.keep(key, entry, iterator)
            return Outcome(None, when.final)
        rest = Records(probe.records[1:], probe.next_iterator, probe.millis_behind, probe.ended)
        last, cut = self.scan(entry, first, first, rest, when.ms)
        following = None
        if cut is None:
            cut, following = after_tail(entry, last), probe.next_iterator
        if cut is not None and _consumed(entry, cut, probe.records[0]):
            return Outcome(None, when.final)
        self.keep(key, cut or entry, following)
        return Outcome(cut, when.final)

    async def anchor(
        self, key: ShardKey, when_ms: int
    ) -> tuple[Seen | None, str | None, bool, int]:
        """The first record at or after ``when_ms``: (record, its iterator, shard ended, behind)."""
        try:
            iterator = await self.iterator(
                key,
                {
                    "ShardIteratorType": "AT_TIMESTAMP",
                    "Timestamp": datetime.fromtimestamp(when_ms / 1000, UTC),
                },
            )
        except ValidationError:
            return None, None, False, 0  # T is in the service's future (clock skew): no anchor
        page = await self.records(key, iterator, 1)
        found_at, page = await self.first(key, iterator, page)
        if page.records:
            return seen(page.records[0]), found_at, False, page.millis_behind
        return None, None, page.ended, 0

    async def tail(
        self, key: ShardKey, entry: ShardEntry, first: Seen, probe: Records, when_ms: int
    ) -> tuple[ShardEntry | None, str | None]:
        """No anchor: cut after the shard's last record (or just before one that arrived at or
        after ``when_ms`` meanwhile). The driver must see the last record, not read up to it:

        1. a small page after the first record: a quiet shard's few records end there;
        2. otherwise a binary search on arrival time for a record within ``_TAIL_SPAN_MS`` of
           ``when_ms`` (two calls a step, at most ``_SEARCH_STEPS``), then the pages from it.

        So the driver reads about ``_TAIL_SPAN_MS`` of the stream, not a window of it.
        """
        if probe.ended:
            return ShardEntry(finished=True), None
        assert probe.next_iterator is not None
        # The probe read ``_TAIL_PEEK`` records past the first: they are the first step.
        page = Records(probe.records[1:], probe.next_iterator, probe.millis_behind, probe.ended)
        last, cut = self.scan(entry, first, first, page, when_ms)
        if cut is not None:
            return cut, None
        if page.ended:
            return ShardEntry(finished=True), None
        if len(page.records) < _TAIL_PEEK and page.millis_behind == 0:
            return after_tail(entry, last), page.next_iterator
        iterator = page.next_iterator
        low, high = last, when_ms
        for _ in range(_SEARCH_STEPS):
            if high - low.arrival_ms <= _TAIL_SPAN_MS:
                break
            middle = (low.arrival_ms + high) // 2
            found, found_at, _, _ = await self.anchor(key, middle)
            if found is not None and found.sequence > low.sequence and found_at is not None:
                low, iterator = found, found_at
                last = found
            else:
                high = middle
        for _ in range(_TAIL_PAGES):
            assert iterator is not None
            page = await self.records(key, iterator, 10_000)
            last, cut = self.scan(entry, first, last, page, when_ms)
            if cut is not None:
                return cut, None
            if page.ended:
                return ShardEntry(finished=True), None
            iterator = page.next_iterator
            if not page.records and page.millis_behind == 0:
                break
        return after_tail(entry, last), iterator

    @staticmethod
    def scan(
        entry: ShardEntry, first: Seen, last: Seen, page: Records, when_ms: int
    ) -> tuple[Seen, ShardEntry | None]:
        """The page's last record, or the cut before its first record at or after ``when_ms``."""
        for record in page.records:
            this = seen(record)
            if this.arrival_ms >= when_ms:
                return last, anchor_cut(entry, first, this)
            last = this
        return last, None

    async def read_within(
        self,
        *,
        key: ShardKey,
        entry: ShardEntry,
        rows_share: int | None,
        bytes_share: int | None,
        target_ms: int | None,
        nothing_taken: bool,
    ) -> Outcome:
        rows_room, bytes_room = rows_share, bytes_share
        skip = None
        bound = entry.bound
        if bound is not None and BEFORE < bound.sub < AFTER:
            skip = (str(bound.sequence), bound.sub)
        outcome = Outcome(final=True)
        current = entry
        limit = 10_000 if rows_room is None else min(10_000, rows_room)
        iterator, page = await self.from_(key, entry, limit)
        for _ in range(_LIMIT_PAGES):
            if not page.records:
                if page.ended:
                    outcome.entry = ShardEntry(finished=True)
                    self.keep(key, entry, None)
                    return outcome
                if page.millis_behind == 0:
                    self.keep(key, current, page.next_iterator)
                    break
            else:
                batch = build_record_batch(key[0], key[1], page.records, after=skip).batch
                skip = None
                take = take_rows(
                    batch,
                    rows_room=None if rows_room is None else rows_room - outcome.rows,
                    bytes_room=None if bytes_room is None else bytes_room - outcome.nbytes,
                    nothing_taken=nothing_taken and outcome.rows == 0,
                    target_ms=target_ms,
                )
                outcome.rows += take.rows
                outcome.nbytes += take.nbytes
                if take.rows == batch.num_rows and not take.stop:
                    last = seen(page.records[-1])
                    current = ShardEntry(
                        bound=Bound(last.sequence, AFTER), arrival_ms=last.arrival_ms
                    )
                    outcome.entry = current
                else:
                    if take.rows:
                        outcome.entry = ShardEntry(bound=row_bound(batch, take.rows - 1))
                    self.keep(key, entry, None)
                    outcome.stop = True
                    return outcome
            if page.next_iterator is None:
                break
            iterator = page.next_iterator
            if rows_room is not None and outcome.rows >= rows_room:
                self.keep(key, current, iterator)
                break
            left = 10_000 if rows_room is None else min(10_000, rows_room - outcome.rows)
            page = await self.records(key, iterator, left)
        if outcome.rows == 0 and outcome.entry is not None and not outcome.entry.finished:
            # Only user records before the start were read (the rest of an aggregate the
            # last cut ended in): the same place, and no micro-batch of nothing.
            outcome.entry = None
        return outcome
