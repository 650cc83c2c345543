"""The staging area between the driver's consumer and Spark's micro-batches. Sans-IO.

Part of the previous source, ``readPath=driver`` (``_legacy``, with ``_driver``). The driver's
consumer appends each shard's batches, and a marker when a shard is finished, in arrival order.
``take`` cuts the next micro-batch: it walks the staged items oldest first, takes whole batches
(slicing the last one at the read limit), and returns the end offset, which is the start offset
with every shard it touched moved to its last taken row, or marked finished. An offset is the
consumer's positions document, so everything that decides a micro-batch's end lives in Spark's
offset log and nowhere else.

Rules that keep a replay identical and order intact:

* a shard's rows are taken in order, and a shard whose item is skipped is skipped for the
  rest of the walk (its later items wait);
* a child shard is never taken in the same micro-batch as rows of its parents, so per key a
  parent's rows land in an earlier micro-batch than its children's;
* under ``Trigger.AvailableNow`` rows that arrived after the cutoff are dropped along with
  the rest of their shard's reads: the query will not read them, and the next query starts
  from the offset, not from what was staged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kinesis_actors.consumer import SavedShard, ShardKey, encode_positions, parse_positions
from kinesis_actors.records import Position

__all__ = ["Plan", "Stage", "StagedItem"]

_SEQUENCE, _SUB_SEQUENCE, _ARRIVAL, _DATA = 2, 3, 6, 7


@dataclass(slots=True)
class StagedItem:
    """One read's rows from one shard (``RECORD_SCHEMA``), or a finished marker (``None``)."""

    key: ShardKey
    arrow: pa.RecordBatch | None
    nbytes: int = 0

    @property
    def rows(self) -> int:
        return 0 if self.arrow is None else int(self.arrow.num_rows)


@dataclass(slots=True)
class Plan:
    """One micro-batch: its end offset, and the rows per shard that lead there."""

    end: dict[str, Any]
    batches: dict[ShardKey, list[pa.RecordBatch]] = field(default_factory=dict)
    rows: int = 0
    nbytes: int = 0


def data_bytes(batch: pa.RecordBatch) -> int:
    """The bytes of the ``data`` column's values: what ReadMaxBytes limits."""
    column = batch.column(_DATA)
    return int(pc.sum(pc.binary_length(column)).as_py() or 0)


def last_position(batch: pa.RecordBatch) -> Position:
    last = batch.num_rows - 1
    return Position(
        batch.column(_SEQUENCE)[last].as_py(), int(batch.column(_SUB_SEQUENCE)[last].as_py())
    )


class Stage:
    """Staged reads of every shard, bounded by the caller (see ``records`` and ``nbytes``)."""

    def __init__(self, streams: tuple[str, ...]) -> None:
        self._streams = streams
        self._items: list[StagedItem] = []
        self._past_cutoff: set[ShardKey] = set()
        self.records = 0
        self.nbytes = 0
        self.cutoff_ms: int | None = None
        """AvailableNow: the arrival time (epoch ms) past which rows are not read."""

    def __len__(self) -> int:
        return len(self._items)

    def add(self, key: ShardKey, arrow: pa.RecordBatch) -> None:
        """Stage one read's rows from ``key``."""
        if key in self._past_cutoff or arrow.num_rows == 0:
            return
        size = data_bytes(arrow)
        self._items.append(StagedItem(key, arrow, size))
        self.records += int(arrow.num_rows)
        self.nbytes += size

    def add_finished(self, key: ShardKey) -> None:
        """``key`` was read to its end: the next offset that takes this marker says finished."""
        self._items.append(StagedItem(key, None))

    def past_cutoff(self, key: ShardKey) -> bool:
        return key in self._past_cutoff

    def take(
        self,
        start: Mapping[str, Any],
        *,
        max_rows: int | None,
        max_bytes: int | None,
        parents: Callable[[ShardKey], tuple[str, ...]],
    ) -> Plan:
        """Cut the next micro-batch after ``start`` (a positions document).

        At least one row is taken when any is admissible, even if it alone exceeds
        ``max_bytes``: a record larger than the limit must not stop the stream.
        """
        entries = parse_positions(start, self._streams)
        plan = Plan(end={})
        blocked: set[ShardKey] = set()
        kept: list[StagedItem] = []
        items = self._items
        full = False
        for index, item in enumerate(items):
            if full:
                kept.extend(items[index:])
                break
            key = item.key
            if key in blocked or key in self._past_cutoff:
                if key not in self._past_cutoff:
                    kept.append(item)
                continue
            family = [(key[0], parent) for parent in parents(key)]
            if any(p in plan.batches or p in blocked for p in family):
                blocked.add(key)
                kept.append(item)
                continue
            if item.arrow is None:
                entries[key] = SavedShard(finished=True)
                continue
            arrow, late = self._before_cutoff(item.arrow)
            if arrow is None:
                self._past_cutoff.add(key)  # nothing left before the cutoff: done for good
                continue
            whole = item.nbytes if not late else data_bytes(arrow)
            rows = int(arrow.num_rows)
            room_rows = rows if max_rows is None else max_rows - plan.rows
            cut = min(rows, room_rows)
            if max_bytes is not None:
                cut = min(cut, self._rows_within(arrow, max_bytes - plan.nbytes, plan.rows == 0))
            if cut <= 0:
                kept.extend(items[index:])
                break
            taken = arrow if cut == rows else arrow.slice(0, cut)
            size = whole if cut == rows else data_bytes(taken)
            plan.batches.setdefault(key, []).append(taken)
            plan.rows += cut
            plan.nbytes += size
            entries[key] = SavedShard(committed=last_position(taken))
            if cut < rows:
                # The rest before the cutoff waits for the next take; late rows are dropped.
                kept.append(StagedItem(key, arrow.slice(cut), whole - size))
                full = True
                continue
            if late:
                self._past_cutoff.add(key)
            if max_rows is not None and plan.rows >= max_rows:
                full = True
        self._items = kept
        self.records = sum(item.rows for item in kept)
        self.nbytes = sum(item.nbytes for item in kept)
        plan.end = encode_positions(entries, self._streams)
        return plan

    def _before_cutoff(self, arrow: pa.RecordBatch | None) -> tuple[pa.RecordBatch | None, bool]:
        """The leading rows that arrived by the cutoff (None if none), and whether any did not.

        Once a shard's on-time rows are all taken, ``take`` marks it past the cutoff.
        """
        assert arrow is not None
        if self.cutoff_ms is None:
            return arrow, False
        stamps = arrow.column(_ARRIVAL).cast(pa.int64())
        late = pc.greater(stamps, self.cutoff_ms)
        if not pc.any(late).as_py():
            return arrow, False
        first_late = int(pc.index(late, True).as_py())
        return (arrow.slice(0, first_late) if first_late else None), True

    @staticmethod
    def _rows_within(arrow: pa.RecordBatch, room: int, first: bool) -> int:
        """How many leading rows fit in ``room`` bytes of data (at least one if ``first``)."""
        sizes = pc.binary_length(arrow.column(_DATA)).cast(pa.int64())
        total = pc.cumulative_sum(sizes)
        fitting = int(pc.sum(pc.less_equal(total, room)).as_py() or 0)
        return max(fitting, 1) if first else fitting
