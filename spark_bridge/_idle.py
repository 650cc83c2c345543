"""Which idle shards the planner probes this trigger, outside ``Trigger.AvailableNow``. Sans-IO.

An idle shard costs the driver one GetRecords per trigger, and a query plans twice a second
while nothing moves: at 1,024 idle shards that was 2,048 calls a second, 68-72 % of a core.
Past :data:`FREE_IDLE` idle shards, the probes of idle shards share a budget of
:data:`PROBES_PER_S` a second instead, the longest unprobed first, so each is probed every
``idle shards / PROBES_PER_S`` seconds (10 s at 1,000). That is the most a shard waking up
waits beyond the trigger before the query sees it; a shard that moved, or was not found
idle, is planned every trigger as before.

``Trigger.AvailableNow`` never asks: its plans probe every shard, since its end must see
every shard's tip (a skipped shard would end the run without its rows). Nothing here
awaits or reads a clock: ``now`` is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FREE_IDLE", "PROBES_PER_S", "IdleProbes"]

ShardKey = tuple[str, str]

PROBES_PER_S = 100.0
"""Probes of idle shards a second, past ``FREE_IDLE`` of them: about 2 % of a core (a probe
costs the driver about 0.2 ms of CPU)."""
FREE_IDLE = 50
"""Up to this many idle shards are probed every trigger (at two plans a second, that is
within the budget anyway): small streams see a shard wake up at the next trigger."""


class IdleProbes:
    """The idle shards and when each was last probed; the probe budget's tokens."""

    def __init__(self, *, rate: float = PROBES_PER_S, free: int = FREE_IDLE) -> None:
        self._rate = rate
        self._free = free
        self._probed: dict[ShardKey, float] = {}
        """Bounded by the query's shards: an idle shard's last probe."""
        self._tokens = 0.0
        self._refilled: float | None = None

    def __len__(self) -> int:
        return len(self._probed)

    def skipped(self, keys: Iterable[ShardKey], now: float) -> set[ShardKey]:
        """Of ``keys`` (the shards the trigger would plan), the idle ones not probed now."""
        if self._refilled is not None:
            self._tokens = min(self._rate, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now
        idle = [key for key in keys if key in self._probed]
        if len(idle) <= self._free:
            return set()
        idle.sort(key=lambda key: (self._probed[key], key))
        allowed = min(len(idle), int(self._tokens))
        self._tokens -= allowed
        return set(idle[allowed:])

    def found_idle(self, key: ShardKey, now: float) -> None:
        self._probed[key] = now

    def found_busy(self, key: ShardKey) -> None:
        self._probed.pop(key, None)
