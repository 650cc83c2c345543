"""The planner's decisions, without I/O: where a shard's next micro-batch ends. Sans-IO.

The driver decides a micro-batch's end before any task runs, so the end must be exact without
reading the data. Per shard and trigger the planner's I/O (``_planner``) asks the
service three small questions and this module turns the answers into a cut:

1. **probe**: the first records after the start (GetRecords ``Limit=6``: the first, and the
   tail's first step). None at the tip: the shard is idle, and the trigger costs it this one
   call; a page at the tip is cut in place (``ShardReads.cut_in_page``); a start just before
   a record the driver saw needs no probe;
2. **anchor**: the first record at or after the cut time ``T``
   (``GetShardIterator(AT_TIMESTAMP, T)`` + ``GetRecords(Limit=1)``). The batch ends just
   before it. It was seen, so "everything of this shard before it" is fixed and readable;
3. **tail**, only when there is no anchor (nothing arrived at or after ``T``): the driver
   must see the shard's last record to cut after it. The probe's extra records are its first
   step; past them it searches arrival time for a record within 100 ms of ``T`` and reads the
   tip from there (``ShardReads.tail``), about 100 ms of the stream, not the window.

``T`` is now minus the settle lag, but at most one window of arrival time past the first
record after the start, so a backlog becomes bounded micro-batches; under
``Trigger.AvailableNow`` it is the moment the query started. Nothing here awaits or reads a
clock: ``now_ms`` is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kinesis_actors.errors import MalformedReplyError

from ._offsets import AFTER, BEFORE, Bound, Offset, ShardEntry

__all__ = [
    "CutTime",
    "PlannerSettings",
    "Records",
    "Seen",
    "ShardInfo",
    "Take",
    "add_new_shards",
    "after_tail",
    "anchor_cut",
    "arrival_ms",
    "check_records_reply",
    "cut_time",
    "eligible",
    "row_bound",
    "shares",
    "take_rows",
]


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    """How far one micro-batch reaches, in arrival time."""

    window_ms: int = 10_000
    """At most this much arrival time past the first record after the start (a backlog is
    read in micro-batches of this many seconds of the stream)."""
    settle_ms: int = 1_000
    """``T`` stays this far behind now, so busy shards always have an anchor and the driver
    reads no data; quiet shards are cut after their last record."""


@dataclass(frozen=True, slots=True)
class Seen:
    """A record the driver saw: its sequence number and arrival time (epoch ms)."""

    sequence: int
    arrival_ms: int


@dataclass(frozen=True, slots=True)
class Records:
    """A checked GetRecords reply."""

    records: list[dict[str, Any]]
    next_iterator: str | None
    millis_behind: int
    ended: bool
    """The shard's end, proved: no next iterator and a ChildShards list (an error
    such as ResourceNotFound is no proof: a wrong sequence number or a transient fault says
    the same)."""


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """What ListShards says of a shard: its parents."""

    parents: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CutTime:
    """``T`` for one shard, and whether it is as late as this trigger allows (not cut short
    by the window): when no shard moves and every ``T`` is final, AvailableNow is done."""

    ms: int
    final: bool


def arrival_ms(record: Mapping[str, Any]) -> int:
    stamp = record["ApproximateArrivalTimestamp"]
    if isinstance(stamp, datetime):
        return int(stamp.timestamp() * 1000 + 0.5)
    return round(float(stamp) * 1000)


def seen(record: Mapping[str, Any]) -> Seen:
    return Seen(int(record["SequenceNumber"]), arrival_ms(record))


def check_records_reply(reply: Any, *, where: str) -> Records:
    """Believe a GetRecords reply only when it has what the planner and readers use.

    The client raises :class:`MalformedReplyError` for a garbled 2xx; this is the second line:
    ``{}`` or a reply without ``Records`` is never read as "no records" and a missing next
    iterator is the shard's end only with ChildShards beside it.
    """
    if not isinstance(reply, Mapping) or not isinstance(reply.get("Records"), list):
        raise MalformedReplyError(
            f"{where}: GetRecords reply without a Records list", operation="GetRecords"
        )
    following = reply.get("NextShardIterator")
    behind = reply.get("MillisBehindLatest")
    if following is not None and not isinstance(following, str):
        raise MalformedReplyError(
            f"{where}: NextShardIterator is not a string", operation="GetRecords"
        )
    if following is not None and (isinstance(behind, bool) or not isinstance(behind, int)):
        raise MalformedReplyError(
            f"{where}: GetRecords reply without MillisBehindLatest", operation="GetRecords"
        )
    ended = following is None and isinstance(reply.get("ChildShards"), list)
    if following is None and not ended:
        raise MalformedReplyError(
            f"{where}: GetRecords reply with neither a next iterator nor ChildShards",
            operation="GetRecords",
        )
    return Records(list(reply["Records"]), following, int(behind or 0), ended)


def cut_time(
    settings: PlannerSettings, *, now_ms: int, first: Seen | None, target_ms: int | None
) -> CutTime:
    """``T`` for a shard whose first record after the start is ``first``.

    AvailableNow (``target_ms``) cuts at the query's start: no settle lag, since the lag only
    saves the driver reads and the run ends anyway.
    """
    latest = target_ms if target_ms is not None else now_ms - settings.settle_ms
    if first is None:
        return CutTime(latest, True)
    bounded = first.arrival_ms + settings.window_ms
    if bounded < latest:
        return CutTime(bounded, False)
    return CutTime(latest, True)


def anchor_cut(entry: ShardEntry, first: Seen, anchor: Seen) -> ShardEntry | None:
    """The entry ending just before ``anchor``; None when nothing lies between the start and
    the anchor (the anchor is ``first`` itself, or before it: arrival times may be out of
    order, which moves where a cut falls but never its exactness)."""
    if anchor.sequence <= first.sequence:
        return None
    bound = Bound(anchor.sequence, BEFORE)
    if entry.bound is not None and bound <= entry.bound:
        return None
    return ShardEntry(bound=bound, arrival_ms=anchor.arrival_ms)


def after_tail(entry: ShardEntry, last: Seen) -> ShardEntry | None:
    """The entry ending just after ``last`` (read by the driver), or None if not past start."""
    bound = Bound(last.sequence, AFTER)
    if entry.bound is not None and bound <= entry.bound:
        return None
    return ShardEntry(bound=bound, arrival_ms=last.arrival_ms)


def eligible(
    key: tuple[str, str], listing: Mapping[tuple[str, str], ShardInfo], offset: Offset
) -> bool:
    """A shard is planned only once all its parents are finished in the start offset, so its
    rows come in a later micro-batch than any of theirs (children read
    with their parents would put a key out of order). A parent that is neither
    listed nor in the offset has expired: it no longer holds anything back."""
    stream = key[0]
    info = listing.get(key)
    for parent in info.parents if info is not None else ():
        parent_key = (stream, parent)
        entry = offset.shards.get(parent_key)
        if entry is None:
            if parent_key in listing:
                return False
            continue
        if not entry.finished:
            return False
    return True


def add_new_shards(
    offset: Offset, listing: Mapping[tuple[str, str], ShardInfo], streams: Iterable[str]
) -> list[tuple[str, str]]:
    """Add every listed shard the offset does not know, from TRIM_HORIZON (a shard created
    after the query started holds only new records). Returns the added keys."""
    added = []
    wanted = set(streams)
    for key in sorted(listing):
        if key[0] in wanted and key not in offset.shards:
            offset.shards[key] = ShardEntry()
            added.append(key)
    return added


def shares(total: int, parts: int) -> list[int]:
    """``total`` split as evenly as possible into ``parts`` (the first ones get the extra)."""
    if parts <= 0:
        return []
    base, extra = divmod(total, parts)
    return [base + (1 if index < extra else 0) for index in range(parts)]


_SEQUENCE, _SUB_SEQUENCE, _ARRIVAL, _DATA = 2, 3, 6, 7


@dataclass(frozen=True, slots=True)
class Take:
    """How many leading rows of a read fit a micro-batch under read limits."""

    rows: int
    nbytes: int
    stop: bool
    """The shard stops here this trigger: a limit or the AvailableNow target was reached."""


def take_rows(
    batch: Any,
    *,
    rows_room: int | None,
    bytes_room: int | None,
    nothing_taken: bool,
    target_ms: int | None,
) -> Take:
    """The leading rows of ``batch`` (``RECORD_SCHEMA``) within the rooms left.

    At least one row is taken when nothing else was (``nothing_taken``), even if it alone
    exceeds ``bytes_room``: a record larger than the limit must not stop the stream. Rows that
    arrived at or after ``target_ms`` (AvailableNow) are never taken.
    """
    import pyarrow as pa  # noqa: PLC0415 - pyarrow is heavy; only the limits path needs it
    import pyarrow.compute as pc  # noqa: PLC0415

    rows = int(batch.num_rows)
    stop = False
    if target_ms is not None and rows:
        late = pc.greater_equal(batch.column(_ARRIVAL).cast(pa.int64()), target_ms)
        if pc.any(late).as_py():
            rows = int(pc.index(late, True).as_py())
            stop = True
    if rows_room is not None and rows > rows_room:
        rows, stop = rows_room, True
    sizes = pc.binary_length(batch.column(_DATA).slice(0, rows)).cast(pa.int64())
    if bytes_room is not None and rows:
        total = pc.cumulative_sum(sizes)
        fitting = int(pc.sum(pc.less_equal(total, bytes_room)).as_py() or 0)
        if fitting == 0 and nothing_taken:
            fitting = 1
        if fitting < rows:
            rows, stop = fitting, True
    nbytes = int(pc.sum(sizes.slice(0, rows)).as_py() or 0) if rows else 0
    return Take(rows, nbytes, stop)


def row_bound(batch: Any, index: int) -> Bound:
    """The cut just after row ``index`` of ``batch``: at its (sequence, sub-sequence)."""
    return Bound(
        int(batch.column(_SEQUENCE)[index].as_py()), int(batch.column(_SUB_SEQUENCE)[index].as_py())
    )
