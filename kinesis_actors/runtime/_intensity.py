"""Restart intensity and restart backoff, as plain classes with injectable time and randomness.

Both are sans-IO: they decide, the supervisor acts. Tests drive them with a ManualClock and a
fixed random source, without an event loop.
"""

from __future__ import annotations

import random as _random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ._clock import MONOTONIC, Clock


class RestartIntensity:
    """OTP's restart intensity: more than ``max_restarts`` restarts within ``period`` seconds
    means restarting is not helping, and the supervisor must give up and fail upward.
    """

    def __init__(self, max_restarts: int, period: float, *, clock: Clock = MONOTONIC) -> None:
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        if period <= 0:
            raise ValueError(f"period must be > 0, got {period}")
        self._max = max_restarts
        self._period = period
        self._clock = clock
        # One more than the limit is all it takes to decide; older entries cannot matter.
        self._events: deque[tuple[float, Exception]] = deque(maxlen=max_restarts + 1)

    @property
    def max_restarts(self) -> int:
        return self._max

    @property
    def period(self) -> float:
        return self._period

    def record(self, cause: Exception) -> bool:
        """Count one restart caused by ``cause``; return False if the intensity is exceeded."""
        now = self._clock.now()
        self._events.append((now, cause))
        self._expire(now)
        return len(self._events) <= self._max

    @property
    def restarts_in_window(self) -> int:
        self._expire(self._clock.now())
        return len(self._events)

    @property
    def causes(self) -> list[Exception]:
        """The causes of the restarts inside the current window, oldest first."""
        self._expire(self._clock.now())
        return [cause for _, cause in self._events]

    def _expire(self, now: float) -> None:
        while self._events and now - self._events[0][0] > self._period:
            self._events.popleft()


@dataclass(frozen=True)
class Backoff:
    """Exponential restart delay with jitter.

    The ``attempt``-th consecutive restart waits ``min(maximum, initial * multiplier**attempt)``
    scaled down by up to ``jitter`` (a fraction): with ``jitter=0.5`` the delay falls anywhere
    in ``[d/2, d]``, so siblings that crashed together do not restart in lockstep.
    """

    initial: float = 0.01
    maximum: float = 1.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0:
            raise ValueError("backoff delays must be >= 0")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    @classmethod
    def none(cls) -> Backoff:
        """Restart immediately (OTP's behaviour)."""
        return cls(initial=0.0, maximum=0.0, jitter=0.0)

    def delay(self, attempt: int, rand: float) -> float:
        """The delay before restart number ``attempt`` (0-based), given ``rand`` in [0, 1)."""
        base = min(self.maximum, self.initial * self.multiplier ** min(attempt, 64))
        return base * (1.0 - self.jitter * rand)


class RestartBackoff:
    """Per-child backoff state: consecutive restarts grow the delay; a long enough healthy run
    (``reset_after`` seconds) starts over from the initial delay.
    """

    def __init__(
        self,
        backoff: Backoff,
        *,
        reset_after: float,
        clock: Clock = MONOTONIC,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self._backoff = backoff
        self._reset_after = reset_after
        self._clock = clock
        self._random = random
        self._attempt = 0
        self._started_at: float | None = None

    @property
    def attempt(self) -> int:
        return self._attempt

    def started(self) -> None:
        """The child is up again."""
        self._started_at = self._clock.now()

    def next_delay(self) -> float:
        """The child went down: how long to wait before starting it again."""
        if (
            self._started_at is not None
            and self._clock.now() - self._started_at >= self._reset_after
        ):
            self._attempt = 0
        delay = self._backoff.delay(self._attempt, self._random())
        self._attempt += 1
        self._started_at = None
        return delay
