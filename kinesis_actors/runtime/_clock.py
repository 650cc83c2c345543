"""Injectable time for the sans-IO policies.

Restart intensity, backoff resets and mailbox blocked-time statistics read the time through a
:class:`Clock`, so tests drive them with a :class:`ManualClock` and never sleep.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Something that tells monotonic time in seconds."""

    def now(self) -> float: ...


class MonotonicClock:
    """The real clock: :func:`time.monotonic`."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to; for tests and simulations."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward; time never goes backwards."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance({seconds}))")
        self._now += seconds


MONOTONIC = MonotonicClock()
