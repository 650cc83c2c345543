"""One shard's state between its reader and whoever takes its batches, with one owner.

A :class:`ShardPipeline` owns the shard's bounded buffer and credit gate (the runtime's
protocol: the reader takes a credit before each read and offers without waiting, the taker
returns the credit), and the shard's three positions:

* ``delivered``: the last user record put into the buffer (a reader restart resumes here);
* ``taken``: the last one handed to the application;
* ``committed``: the last one the application committed (positions and rewinds use it).

It also decides when the shard is *released* (its children may be read) and *finished*
(positions say ``finished``). ``rewind()`` starts the shard over from its committed position:
the buffer is purged (stale batches are dropped), the credit gate replaced and a new reader
generation begins.

The buffer is one mailbox for the shard's life, so it can be the mailbox of whoever takes
from it: under :meth:`Consumer.run` it is lent to the shard's processor actor
(``ChildSpec(mailbox=...)``), which receives batches from it as its own messages.

Every piece of its state is private and changes only through its methods, each named for the
side that calls it: the reader actor (:meth:`begin_generation`, :meth:`try_credit`,
:meth:`wait_credit`, :meth:`accept`, ...), the taker (:meth:`took` after the processor
received from :attr:`buffer`, :meth:`take`, :meth:`take_nowait`), the
application (:meth:`commit`), and the consumer (:meth:`set_mode`, :meth:`rewind`,
:meth:`drop`). Everyone else reads properties or :meth:`statistics` (a frozen copy). All callers
run on the consumer's event loop, so no method is interrupted by another.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from ..records import MAGIC, Position, build_record_batch
from ..runtime import CreditGate, FullPolicy, Mailbox
from ._batch import RecordBatch
from ._config import StartingPosition
from ._metrics import ShardMetrics, ShardState
from ._positions import SavedShard, ShardKey, later, order
from ._reader import ShardRead
from ._statistics import ShardStatistics

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
        self._key = key
        self._origin = origin  # the consumer, stamped on every batch (``RecordBatch.origin``)
        self._stream, self._shard_id = key
        self._metrics = ShardMetrics()
        self._prefetch = prefetch
        self._on_change = on_change
        self._on_arrival = on_arrival
        self._committed: Position | None = saved.committed
        self._delivered: Position | None = saved.committed
        self._taken: Position | None = saved.committed
        self._start: StartingPosition = saved.start or StartingPosition.trim_horizon()
        self._end_reached = saved.finished
        self._children: tuple[str, ...] = ()
        self._run_mode = False
        self._generation = 0
        self._reader_scope: anyio.CancelScope | None = None
        self._dropped = False  # set by drop(): the lease is lost, the reader returns for good
        self._backpressured_since: float | None = None  # when the reader began waiting
        # Set when the reader may end for good: the shard is finished, or nobody can rewind
        # it (the consumer is iterated, not run).
        self._let_go = anyio.Event()
        self._commit_seen = anyio.Event()  # set (and renewed) by every commit
        name = f"{self._stream}/{self._shard_id}"
        # The shard's buffer, one for its life: the mailbox of whoever takes from it (the
        # processor actor under run(), which receives from it as its own; the iterator under
        # ``async for``). FAIL: if a credit ever lied about room, the offer raises instead of
        # waiting. A rewind purges it and gives it a new credit gate.
        self._buffer: Mailbox[RecordBatch] = Mailbox(self._prefetch, FullPolicy.FAIL, name=name)
        self._gate = CreditGate(self._prefetch, name=name)
        if saved.finished:
            self._buffer.close()
            self._metrics.state = ShardState.FINISHED
            self._let_go.set()

    # -- what anyone may read ---------------------------------------------------------------

    @property
    def key(self) -> ShardKey:
        return self._key

    @property
    def stream(self) -> str:
        return self._stream

    @property
    def shard_id(self) -> str:
        return self._shard_id

    @property
    def committed(self) -> Position | None:
        return self._committed

    @property
    def end_reached(self) -> bool:
        """The reader met the shard's end (proved)."""
        return self._end_reached

    @property
    def children(self) -> tuple[str, ...]:
        """The shard's children, as its last read named them (empty before the end)."""
        return self._children

    @property
    def generation(self) -> int:
        """Incremented by every rewind and drop: a read of an older one is ignored."""
        return self._generation

    @property
    def dropped(self) -> bool:
        """The shard's lease was lost (:meth:`drop`): its reader returns for good."""
        return self._dropped

    @property
    def buffer(self) -> Mailbox[RecordBatch]:
        """The shard's bounded buffer, lent as the processor actor's mailbox
        (``ChildSpec(mailbox=...)``): the processor receives from it, then reports each batch
        with :meth:`took`. Only this pipeline sends to it, purges, closes or reopens it."""
        return self._buffer

    @property
    def depth(self) -> int:
        """Batches buffered now, not yet taken."""
        return len(self._buffer)

    @property
    def counters(self) -> ShardMetrics:
        """The shard's live counters. The pipeline writes its own; the reader it is handed to
        (``_reader``, ``_efo``) writes the reader's (throttles, iterators, subscriptions...).
        Everyone else reads :meth:`statistics`."""
        return self._metrics

    def statistics(self) -> ShardStatistics:
        """The shard's counters now, frozen (``Consumer.statistics()``)."""
        return ShardStatistics.of(
            self._metrics,
            buffer_depth=len(self._buffer),
            backpressured_seconds=self.backpressured_seconds(),
        )

    def backpressured_seconds(self) -> float:
        """Time the reader waited for credits so far, including a wait in progress."""
        since = self._backpressured_since
        ongoing = 0.0 if since is None else anyio.current_time() - since
        return self._metrics.backpressured_seconds + ongoing

    # -- the consumer's side ----------------------------------------------------------------

    def set_mode(self, mode: str | None) -> None:
        """How the application takes batches: ``"run"`` (a processor that commits, and may
        rewind the shard) or ``"iterate"`` (nobody rewinds: the reader may end at the end)."""
        self._run_mode = mode == "run"
        if mode == "iterate":
            self._let_go.set()

    # -- reader side ------------------------------------------------------------------------

    def begin_generation(
        self, scope: anyio.CancelScope
    ) -> tuple[int, StartingPosition, Position | None]:
        """A reader starts reading under ``scope`` (cancelled by a rewind or a drop): the
        generation it reads for, where it begins, and the user records to drop there."""
        self._reader_scope = scope
        self._metrics.state = ShardState.READING
        return (self._generation, *self.cursor())

    def cursor(self) -> tuple[StartingPosition, Position | None]:
        """Where a (re)started reader begins, and the user records to drop there."""
        if self._delivered is not None:
            return StartingPosition.at_sequence_number(
                self._delivered.sequence_number
            ), self._delivered
        return self._start, None

    def try_credit(self) -> bool:
        """Take a credit for one read if the buffer has room for its batch."""
        return self._gate.try_acquire()

    async def wait_credit(self) -> None:
        """Wait for a credit (the taker returns one per batch taken); counted as backpressure."""
        gate = self._gate  # a rewind replaces it: the wait is cancelled with its generation
        self._backpressured_since = anyio.current_time()
        try:
            await gate.acquire()
        finally:
            self._backpressure_ended()

    def withdraw_credit(self, generation: int) -> None:
        """A read of ``generation`` failed: its credit must not leak (a rewind since took it)."""
        if generation == self._generation:
            self._gate.withdraw()

    def pin_start(self, start: StartingPosition) -> None:
        """``LATEST`` is pinned to the first iterator's time, so a restart does not skip."""
        if self._start.type == "LATEST":
            self._start = start

    def failed(self) -> None:
        """The reader stopped the consumer with a typed, final error."""
        self._metrics.state = ShardState.FAILED

    @property
    def reader_may_end(self) -> bool:
        """The reader may end for good (see ``wait_let_go``)."""
        return self._let_go.is_set()

    async def wait_let_go(self) -> None:
        """Until the reader may end for good (see ``set_mode``, ``drop``)."""
        await self._let_go.wait()

    def _backpressure_ended(self) -> None:
        if self._backpressured_since is not None:
            elapsed = anyio.current_time() - self._backpressured_since
            self._metrics.backpressured_seconds += elapsed
            self._backpressured_since = None

    def accept(self, read: ShardRead, skip: Position | None, generation: int) -> None:
        """Turn one read into a batch and offer it (the reader holds a credit for it)."""
        if generation != self._generation:
            return  # a rewind happened while this read was in flight: its credit is gone too
        metrics = self._metrics
        metrics.reads += 1
        metrics.millis_behind_latest = read.millis_behind_latest
        metrics.last_read_records = len(read.records)
        metrics.last_read_bytes = read.size
        metrics.records += len(read.records)
        metrics.bytes += read.size
        if not read.records:
            metrics.empty_reads += 1
            # No batch to build: an idle shard's reads are most of a large consumer's, and
            # an empty Arrow batch cost 67 us to make and throw away.
            built = None
        else:
            built = build_record_batch(self._stream, self._shard_id, read.records, after=skip)
        rows = 0 if built is None else int(built.batch.num_rows)
        if built is not None and rows and built.last_position is not None:
            metrics.user_records += rows
            metrics.aggregated_records += _aggregates(read, rows)
            metrics.batches += 1
            batch = RecordBatch(
                self._stream,
                self._shard_id,
                built.batch,
                built.last_position,
                read.millis_behind_latest,
                origin=self._origin,
            )
            self._gate.delivered()
            self._buffer.send_nowait(batch)
            self._delivered = built.last_position
            self._on_arrival(self)
        else:
            self._gate.withdraw()
        if read.finished:
            self._end_reached = True
            self._children = read.child_shards
            self._buffer.close()
            metrics.state = ShardState.ENDED
            self._check_settled()
            self._on_change()

    # -- taker side -------------------------------------------------------------------------

    def take_nowait(self) -> RecordBatch:
        """Take the next buffered batch (:class:`anyio.WouldBlock` if none)."""
        batch = self._buffer.receive_nowait()
        self._took(batch)
        return batch

    async def take(self) -> RecordBatch | None:
        """Wait for the next batch; None once the shard has ended and everything was taken."""
        try:
            batch = await self._buffer.receive()
        except anyio.EndOfStream:
            return None
        self._took(batch)
        return batch

    def took(self, batch: RecordBatch) -> None:
        """The processor actor received ``batch`` from :attr:`buffer`: its credit goes back
        to the reader."""
        self._took(batch)

    def _took(self, batch: RecordBatch) -> None:
        self._gate.consumed()
        self._taken = batch.last_position
        if self._end_reached and len(self._buffer) == 0:
            self._on_change()

    def commit(self, position: Position) -> None:
        """Everything up to ``position`` is processed (positions never move backwards)."""
        self._committed = later(self._committed, position)
        self._commit_seen.set()
        self._commit_seen = anyio.Event()
        self._check_settled()
        if self._end_reached:
            self._on_change()

    def rewind(self) -> None:
        """Start over from the committed position: drop what is buffered, restart the reader."""
        self._generation += 1
        self._metrics.restarts += 1
        self._buffer.purge()
        self._buffer.reopen()  # closed if the reader had met the end: it reads again
        self._gate = CreditGate(self._prefetch, name=self._buffer.name)  # old credits die
        self._delivered = self._committed
        self._taken = self._committed
        self._end_reached = False
        self._metrics.state = ShardState.READING
        if self._reader_scope is not None:
            self._reader_scope.cancel()

    def drop(self) -> int:
        """The shard's lease was lost: stop here for good and drop what was not taken.

        The new owner reads the dropped batches again from the lease's last checkpoint
        (at-least-once). A read in flight is ignored when it lands (a new generation), and a
        taker meets the end of the buffer. Returns how many batches were dropped.
        """
        self._generation += 1
        self._dropped = True
        dropped = len(self._buffer)
        self._buffer.close()
        self._buffer.purge()
        self._metrics.state = ShardState.LOST
        self._let_go.set()
        if self._reader_scope is not None:
            self._reader_scope.cancel()  # its actor sees ``dropped`` and returns
        return dropped

    async def wait_taken_committed(self) -> None:
        """Return once everything the application took is committed (a lease asked for by
        another worker may then be handed over with no record delivered twice)."""
        while not _same(self._taken, self._committed):
            await self._commit_seen.wait()

    def delivered_through(self, position: Position) -> bool:
        """Whether this pipeline delivered ``position`` (a commit of a batch it never delivered,
        read under an earlier lease of the same shard, must not move it)."""
        return self._delivered is not None and order(position) <= order(self._delivered)

    # -- state ------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Read to the end and everything delivered committed: positions say ``finished``."""
        return self._end_reached and _same(self._committed, self._delivered)

    @property
    def released(self) -> bool:
        """Children may be read: ended, everything taken, and under ``run()`` committed too."""
        if not self._end_reached or len(self._buffer) or self._gate.credits.outstanding:
            return False
        if self._run_mode:
            return self.finished
        return _same(self._taken, self._delivered)

    def _check_settled(self) -> None:
        if self.finished:
            self._metrics.state = ShardState.FINISHED
            self._let_go.set()

    def saved(self) -> SavedShard:
        if self.finished:
            return SavedShard(finished=True)
        if self._committed is not None:
            return SavedShard(committed=self._committed)
        return SavedShard(start=self._start)


def _same(a: Position | None, b: Position | None) -> bool:
    if a is None or b is None:
        return a is b
    return order(a) == order(b)


def _aggregates(read: ShardRead, rows: int) -> int:
    """Kinesis records of this read that look like KPL aggregates (by their magic bytes)."""
    if rows == len(read.records):
        return 0  # one user record per Kinesis record: nothing was expanded
    return sum(1 for record in read.records if record["Data"][:4] == MAGIC)
