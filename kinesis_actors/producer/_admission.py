"""The producer's bound: records and bytes accepted but not yet acknowledged or failed.

This is the brake the KPL lacked (lesson 16): ``put`` takes room here before its record enters
the pipeline, and room comes back only when a record settles. A ``put`` that finds no room
waits in a first-in, first-out line and is woken by the release that makes room for it, never
by polling. Big records cannot be starved by a stream of small ones, because nobody overtakes
the head of the line.

The counting is sans-IO (:meth:`Admission.try_take`, :meth:`Admission.release`); waiting uses
one ``anyio.Event`` per waiting ``put``.
"""

from __future__ import annotations

from collections import deque

import anyio

__all__ = ["Admission", "Waiter"]


class Waiter:
    """One ``put`` waiting for room; granted means the room is already taken for it."""

    __slots__ = ("event", "granted", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.granted = False
        self.event = anyio.Event()


class Admission:
    """Counts outstanding records and bytes against two limits, with a FIFO line of waiters.

    A record fits if fewer than ``max_records`` are outstanding and its bytes fit under
    ``max_bytes``, or if nothing at all is outstanding (so one record larger than the byte
    limit can still go, alone).
    """

    __slots__ = (
        "_line",
        "closed",
        "max_bytes",
        "max_records",
        "nbytes",
        "peak_bytes",
        "peak_records",
        "records",
    )

    def __init__(self, max_records: int, max_bytes: int) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.records = 0
        self.nbytes = 0
        self.peak_records = 0
        self.peak_bytes = 0
        self.closed = False
        # One waiter per suspended put call: bounded by the callers, who are themselves waiting.
        self._line: deque[Waiter] = deque()

    @property
    def waiting(self) -> int:
        """How many ``put`` calls are waiting for room."""
        return len(self._line)

    def _fits(self, size: int) -> bool:
        if self.records == 0:
            return True
        return self.records < self.max_records and self.nbytes + size <= self.max_bytes

    def _take(self, size: int) -> None:
        self.records += 1
        self.nbytes += size
        self.peak_records = max(self.peak_records, self.records)
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    def try_take(self, size: int) -> bool:
        """Take room for one record of ``size`` bytes now, unless someone waits or it is full."""
        if self._line or not self._fits(size):
            return False
        self._take(size)
        return True

    def enqueue(self, size: int) -> Waiter:
        """Join the line; the waiter's event is set once room was taken for it."""
        waiter = Waiter(size)
        self._line.append(waiter)
        self._grant()
        return waiter

    def withdraw(self, waiter: Waiter) -> None:
        """A waiting ``put`` gave up (it was cancelled): leave the line, or give back its room."""
        if waiter.granted:
            self.release(1, waiter.size)
        elif waiter in self._line:  # not if :meth:`close` emptied the line
            self._line.remove(waiter)
            self._grant()  # the head may have been the one blocking the others

    def close(self) -> None:
        """No room for anyone any more: wake every waiting ``put`` without granting it.

        A woken waiter that is not ``granted`` must give up (the producer raises
        ProducerClosedError); no room was taken for it, so none is given back.
        """
        self.closed = True
        line = self._line
        while line:
            line.popleft().event.set()

    def release(self, records: int, nbytes: int) -> None:
        """``records`` records of ``nbytes`` in total settled: give the room to the line."""
        self.records -= records
        self.nbytes -= nbytes
        if self.records < 0 or self.nbytes < 0:
            raise RuntimeError("released more than was taken")
        self._grant()

    def _grant(self) -> None:
        line = self._line
        while line and self._fits(line[0].size):
            waiter = line.popleft()
            self._take(waiter.size)
            waiter.granted = True
            waiter.event.set()
