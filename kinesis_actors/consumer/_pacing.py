"""Read pacing for one polled shard, sans-IO: when may the next GetRecords go out?

Three rules, each a lower bound on the time of the next call:

* the call rate: at most ``max_calls_per_second`` GetRecords per shard (the service allows 5);
* the byte rate: a response of *b* bytes is worth ``b / max_bytes_per_second`` seconds of
  the shard's read budget (a 10 MiB answer costs 5 s, as the service itself enforces);
* backoff: after an empty read the wait doubles from ``idle_initial`` up to a bound, so an
  idle shard is polled a few times a minute rather than hammered (FLINK-36947);
  after a throttle the same with the throttle settings. Any non-empty read resets both.
* caught up (off by default): a read that returned records while the shard was less than
  ``caught_up_millis`` behind its tip waits at least ``caught_up_interval``, so a trickling
  shard is read once per interval, not up to five times a second (as the KCL 3.1 does near
  the tip: ``millisBehindLatestThresholdForReducedTps``), at the cost of that latency.
  The bound is ``idle_max``; and a consumer's :class:`IdleBudget` (a calendar of read slots
  shared by its shards) keeps all its idle shards together to ``idle_reads_per_second``
  empty reads, ramp included: 1,000 idle shards polled every 2 s were 500 calls/s, 0.96
  core measured. An idle wait is shortened by up to ``idle_jitter`` of itself (never
  lengthened), so shards that went idle together do not poll in step.

And one rule for GetShardIterator, the recovery path: at most
``max_iterators_per_second`` per shard (the service allows 5), and after an expired iterator
the next one waits ``recovery_initial``, doubling while expiries repeat, up to
``recovery_max``. Measured through the fault proxy with every GetRecords answered
ExpiredIterator: ~91-108 GetShardIterator/s per shard before, ≤ 5/s and falling after
(``tests/consumer/test_hostile_server_local.py``).

Times are plain floats from the caller's clock, so the policy is tested without a loop.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["IdleBudget", "PacingSettings", "ReadPacer"]


@dataclass(frozen=True, slots=True)
class PacingSettings:
    max_calls_per_second: float = 5.0
    max_bytes_per_second: float = 2 * 1024 * 1024
    idle_initial: float = 0.25
    idle_max: float = 2.0
    throttle_initial: float = 0.5
    throttle_max: float = 5.0
    max_iterators_per_second: float = 5.0
    recovery_initial: float = 0.2
    recovery_max: float = 5.0
    idle_jitter: float = 0.2
    caught_up_millis: int | None = None
    caught_up_interval: float = 1.5


class IdleBudget:
    """The empty reads per second a consumer allows all its idle shards together: a calendar
    of read slots shared by every shard's pacer.

    A shard's next read after an empty one takes the first free slot at or after the time
    its own backoff asks for, so all idle shards together never read more often than
    ``reads_per_second``, during the backoff's ramp too (a thousand shards opened at once
    would otherwise poll every 0.25 s, then 0.5 s, ...). Slots come in ticks of ``group``
    (``group / reads_per_second`` apart); a read pushed past a full tick goes at the start of
    the next one, so when the budget binds, the reads of one tick wake the event loop once and
    share its turns (measured, 1,000 idle shards: 1.2 ms of CPU a read when every read had a
    moment of its own, against 0.7 ms in bursts). A shard holds at most one future slot, so
    with ``n`` idle shards the calendar's wait is at most about ``n / reads_per_second``:
    the latency the budget adds. Owned by the consumer's scheduler, used by its readers'
    pacers (one event loop).
    """

    __slots__ = ("_counts", "_group", "_tick", "_ticks")

    def __init__(self, reads_per_second: float, group: int = 10) -> None:
        if reads_per_second <= 0:
            raise ValueError(f"reads_per_second must be positive, got {reads_per_second!r}")
        if group < 1:
            raise ValueError(f"group must be at least 1, got {group!r}")
        self._group = group
        self._tick = group / reads_per_second
        # Slots taken per tick, and the ticks in a heap to forget the past ones; bounded by
        # the ticks ahead of now (at most one a shard, plus those of shards that got data).
        self._counts: dict[int, int] = {}
        self._ticks: list[int] = []

    def reserve(self, earliest: float, now: float) -> float:
        """``earliest`` if its tick has a free slot, else the start of the first later tick
        that has one; the slot is taken."""
        counts, ticks = self._counts, self._ticks
        past = math.floor(now / self._tick)
        while ticks and ticks[0] < past:
            del counts[heapq.heappop(ticks)]
        tick = math.floor(earliest / self._tick)
        at = earliest  # room in its own tick: no later than asked (a small consumer's case)
        while counts.get(tick, 0) >= self._group:
            tick += 1
            at = tick * self._tick  # a full tick: the start of the next with room
        taken = counts.get(tick, 0)
        if not taken:
            heapq.heappush(ticks, tick)
        counts[tick] = taken + 1
        return at

    @property
    def reserved(self) -> int:
        """Slots taken that are not yet past (for tests and metrics)."""
        return sum(self._counts.values())


class ReadPacer:
    """Decides the earliest time of the next read from the outcome of the previous ones."""

    def __init__(
        self,
        settings: PacingSettings,
        budget: IdleBudget | None = None,
        *,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._settings = settings
        self._budget = budget
        self._rng = rng
        self._next_at = float("-inf")
        self._empty_streak = 0
        self._throttle_streak = 0
        self._iterator_at = float("-inf")
        self._expired_streak = 0

    @property
    def empty_streak(self) -> int:
        return self._empty_streak

    def next_read_at(self) -> float:
        """The earliest time the next GetRecords may be sent."""
        return self._next_at

    def delay(self, now: float) -> float:
        """Seconds to wait from ``now`` before the next read (0 if it may go now)."""
        return max(0.0, self._next_at - now)

    def read(self, now: float, records: int, size: int, millis_behind: int | None = None) -> None:
        """A GetRecords that started at ``now`` returned ``records`` records of ``size`` bytes,
        ``millis_behind`` the shard's tip."""
        settings = self._settings
        self._throttle_streak = 0
        self._expired_streak = 0
        wait = max(1.0 / settings.max_calls_per_second, size / settings.max_bytes_per_second)
        if records == 0:
            idle = settings.idle_initial * 2.0 ** min(self._empty_streak, 32)
            spread = 1.0 - settings.idle_jitter * self._rng()  # never past idle_max
            wait = max(wait, min(settings.idle_max, idle) * spread)
            self._empty_streak += 1
            if self._budget is not None:
                self._next_at = self._budget.reserve(now + wait, now)
                return
        else:
            self._empty_streak = 0
            near = settings.caught_up_millis
            if near is not None and millis_behind is not None and millis_behind < near:
                wait = max(wait, settings.caught_up_interval)
        self._next_at = now + wait

    def throttled(self, now: float) -> None:
        """The service refused a read for rate (after the client's own retries)."""
        settings = self._settings
        wait = settings.throttle_initial * 2.0 ** min(self._throttle_streak, 32)
        self._throttle_streak += 1
        self._next_at = now + max(
            1.0 / settings.max_calls_per_second, min(settings.throttle_max, wait)
        )

    def iterator_delay(self, now: float) -> float:
        """Seconds to wait from ``now`` before the next GetShardIterator (0 if it may go now)."""
        return max(0.0, self._iterator_at - now)

    def iterator_taken(self, now: float) -> None:
        """A GetShardIterator went out at ``now``."""
        gap = 1.0 / self._settings.max_iterators_per_second
        self._iterator_at = max(self._iterator_at, now + gap)

    def expired(self, now: float) -> None:
        """The iterator expired: the next one waits, longer each time in a row."""
        settings = self._settings
        wait = settings.recovery_initial * 2.0 ** min(self._expired_streak, 32)
        self._expired_streak += 1
        self._iterator_at = max(self._iterator_at, now + min(settings.recovery_max, wait))
