"""What ``put`` returns: a handle that settles once the service acknowledged the record.

Outcomes are kept in columns, a block of records at a time (:class:`Outcomes`: one per
``put_many`` call, one per :data:`PUT_BLOCK` single puts); a :class:`PutHandle` is a view of
one slot. Records waiting in the queue then hold no object of their own that the garbage
collector keeps tracking: measured with 100-byte records, collecting a tracked object per
queued record cost 0.7-0.9 µs a record (135 young and one full collection per 100,000), a
sixth of ``put_many``'s CPU. A handle the caller drops is freed at once, and a caller keeping
handles keeps results, never records.
"""

from __future__ import annotations

import operator
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, overload

import anyio

__all__ = [
    "FAILED",
    "NO_OUTCOMES",
    "PUT_BLOCK",
    "Outcomes",
    "PutHandle",
    "PutHandles",
    "PutResult",
    "fail_unsent",
]

PUT_BLOCK = 256  # single puts sharing one Outcomes (a kept handle keeps ~6 KB of results)


class PutResult(NamedTuple):
    """Where an acknowledged record landed.

    ``sub_sequence_number`` is the record's index inside its KPL aggregate (0 when it was sent
    on its own), so ``(sequence_number, sub_sequence_number)`` is the position a consumer sees.
    """

    shard_id: str
    sequence_number: str
    sub_sequence_number: int


FAILED: tuple[str, str] = ("", "")
"""What :attr:`Outcomes.landed` holds for a failed slot (its error is in ``errors``)."""


class Outcomes:
    """How each record of a block ended, one slot per record: written by the producer's
    ledger (each slot once), read through :class:`PutHandle` views.

    ``landed`` holds an acknowledged slot's ``(shard_id, sequence_number)``, one tuple
    shared by the records of a Kinesis record, :data:`FAILED` for a failed slot and ``None``
    for one not settled; ``sub_sequence_numbers`` its index in its aggregate. Two columns, not
    three and the errors' lookup: the records of an aggregate come from as many blocks as it
    has records when their key is alone on its shard (a thousand keys over 1,024 shards), and
    each column is a cache line a record touched far from the last one (measured: 236 ns a
    record settled that way against 80 in block order; 168 ns with two columns).

    ``errors`` and ``events`` are sparse (most records succeed, and most handles are never
    awaited before they settle). ``events`` is created on first use, by a waiter on the
    loop; ``errors`` at once, since ``SyncProducer`` may fail slots from its caller's thread
    while the loop fails others (two threads creating it could lose a failure).

    ``unretrieved`` holds the failed slots whose error counts against the producer
    (``fail_on_error``) until a handle gives it to the caller (:meth:`PutHandle.exception`): the
    ledger adds a slot before failing it, so a caller who sees the error can always claim it.
    """

    __slots__ = ("errors", "events", "landed", "sub_sequence_numbers", "unretrieved")

    def __init__(self, size: int) -> None:
        self.landed: list[tuple[str, str] | None] = [None] * size
        self.sub_sequence_numbers: list[int] = [0] * size
        self.errors: dict[int, BaseException] = {}
        self.events: dict[int, anyio.Event] | None = None
        self.unretrieved: set[int] | None = None

    def __len__(self) -> int:
        return len(self.landed)

    def done(self, slot: int) -> bool:
        return self.landed[slot] is not None

    def acknowledge(
        self, slot: int, shard_id: str, sequence_number: str, sub_sequence_number: int
    ) -> None:
        """Slot ``slot`` was written there (the ledger inlines this on its hot path)."""
        if self.landed[slot] is not None:
            raise RuntimeError("a put handle settles once")
        self.sub_sequence_numbers[slot] = sub_sequence_number  # first: done() reads landed
        self.landed[slot] = (shard_id, sequence_number)
        if self.events is not None:
            self.wake(slot)

    def fail(self, slot: int, error: BaseException) -> None:
        """Slot ``slot`` failed with ``error``."""
        if self.landed[slot] is not None:
            raise RuntimeError("a put handle settles once")
        self.errors[slot] = error  # first: a slot that reads as done has its error
        self.landed[slot] = FAILED
        if self.events is not None:
            self.wake(slot)

    def wake(self, slot: int) -> None:
        """Wake whoever waits for slot ``slot``, if anyone does."""
        assert self.events is not None
        event = self.events.pop(slot, None)
        if event is not None:
            event.set()


NO_OUTCOMES = Outcomes(0)
"""What a spare entry (settled, waiting to be refilled) points at: no block, so a spare keeps
no caller's results alive, and settling it again fails loudly (it has no slot)."""


class PutHandle:
    """The outcome of one ``put``: ``await handle`` gives the :class:`PutResult` or raises.

    It can be awaited any number of times, from any task. :meth:`done`, :meth:`result` and
    :meth:`exception` look without waiting (the sync producer uses them after ``flush``).
    ``PutHandle()`` makes a handle of its own (``put_many(handles=...)`` settles those); the
    producer hands out views of its :class:`Outcomes` blocks.
    """

    __slots__ = ("_outcomes", "_slot")

    def __init__(self) -> None:
        self._outcomes = Outcomes(1)
        self._slot = 0

    @classmethod
    def _view(cls, outcomes: Outcomes, slot: int) -> PutHandle:
        handle = _new_handle(cls)
        handle._outcomes = outcomes
        handle._slot = slot
        return handle

    def done(self) -> bool:
        """Whether the record was acknowledged or failed."""
        return self._outcomes.done(self._slot)

    def result(self) -> PutResult:
        """The result if acknowledged; raises the failure, or ``RuntimeError`` if not settled."""
        outcomes, slot = self._outcomes, self._slot
        landed = outcomes.landed[slot]
        if landed is None or landed is FAILED:
            error = self.exception()
            if error is not None:
                raise error
            raise RuntimeError("the record is not acknowledged yet; await the handle")
        shard_id, sequence_number = landed
        return PutResult(shard_id, sequence_number, outcomes.sub_sequence_numbers[slot])

    def exception(self) -> BaseException | None:
        """The failure, or ``None`` (also while not settled).

        A failure given to the caller here, by :meth:`result` or by ``await handle`` is
        *retrieved*: leaving the producer's block no longer raises
        :class:`~kinesis_actors.errors.ProducerFailedError` for it (``fail_on_error``).
        """
        outcomes, slot = self._outcomes, self._slot
        error = outcomes.errors.get(slot)
        if error is not None:
            unretrieved = outcomes.unretrieved
            if unretrieved is not None:
                unretrieved.discard(slot)
        return error

    async def wait(self) -> PutResult:
        """Wait until settled; return the result or raise the failure."""
        if not self.done():
            outcomes = self._outcomes
            if outcomes.events is None:
                outcomes.events = {}
            event = outcomes.events.get(self._slot)
            if event is None:
                event = outcomes.events[self._slot] = anyio.Event()
            await event.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, PutResult]:
        return self.wait().__await__()

    def _set_result(self, result: PutResult) -> None:
        self._outcomes.acknowledge(self._slot, *result)

    def _set_error(self, error: BaseException) -> None:
        self._outcomes.fail(self._slot, error)

    def __eq__(self, other: object) -> bool:
        """Two views of the same record's slot are the same handle."""
        if not isinstance(other, PutHandle):
            return NotImplemented
        return self._outcomes is other._outcomes and self._slot == other._slot

    def __hash__(self) -> int:
        return hash((id(self._outcomes), self._slot))

    def __repr__(self) -> str:
        error = self._outcomes.errors.get(self._slot)  # looking is not retrieving
        if error is not None:
            return f"<PutHandle failed: {error!r}>"
        if self.done():
            return f"<PutHandle {self.result()}>"
        return "<PutHandle pending>"


_new_handle = object.__new__


class PutHandles(Sequence[PutHandle]):
    """Handles of a run of records, one per record in order, made when asked for: what
    ``put_many`` returns (a batch whose handles are never looked at costs no object per
    record).

    ``PutHandles(count)`` makes ``count`` unsettled ones, for a caller that hands handles out
    before its records reach the producer (``SyncProducer``); ``put_many(records,
    handles=...)`` settles them.
    """

    __slots__ = ("_outcomes",)

    def __init__(self, count: int) -> None:
        self._outcomes = Outcomes(count)

    @classmethod
    def _over(cls, outcomes: Outcomes) -> PutHandles:
        handles = _new_handle(cls)
        handles._outcomes = outcomes
        return handles

    def __len__(self) -> int:
        return len(self._outcomes)

    @overload
    def __getitem__(self, index: int) -> PutHandle: ...
    @overload
    def __getitem__(self, index: slice) -> list[PutHandle]: ...
    def __getitem__(self, index: int | slice) -> PutHandle | list[PutHandle]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = operator.index(index)
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("put_many handle index out of range")
        return PutHandle._view(self._outcomes, index)

    def __iter__(self) -> Iterator[PutHandle]:
        view, outcomes = PutHandle._view, self._outcomes
        for slot in range(len(outcomes)):
            yield view(outcomes, slot)

    def __repr__(self) -> str:
        done = sum(map(self._outcomes.done, range(len(self))))
        return f"<PutHandles {len(self)} records, {done} settled>"


def fail_unsent(handles: Iterable[PutHandle], error: BaseException) -> None:
    """Settle with ``error`` every one of ``handles`` not settled yet.

    For callers that hand out handles before their records reach a producer (``put_many``'s
    ``handles``, :class:`~kinesis_actors.sync.SyncProducer`'s buffer) when those records
    never will: each handle then says why, as every record's handle must.
    """
    for handle in handles:
        if not handle.done():
            handle._set_error(error)
