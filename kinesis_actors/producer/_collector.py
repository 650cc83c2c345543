"""Collecting records into PutRecords calls: full batches go at once, others after ``linger``.

A PutRecords call carries at most 500 records and at most 10 MiB; like the KPL the producer caps
a call at ``max_bytes`` (5 MiB by default). Lesson 21: a client that sent 501-record batches had
every such call rejected, so both limits are enforced here exactly, and the record limit cannot
be configured above the service's.

One batch is open at a time, so items leave in the order they came, within and across batches,
and the collector holds at most one batch (``max_records`` items, ``max_bytes`` bytes).

Sans-IO: the caller passes ``now`` and asks for :meth:`Collector.next_deadline` to know when to
call :meth:`Collector.due`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from .._validate import check_non_negative, check_positive
from ..errors import ConfigError

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_CALL_BYTES",
    "PUT_RECORDS_MAX_BYTES",
    "PUT_RECORDS_MAX_RECORDS",
    "Batch",
    "Collector",
]

PUT_RECORDS_MAX_RECORDS = 500
PUT_RECORDS_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_CALL_BYTES = 5 * 1024 * 1024
DEFAULT_LINGER = 0.1

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Batch(Generic[T]):
    """The items of one PutRecords call, in the order they were added.

    ``nbytes`` is the sum of the sizes given to :meth:`Collector.add`; ``oldest`` is when the
    first item was added.
    """

    items: tuple[T, ...]
    nbytes: int
    oldest: float

    def __len__(self) -> int:
        return len(self.items)


class Collector(Generic[T]):
    """Groups opaque items with a size into batches bounded by records and bytes.

    A batch is handed out when it is full (``max_records`` items, or no room for the next item
    within ``max_bytes``), when its oldest item has waited ``linger`` seconds (:meth:`due`), or
    on :meth:`drain`.
    """

    def __init__(
        self,
        max_records: int = PUT_RECORDS_MAX_RECORDS,
        max_bytes: int = DEFAULT_MAX_CALL_BYTES,
        linger: float = DEFAULT_LINGER,
    ) -> None:
        check_positive("max_records", max_records, integer=True)
        if max_records > PUT_RECORDS_MAX_RECORDS:
            raise ConfigError(
                f"max_records must be at most {PUT_RECORDS_MAX_RECORDS}, got {max_records!r}"
            )
        check_positive("max_bytes", max_bytes, integer=True)
        if max_bytes > PUT_RECORDS_MAX_BYTES:
            raise ConfigError(
                f"max_bytes must be at most {PUT_RECORDS_MAX_BYTES}, got {max_bytes!r}"
            )
        check_non_negative("linger", linger)
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._linger = float(linger)
        self._items: list[T] = []
        self._nbytes = 0
        self._oldest = 0.0

    @property
    def max_records(self) -> int:
        """The most items in one batch."""
        return self._max_records

    @property
    def max_bytes(self) -> int:
        """The most bytes in one batch."""
        return self._max_bytes

    @property
    def linger(self) -> float:
        """How long the oldest item of a batch that is not full waits before it is sent."""
        return self._linger

    @property
    def pending_bytes(self) -> int:
        """Bytes held in the open batch."""
        return self._nbytes

    def __len__(self) -> int:
        """Items held in the open batch."""
        return len(self._items)

    def add(self, item: T, size: int, now: float) -> list[Batch[T]]:
        """Add ``item`` of ``size`` bytes at ``now``; return the batches that became full.

        That is none, the open batch if ``item`` did not fit in it, and/or the batch holding
        ``item`` if it is full with it. Raises :class:`ValueError` for a size above ``max_bytes``
        (the producer rejects such records before they get here) or below zero.
        """
        if size < 0 or size > self._max_bytes:
            raise ValueError(f"item size must be between 0 and {self._max_bytes}, got {size!r}")
        full: list[Batch[T]] = []
        if self._items and self._nbytes + size > self._max_bytes:
            full.append(self._take())
        if not self._items:
            self._oldest = now
        self._items.append(item)
        self._nbytes += size
        if len(self._items) >= self._max_records or self._nbytes >= self._max_bytes:
            full.append(self._take())
        return full

    def due(self, now: float) -> list[Batch[T]]:
        """The open batch if its oldest item has waited at least ``linger`` at ``now``."""
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return []
        return [self._take()]

    def next_deadline(self) -> float | None:
        """When the open batch will be due, or ``None`` if nothing is held."""
        if not self._items:
            return None
        return self._oldest + self._linger

    def drain(self) -> list[Batch[T]]:
        """Everything held, as batches, regardless of ``linger`` (for flush and close)."""
        return [self._take()] if self._items else []

    def _take(self) -> Batch[T]:
        batch = Batch(tuple(self._items), self._nbytes, self._oldest)
        self._items = []
        self._nbytes = 0
        return batch
