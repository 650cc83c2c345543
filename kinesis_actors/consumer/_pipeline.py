"""One shard's state between its reader and whoever takes its batches.

A :class:`ShardPipeline` owns the shard's bounded buffer and credit gate (the runtime's
protocol: the reader takes a credit before each read and offers without waiting, the taker
returns the credit), and the shard's three positions:

* ``delivered``: the last user record put into the buffer (a reader restart resumes here);
* ``taken``: the last one handed to the application;
* ``committed``: the last one the application committed (positions and rewinds use it).

It also decides when the shard is *released* (its children may be read) and *finished*
(positions say ``finished``). ``rewind()`` starts the shard over from its committed position:
a new buffer and gate (stale batches are dropped with them) and a new reader generation.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from ..records import MAGIC, Position, build_record_batch
from ..runtime import CreditGate, FullPolicy, Mailbox
from ._batch import RecordBatch
from ._config import StartingPosition
from ._metrics import ShardMetrics
from ._positions import SavedShard, ShardKey, later, order
from ._reader import ShardRead

__all__ = ["ShardPipeline"]


class ShardPipeline:
    """Buffer, credits and positions of one shard (see module doc). Loop-bound, not thread-safe."""

    def __init__(
        self,
        key: ShardKey,
        saved: SavedShard,
        prefetch: int,
        *,
        on_change: Callable[[], None] = lambda: None,
        on_arrival: Callable[[ShardPipeline], None] = lambda _: None,
        origin: object = None,
    ) -> None:
        self.key = key
        self._origin = origin  # the consumer, stamped on every batch (``RecordBatch.origin``)
        self.stream, self.shard_id = key
        self.metrics = ShardMetrics()
        self._prefetch = prefetch
        self._on_change = on_change
        self._on_arrival = on_arrival
        self.committed: Position | None = saved.committed
        self.delivered: Position | None = saved.committed
        self.taken: Position | None = saved.committed
        self.start: StartingPosition = saved.start or StartingPosition.trim_horizon()
        self.end_reached = saved.finished
        self.children: tuple[str, ...] = ()
        self.run_mode = False
        self.generation = 0
        self.reader_scope: anyio.CancelScope | None = None
        self.dropped = False
        """Set by :meth:`drop`: the lease is lost, the reader returns for good."""
        self.backpressured_since: float | None = None
        """When the reader began waiting for a credit (None: it is not waiting)."""
        self.let_go = anyio.Event()
        """Set when the reader may end for good: the shard is finished, or nobody can rewind
        it (the consumer is iterated, not run)."""
        self._new_generation()
        if saved.finished:
            self.buffer.close()
            self.metrics.state = "finished"
            self.let_go.set()

    def _new_generation(self) -> None:
        name = f"{self.stream}/{self.shard_id}"
        self.gate = CreditGate(self._prefetch, name=name)
        # FAIL: if a credit ever lied about room, the offer raises instead of waiting.
        self.buffer: Mailbox[RecordBatch] = Mailbox(self._prefetch, FullPolicy.FAIL, name=name)

    # -- reader side ------------------------------------------------------------------------

    def backpressure_ended(self) -> None:
        if self.backpressured_since is not None:
            self.metrics.backpressured_seconds += anyio.current_time() - self.backpressured_since
            self.backpressured_since = None

    def backpressured_seconds(self) -> float:
        """Time the reader waited for credits so far, including a wait in progress."""
        since = self.backpressured_since
        ongoing = 0.0 if since is None else anyio.current_time() - since
        return self.metrics.backpressured_seconds + ongoing

    def cursor(self) -> tuple[StartingPosition, Position | None]:
        """Where a (re)started reader begins, and the user records to drop there."""
        if self.delivered is not None:
            return StartingPosition.at_sequence_number(
                self.delivered.sequence_number
            ), self.delivered
        return self.start, None

    def accept(self, read: ShardRead, skip: Position | None, generation: int) -> None:
        """Turn one read into a batch and offer it (the reader holds a credit for it)."""
        if generation != self.generation:
            return  # a rewind happened while this read was in flight: its credit is gone too
        metrics = self.metrics
        metrics.reads += 1
        metrics.millis_behind_latest = read.millis_behind_latest
        metrics.last_read_records = len(read.records)
        metrics.last_read_bytes = read.size
        metrics.records += len(read.records)
        metrics.bytes += read.size
        if not read.records:
            metrics.empty_reads += 1
        built = build_record_batch(self.stream, self.shard_id, read.records, after=skip)
        rows = int(built.batch.num_rows)
        if rows and built.last_position is not None:
            metrics.user_records += rows
            metrics.aggregated_records += _aggregates(read, rows)
            metrics.batches += 1
            batch = RecordBatch(
                self.stream,
                self.shard_id,
                built.batch,
                built.last_position,
                read.millis_behind_latest,
                origin=self._origin,
            )
            self.gate.delivered()
            self.buffer.send_nowait(batch)
            self.delivered = built.last_position
            self._on_arrival(self)
        else:
            self.gate.withdraw()
        if read.finished:
            self.end_reached = True
            self.children = read.child_shards
            self.buffer.close()
            self.metrics.state = "ended"
            self._check_settled()
            self._on_change()

    # -- taker side -------------------------------------------------------------------------

    def take_nowait(self) -> RecordBatch:
        """Take the next buffered batch (:class:`anyio.WouldBlock` if none)."""
        batch = self.buffer.receive_nowait()
        self._took(batch)
        return batch

    async def take(self) -> RecordBatch | None:
        """Wait for the next batch; None once the shard has ended and everything was taken."""
        try:
            batch = await self.buffer.receive()
        except anyio.EndOfStream:
            return None
        self._took(batch)
        return batch

    def _took(self, batch: RecordBatch) -> None:
        self.gate.consumed()
        self.taken = batch.last_position
        if self.end_reached and len(self.buffer) == 0:
            self._on_change()

    def commit(self, position: Position) -> None:
        """Everything up to ``position`` is processed (positions never move backwards)."""
        self.committed = later(self.committed, position)
        self._check_settled()
        if self.end_reached:
            self._on_change()

    def rewind(self) -> None:
        """Start over from the committed position: drop what is buffered, restart the reader."""
        self.generation += 1
        self.metrics.restarts += 1
        self.buffer.close()
        self.buffer.purge()
        self._new_generation()
        self.delivered = self.committed
        self.taken = self.committed
        self.end_reached = False
        self.metrics.state = "reading"
        if self.reader_scope is not None:
            self.reader_scope.cancel()

    def drop(self) -> int:
        """The shard's lease was lost: stop here for good and drop what was not taken.

        The new owner reads the dropped batches again from the lease's last checkpoint
        (at-least-once). A read in flight is ignored when it lands (a new generation), and a
        taker meets the end of the buffer. Returns how many batches were dropped.
        """
        self.generation += 1
        self.dropped = True
        dropped = len(self.buffer)
        self.buffer.close()
        self.buffer.purge()
        self.metrics.state = "lost"
        self.let_go.set()
        if self.reader_scope is not None:
            self.reader_scope.cancel()  # its actor sees ``dropped`` and returns
        return dropped

    def delivered_through(self, position: Position) -> bool:
        """Whether this pipeline delivered ``position`` (a commit of a batch it never delivered,
        read under an earlier lease of the same shard, must not move it)."""
        return self.delivered is not None and order(position) <= order(self.delivered)

    # -- state ------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Read to the end and everything delivered committed: positions say ``finished``."""
        return self.end_reached and _same(self.committed, self.delivered)

    @property
    def released(self) -> bool:
        """Children may be read: ended, everything taken, and under ``run()`` committed too."""
        if not self.end_reached or len(self.buffer) or self.gate.credits.outstanding:
            return False
        if self.run_mode:
            return self.finished
        return _same(self.taken, self.delivered)

    def _check_settled(self) -> None:
        if self.finished:
            self.metrics.state = "finished"
            self.let_go.set()

    def saved(self) -> SavedShard:
        if self.finished:
            return SavedShard(finished=True)
        if self.committed is not None:
            return SavedShard(committed=self.committed)
        return SavedShard(start=self.start)


def _same(a: Position | None, b: Position | None) -> bool:
    if a is None or b is None:
        return a is b
    return order(a) == order(b)


def _aggregates(read: ShardRead, rows: int) -> int:
    """Kinesis records of this read that look like KPL aggregates (by their magic bytes)."""
    if rows == len(read.records):
        return 0  # one user record per Kinesis record: nothing was expanded
    return sum(1 for record in read.records if record["Data"][:4] == MAGIC)
