"""What ``put`` returns: a handle that settles once the service acknowledged the record."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple

import anyio

__all__ = ["PutHandle", "PutResult"]


class PutResult(NamedTuple):
    """Where an acknowledged record landed.

    ``sub_sequence_number`` is the record's index inside its KPL aggregate (0 when it was sent
    on its own), so ``(sequence_number, sub_sequence_number)`` is the position a consumer sees.
    """

    shard_id: str
    sequence_number: str
    sub_sequence_number: int


class PutHandle:
    """The outcome of one ``put``: ``await handle`` gives the :class:`PutResult` or raises.

    It can be awaited any number of times, from any task. :meth:`done`, :meth:`result` and
    :meth:`exception` look without waiting (the sync producer uses them after ``flush``).
    The event is created lazily, so a record acknowledged before anyone waits costs no event;
    so is the :class:`PutResult`, built when asked for from the position kept in three slots
    (most results are never read: allocating one per record cost CPU and garbage collections).
    """

    __slots__ = ("_error", "_event", "_sequence_number", "_shard_id", "_sub_sequence_number")

    def __init__(self) -> None:
        self._error: BaseException | None = None
        self._event: anyio.Event | None = None
        self._sequence_number: str | None = None  # set (with the other two) once acknowledged

    def done(self) -> bool:
        """Whether the record was acknowledged or failed."""
        return self._sequence_number is not None or self._error is not None

    def result(self) -> PutResult:
        """The result if acknowledged; raises the failure, or ``RuntimeError`` if not settled."""
        if self._error is not None:
            raise self._error
        if self._sequence_number is None:
            raise RuntimeError("the record is not acknowledged yet; await the handle")
        return PutResult(self._shard_id, self._sequence_number, self._sub_sequence_number)

    def exception(self) -> BaseException | None:
        """The failure, or ``None`` (also while not settled)."""
        return self._error

    async def wait(self) -> PutResult:
        """Wait until settled; return the result or raise the failure."""
        if not self.done():
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, PutResult]:
        return self.wait().__await__()

    def _acknowledged(self, shard_id: str, sequence_number: str, sub_sequence_number: int) -> None:
        if self._sequence_number is not None or self._error is not None:
            raise RuntimeError("a put handle settles once")
        self._shard_id = shard_id
        self._sub_sequence_number = sub_sequence_number
        self._sequence_number = sequence_number
        if self._event is not None:
            self._event.set()

    def _set_result(self, result: PutResult) -> None:
        self._acknowledged(*result)

    def _set_error(self, error: BaseException) -> None:
        if self.done():
            raise RuntimeError("a put handle settles once")
        self._error = error
        if self._event is not None:
            self._event.set()

    def __repr__(self) -> str:
        if self._error is not None:
            return f"<PutHandle failed: {self._error!r}>"
        if self._sequence_number is not None:
            return f"<PutHandle {self.result()}>"
        return "<PutHandle pending>"
