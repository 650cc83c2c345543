"""The Enhanced Fan-Out reader's policies, sans-IO: its settings, when to subscribe again and
when to give up (:class:`SubscribeBackoff`), and how long the service has held the shard and
what that calls for (:class:`HeldShard`). Every method takes ``now``; the reader in
:mod:`._efo` sleeps, subscribes, polls and raises.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EfoSettings", "HeldShard", "SubscribeBackoff"]


@dataclass(frozen=True, slots=True)
class EfoSettings:
    watchdog_timeout: float = 30.0
    subscription_lifetime: float = 300.0
    min_subscribe_interval: float = 1.0
    """The service allows one SubscribeToShard per second per shard and consumer."""
    backoff_initial: float = 1.0
    backoff_max: float = 10.0
    max_consecutive_failures: int = 5
    """Errors in a row (no event in between) before the reader crashes to its supervisor.
    ResourceInUse is waiting, not an error: it neither counts nor breaks the row."""
    starvation_warning: float = 30.0
    """Seconds of ResourceInUse only (no event) before the shard is reported starved."""
    fallback_after: float | None = 30.0
    """Seconds of ResourceInUse only (no event) before the shard is read by GetRecords until a
    subscription is accepted again; None: never (the shard waits for its subscription)."""


class SubscribeBackoff:
    """When a shard's next SubscribeToShard may go, and when its reader has failed too often.

    Sans-IO: every method takes ``now``, the jitter comes from ``random`` (injectable); the
    reader sleeps and raises. Two counts, because waiting is not failing:

    - ``attempts``: subscriptions in a row that brought no event, errors and ResourceInUse
      alike. It sets the backoff: ``backoff_initial`` doubling up to ``backoff_max``, the wait
      drawn between ``min_subscribe_interval`` and that ceiling.
    - ``failures``: the errors among them. Past ``max_consecutive_failures`` the reader gives
      up. A ResourceInUse is not one: it is waited out however long it lasts (the starvation
      warning says when that is long), and the errors before it still count after it.

    An event resets both. No two subscriptions are less than ``min_subscribe_interval`` apart.
    """

    __slots__ = ("_random", "_settings", "attempts", "failures", "not_before")

    def __init__(
        self, settings: EfoSettings, *, random: Callable[[], float] = _random.random
    ) -> None:
        self._settings = settings
        self._random = random
        self.attempts = 0
        self.failures = 0
        self.not_before = 0.0

    def delay(self, now: float) -> float:
        """How long to wait before subscribing at ``now`` (0.0: go)."""
        return max(0.0, self.not_before - now)

    def subscribing(self, now: float) -> None:
        """A SubscribeToShard goes now: the next one no sooner than the service allows."""
        self.not_before = now + self._settings.min_subscribe_interval

    def failed(self, now: float) -> bool:
        """A subscription failed with an error; True once there were too many in a row."""
        self.failures += 1
        self._back_off(now)
        return self.failures > self._settings.max_consecutive_failures

    def in_use(self, now: float) -> None:
        """ResourceInUse (or any refused attempt while the shard is read by GetRecords, which
        is reading, not failing): back off, and count nothing toward giving up."""
        self._back_off(now)

    def delivered(self) -> None:
        """An event arrived: the shard is read again, both counts start over."""
        self.attempts = 0
        self.failures = 0

    def _back_off(self, now: float) -> None:
        self.attempts += 1
        settings = self._settings
        ceiling = min(
            settings.backoff_max, settings.backoff_initial * 2 ** min(self.attempts - 1, 16)
        )
        low = settings.min_subscribe_interval
        wait = low + (max(ceiling, 1e-3) - low) * self._random()
        self.not_before = max(self.not_before, now + wait)


class HeldShard:
    """How long the service has held a shard from this consumer's subscriptions, and what
    that calls for.

    Sans-IO: every method takes ``now``. A hold begins at the first ResourceInUse since the
    last event (:meth:`refused`) and ends with the next event (:meth:`released`); errors in
    between neither begin nor end it. Two thresholds, from its beginning:

    - ``starvation_warning``: :meth:`refused` returns True once past it, to say so once;
    - ``fallback_after`` (None: never): from :meth:`fallback_at` on, the reader reads the
      shard by GetRecords (:meth:`fell_back`) until the hold ends (the
      local server holds a shard 300 s after a reset; the service's own hold after a broken
      connection is not documented). ``fallbacks`` and :meth:`polled_seconds` count it.
    """

    __slots__ = (
        "_fallback_after",
        "_polled",
        "_starvation_warning",
        "fallbacks",
        "held_since",
        "polling_since",
        "starved",
    )

    def __init__(self, starvation_warning: float, fallback_after: float | None) -> None:
        self._starvation_warning = starvation_warning
        self._fallback_after = fallback_after
        self.held_since: float | None = None
        self.starved = False
        self.polling_since: float | None = None
        self.fallbacks = 0
        self._polled = 0.0

    @property
    def polling(self) -> bool:
        """Whether the shard is read by GetRecords now."""
        return self.polling_since is not None

    def held_for(self, now: float) -> float:
        """Seconds since the hold began (0.0 when the shard is not held)."""
        return 0.0 if self.held_since is None else now - self.held_since

    def refused(self, now: float) -> bool:
        """A ResourceInUse at ``now``; True the one time the hold passes the warning."""
        if self.held_since is None:
            self.held_since = now
        if self.starved or self.held_for(now) < self._starvation_warning:
            return False
        self.starved = True
        return True

    def fallback_at(self) -> float | None:
        """When the reader should begin reading by GetRecords (None: not held, reading by
        GetRecords already, or never)."""
        if self.held_since is None or self.polling_since is not None:
            return None
        if self._fallback_after is None:
            return None
        return self.held_since + self._fallback_after

    def fell_back(self, now: float) -> None:
        """The reader reads by GetRecords from ``now``."""
        if self.polling_since is None:
            self.polling_since = now
            self.fallbacks += 1

    def polled_seconds(self, now: float) -> float:
        """Time spent reading by GetRecords, the ongoing stretch included."""
        ongoing = 0.0 if self.polling_since is None else now - self.polling_since
        return self._polled + ongoing

    def released(self, now: float) -> None:
        """An event arrived: the hold is over, and so is reading by GetRecords."""
        if self.polling_since is not None:
            self._polled += now - self.polling_since
            self.polling_since = None
        self.held_since = None
        self.starved = False
