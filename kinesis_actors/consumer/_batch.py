"""``RecordBatch``: the user records of one read from one shard, as Arrow, with its position."""

from __future__ import annotations

import pyarrow as pa

from ..records import Position

__all__ = ["RecordBatch"]


class RecordBatch:
    """User records from one shard, in order: ``.arrow`` has exactly ``RECORD_SCHEMA``.

    ``last_position`` is the (sequence, sub-sequence) of the last row: committing the batch
    commits everything up to it. ``millis_behind_latest`` is what the service said of the
    shard with this read. :meth:`slice` makes a batch of some of the rows, for committing part
    of a batch (for instance, up to a row in the middle of an aggregate). ``origin`` is the
    consumer that read it (its slices keep it): ``commit`` takes only its own consumer's
    batches, so a batch of another consumer of the same stream cannot move this one's
    position past records it never delivered.
    """

    __slots__ = ("_arrow", "last_position", "millis_behind_latest", "origin", "shard_id", "stream")

    def __init__(
        self,
        stream: str,
        shard_id: str,
        arrow: pa.RecordBatch,
        last_position: Position,
        millis_behind_latest: int | None = None,
        *,
        origin: object = None,
    ) -> None:
        self.origin = origin
        self.stream = stream
        self.shard_id = shard_id
        self._arrow = arrow
        self.last_position = last_position
        self.millis_behind_latest = millis_behind_latest

    @property
    def arrow(self) -> pa.RecordBatch:
        return self._arrow

    def __len__(self) -> int:
        return int(self._arrow.num_rows)

    def slice(self, offset: int = 0, length: int | None = None) -> RecordBatch:
        """The rows ``[offset, offset + length)`` as a batch of their own (not empty)."""
        arrow = self._arrow.slice(offset, length)
        rows = int(arrow.num_rows)
        if rows == 0:
            raise ValueError("a RecordBatch slice must keep at least one row")
        last = rows - 1
        position = Position(
            arrow.column(2)[last].as_py(),
            arrow.column(3)[last].as_py(),
        )
        return RecordBatch(
            self.stream,
            self.shard_id,
            arrow,
            position,
            self.millis_behind_latest,
            origin=self.origin,
        )

    def __repr__(self) -> str:
        return (
            f"<RecordBatch {self.stream}/{self.shard_id} rows={len(self)} "
            f"last={self.last_position.sequence_number}:{self.last_position.sub_sequence_number} "
            f"behind={self.millis_behind_latest}ms>"
        )
