"""Clocks, token buckets and per-second series: the sans-IO core of limit emulation."""

from __future__ import annotations

import time
from collections import deque

__all__ = ["EPSILON", "Clock", "SecondSeries", "TokenBucket"]

#: Tolerance for float error in refills (0.2 s at 5/s is 0.9999999999999998 tokens).
EPSILON = 1e-9


class Clock:
    """Monotonic seconds for buckets and epoch seconds for record timestamps.

    A manual clock stands still until :meth:`advance` moves it, so tests of limit emulation
    are deterministic. Both kinds report epoch time as the real epoch at start plus the
    elapsed (real or manual) seconds.
    """

    def __init__(self, manual: bool = False) -> None:
        self.manual = manual
        self._offset = 0.0
        self._start = time.monotonic()
        self._epoch = time.time()

    def now(self) -> float:
        """Seconds since the clock started."""
        if self.manual:
            return self._offset
        return time.monotonic() - self._start

    def epoch(self) -> float:
        return self._epoch + self.now()

    def advance(self, seconds: float) -> None:
        if not self.manual:
            raise RuntimeError("only a manual clock can be advanced")
        if seconds < 0:
            raise ValueError("a clock cannot go back")
        self._offset += seconds


class TokenBucket:
    """``rate`` tokens per second, holding at most ``capacity``; starts full.

    :meth:`take` is all or nothing; :meth:`charge` always succeeds and may leave the bucket
    in debt (for byte budgets charged after the answer's size is known). Hot loops call
    :meth:`refill` once and then read and lower ``level`` themselves.
    """

    __slots__ = ("_clock", "_updated", "capacity", "level", "rate")

    def __init__(self, rate: float, capacity: float, clock: Clock) -> None:
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self.level = capacity
        self._updated = clock.now()

    def refill(self) -> float:
        """Add what has accrued since the last refill; ``level`` is then current."""
        return self._refill()

    def _refill(self) -> float:
        now = self._clock.now()
        elapsed = now - self._updated
        if elapsed > 0:
            self.level = min(self.capacity, self.level + elapsed * self.rate)
            self._updated = now
        return self.level

    @property
    def tokens(self) -> float:
        return self._refill()

    def has(self, amount: float) -> bool:
        return self._refill() >= amount - EPSILON

    def take(self, amount: float) -> bool:
        if self._refill() >= amount - EPSILON:
            self.level -= amount
            return True
        return False

    def charge(self, amount: float) -> None:
        self._refill()
        self.level -= amount

    def positive(self) -> bool:
        return self._refill() > 0

    def seconds_until_positive(self) -> float:
        tokens = self._refill()
        return 0.0 if tokens > 0 else (-tokens / self.rate) + 1e-3


class SecondSeries:
    """Counters per whole second of the clock: ``[second, n0, n1, ...]`` rows, bounded.

    ``add`` is called per request with totals, not per record, so it stays off the hot path.
    """

    __slots__ = ("_clock", "_rows", "_width")

    def __init__(self, clock: Clock, width: int, max_seconds: int) -> None:
        self._clock = clock
        self._width = width
        self._rows: deque[list[int]] = deque(maxlen=max_seconds)

    def add(self, *values: int) -> None:
        second = int(self._clock.now())
        rows = self._rows
        if not rows or rows[-1][0] != second:
            rows.append([second] + [0] * self._width)
        row = rows[-1]
        for index, value in enumerate(values, 1):
            row[index] += value

    def rows(self) -> list[list[int]]:
        return [list(row) for row in self._rows]
