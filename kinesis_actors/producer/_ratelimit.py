"""Per-shard rate limiting for the producer: token buckets and an adaptive per-shard factor.

A shard accepts 1,000 records/s and 1 MiB/s of writes. Like the KPL, the producer keeps a record
bucket and a byte bucket per predicted shard, each allowed ``rate_limit`` times the service limit
(1.0 by default: measured, the KPL's 1.5 only buys throttles; see ``ProducerConfig``). On top of
that each shard has its own factor in ``[min_factor, 1]``: a throttled record multiplies it by
``decrease`` (gently: a single throttled record must not halve the send rate) and
successful records add it back additively, each by the share of the shard's capacity it used
(a KPL aggregate as much as the records it carries). A throttled shard slows only itself.

Sans-IO: every method takes ``now`` (seconds on any monotonic clock) instead of reading a clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from .._deprecated import renamed
from .._validate import check_non_negative, check_positive
from ..errors import ConfigError

__all__ = ["Grant", "ShardRateLimiter", "ShardStats", "TokenBucket"]

# Float arithmetic must not make a caller that waited exactly ``time_until`` wait again: the
# slack covers rounding in the token count and in ``now - updated`` on a large clock value.
_EPSILON = 1e-9


def _check_amount(amount: float) -> None:
    if amount < 0:
        raise ValueError(f"amount must be non-negative, got {amount!r}")


class TokenBucket:
    """A token bucket refilled continuously at ``rate_per_s`` up to ``capacity`` tokens.

    The bucket starts full and never holds more than its capacity. It goes below zero only
    through :meth:`charge` (debt for work already committed to), never through :meth:`try_take`.

    An amount larger than the capacity could never be taken from a bucket that never holds that
    many tokens (a record bigger than the byte bucket waited forever). So asking for
    such an amount, through :meth:`try_take` or :meth:`time_until`, first grows the capacity to
    that amount, for good; the caller then waits at most ``amount / rate_per_s`` seconds.
    """

    __slots__ = ("_capacity", "_rate", "_tokens", "_updated")

    def __init__(self, rate_per_s: float, capacity: float) -> None:
        check_positive("rate_per_s", rate_per_s)
        check_positive("capacity", capacity)
        self._rate = float(rate_per_s)
        self._capacity = float(capacity)
        self._tokens = float(capacity)
        self._updated: float | None = None

    @property
    def rate_per_s(self) -> float:
        """Tokens added per second."""
        return self._rate

    @property
    def capacity(self) -> float:
        """The most tokens the bucket holds (it may have grown, see the class docstring)."""
        return self._capacity

    def tokens(self, now: float) -> float:
        """Tokens available at ``now``."""
        self._refill(now)
        return self._tokens

    def try_take(self, amount: float, now: float) -> bool:
        """Take ``amount`` tokens if they are all available at ``now``; otherwise take none."""
        _check_amount(amount)
        self._grow_to(amount)
        self._refill(now)
        if amount - self._tokens > self._slack(amount, now):
            return False
        self._tokens = max(0.0, self._tokens - amount)
        return True

    def time_until(self, amount: float, now: float) -> float:
        """Seconds from ``now`` until ``amount`` tokens are available: 0 if they are now.

        Always finite, since the capacity grows to ``amount`` if it is smaller.
        """
        _check_amount(amount)
        self._grow_to(amount)
        self._refill(now)
        deficit = amount - self._tokens
        if deficit <= self._slack(amount, now):
            return 0.0
        return deficit / self._rate

    def charge(self, amount: float, now: float) -> None:
        """Take ``amount`` whatever the balance: the bucket may go into debt, which the refill
        repays before :meth:`time_until` says yes again. For work already committed to."""
        _check_amount(amount)
        self._refill(now)
        self._tokens -= amount

    def configure(self, rate_per_s: float, capacity: float, now: float) -> None:
        """Change rate and capacity at ``now``; tokens earned so far are kept, up to the capacity.

        The old rate applies until ``now``, the new one after it.
        """
        check_positive("rate_per_s", rate_per_s)
        check_positive("capacity", capacity)
        self._refill(now)
        self._rate = float(rate_per_s)
        self._capacity = float(capacity)
        self._tokens = min(self._tokens, self._capacity)

    def slack(self, now: float) -> float:
        """The rounding slack :meth:`time_until` allows for any amount at ``now`` (its least)."""
        return self._slack(1.0, now)

    def _wait_for_batch(self, least: float, seconds: float, now: float, ulp4: float) -> float:
        """:meth:`time_until` of ``seconds`` worth of the rate, capped at the capacity and no
        less than ``least``, with ``4 * math.ulp(now)`` given (one call a lane and call)."""
        amount = min(self._rate * seconds, self._capacity)
        if amount < least:
            amount = least
            self._capacity = max(self._capacity, amount)  # _grow_to(amount)
        self._refill(now)
        deficit = amount - self._tokens
        if deficit <= _EPSILON * max(1.0, amount) + self._rate * ulp4:
            return 0.0
        return deficit / self._rate

    def _slack(self, amount: float, now: float) -> float:
        return _EPSILON * max(1.0, amount) + 4 * self._rate * math.ulp(now)

    def _grow_to(self, amount: float) -> None:
        if amount > self._capacity:
            self._capacity = float(amount)

    def _refill(self, now: float) -> None:
        if self._updated is None:
            self._updated = now
            return
        # A clock that steps backwards earns nothing, rather than taking tokens away.
        elapsed = now - self._updated
        if elapsed > 0:
            self._tokens = min(self._capacity, self._tokens + elapsed * self._rate)
            self._updated = now


@dataclass(frozen=True, slots=True)
class ShardStats:
    """One shard's limiter state: its factor, the configured rates it yields, its throttles.

    ``decreases`` counts the throttles that lowered the factor; throttles within ``cooldown`` of
    the last decrease are counted in ``throttles`` only.
    """

    factor: float
    records_per_s: float
    bytes_per_s: float
    throttles: int
    decreases: int


class Grant:
    """What one shard's buckets hold at one instant, spent record by record and charged once.

    Building a call takes many Kinesis records from a shard at the same ``now``; asking the
    buckets for each (two lookups, two refills and a charge per record) was a third of the
    call's building (measured). A grant reads the buckets once: :meth:`allows` says yes only
    where :meth:`ShardRateLimiter.delay` would also say 0 at that instant (its slack is the
    smallest the buckets use), :meth:`spend` counts down, and
    :meth:`ShardRateLimiter.charge_grant` takes what was spent from the buckets.
    """

    __slots__ = ("nbytes", "records", "shard_id", "spent_bytes", "spent_records")

    def __init__(self, shard_id: str, records: float, nbytes: float) -> None:
        self.shard_id = shard_id
        self.records = records  # tokens left, the slack included
        self.nbytes = nbytes
        self.spent_records = 0
        self.spent_bytes = 0

    def allows(self, nbytes: int) -> bool:
        """Whether one more record of ``nbytes`` may go now."""
        return self.records >= 1 and self.nbytes >= nbytes

    def spend(self, nbytes: int) -> None:
        """One record of ``nbytes`` goes (whether or not :meth:`allows` said so: debt)."""
        self.records -= 1
        self.nbytes -= nbytes
        self.spent_records += 1
        self.spent_bytes += nbytes


class _Shard:
    __slots__ = ("bytes", "decreases", "factor", "last_decrease", "records", "throttles")

    def __init__(self, records: TokenBucket, nbytes: TokenBucket) -> None:
        self.records = records
        self.bytes = nbytes
        self.factor = 1.0
        self.throttles = 0
        self.decreases = 0
        self.last_decrease: float | None = None


class ShardRateLimiter:
    """A record bucket and a byte bucket per shard, each scaled by an adaptive per-shard factor.

    A shard's ceilings are ``records_per_s * rate_limit`` records/s and ``bytes_per_s *
    rate_limit`` bytes/s; its current rates are those times its factor, and each bucket holds one
    second of its current rate. The byte bucket always holds at least ``max_record_bytes``, so
    the largest valid record is never starved.

    ``on_throttled`` multiplies the factor by ``decrease`` (at most once per ``cooldown``
    seconds per shard, because one PutRecords response often reports many throttled records for
    the same overload), never below ``min_factor``. ``on_success`` adds ``recovery_per_record``
    per record's worth of the shard's capacity delivered, up to 1: per record, or per
    ``bytes_per_s / records_per_s`` bytes (1,048.576) if its bytes come to more. Counting
    Kinesis records alone, a shard filled with 50 KiB aggregates (about 20 a second) earned
    back 0.02 a second: after the 2 throttles a run's first burst meets, 10 % of its capacity
    for 5 s (93-97 % of 1 MiB/s measured in the load target's seconds 1-3), where records of
    1 KiB sent alone recover in 0.1 s.

    At most ``max_shards`` shards are tracked. A stream has a finite number of shards, so the
    bound is only reached after many reshardings without :meth:`forget`; then the least
    recently used shard is dropped. Dropping is safe: the shard starts again at factor 1 and
    adapts again if it is still overloaded.
    """

    def __init__(
        self,
        records_per_s: float = 1000,
        bytes_per_s: float = 1_048_576,
        rate_limit: float = 1.0,
        max_record_bytes: int = 1_048_576,
        *,
        decrease: float = 0.9,
        min_factor: float = 0.05,
        recovery_per_record: float = 0.001,
        cooldown: float = 0.1,
        max_shards: int = 10_000,
    ) -> None:
        check_positive("records_per_s", records_per_s)
        check_positive("bytes_per_s", bytes_per_s)
        check_positive("rate_limit", rate_limit)
        check_positive("max_record_bytes", max_record_bytes, integer=True)
        check_positive("decrease", decrease)
        if decrease >= 1:
            raise ConfigError(f"decrease must be below 1, got {decrease!r}")
        check_positive("min_factor", min_factor)
        if min_factor > 1:
            raise ConfigError(f"min_factor must be at most 1, got {min_factor!r}")
        check_non_negative("recovery_per_record", recovery_per_record)
        check_non_negative("cooldown", cooldown)
        check_positive("max_shards", max_shards, integer=True)
        self._records_ceiling = float(records_per_s) * rate_limit
        self._bytes_ceiling = float(bytes_per_s) * rate_limit
        self._bytes_per_record = float(bytes_per_s) / float(records_per_s)
        self._max_record_bytes = max_record_bytes
        self._decrease = float(decrease)
        self._min_factor = float(min_factor)
        self._recovery = float(recovery_per_record)
        self._cooldown = float(cooldown)
        self._max_shards = max_shards
        self._shards: OrderedDict[str, _Shard] = OrderedDict()
        self._evicted = 0

    @property
    def max_shards(self) -> int:
        """The most shards tracked at once."""
        return self._max_shards

    @property
    def evicted(self) -> int:
        """How many shards were dropped because ``max_shards`` was reached."""
        return self._evicted

    def __len__(self) -> int:
        return len(self._shards)

    def try_acquire(self, shard_id: str, records: int, nbytes: int, now: float) -> bool:
        """Take ``records`` and ``nbytes`` from the shard's buckets if both allow it, else none."""
        shard = self._shard(shard_id)
        if shard.records.time_until(records, now) > 0 or shard.bytes.time_until(nbytes, now) > 0:
            return False
        taken = shard.records.try_take(records, now) and shard.bytes.try_take(nbytes, now)
        assert taken, "both buckets had the tokens an instant ago"
        return True

    def delay(self, shard_id: str, records: int, nbytes: int, now: float) -> float:
        """Seconds from ``now`` until :meth:`try_acquire` with these amounts would succeed."""
        shard = self._shard(shard_id)
        return max(shard.records.time_until(records, now), shard.bytes.time_until(nbytes, now))

    def charge(self, shard_id: str, records: int, nbytes: int, now: float) -> None:
        """Take ``records`` and ``nbytes`` from the shard's buckets even if that means debt."""
        shard = self._shard(shard_id)
        shard.records.charge(records, now)
        shard.bytes.charge(nbytes, now)

    def grant(self, shard_id: str, now: float) -> Grant:
        """The shard's tokens at ``now``, to spend locally; see :class:`Grant`."""
        shard = self._shard(shard_id)
        records, nbytes = shard.records, shard.bytes
        return Grant(
            shard_id,
            records.tokens(now) + records.slack(now),
            nbytes.tokens(now) + nbytes.slack(now),
        )

    def open(self, shard_id: str, nbytes: int, seconds: float, now: float) -> Grant | float:
        """The shard's :meth:`grant` if both :meth:`delay` of one record of ``nbytes`` and
        :meth:`batch_delay` of ``seconds`` say 0 at ``now``, else the seconds until they do.

        What a lane asks first in each call it joins, in one look at the shard: each bucket
        refilled once and its slack computed once (the questions apart were three lookups
        and four refills, per lane and call: at 1,024 shards, a third of what a call's
        building cost, measured; through the buckets' public methods, 2.8 us a lane and call
        against 1.8 us this way, which a 1,024-shard call pays some 500 times).
        """
        shard = self._shard(shard_id)
        records, nbytes_bucket = shard.records, shard.bytes
        ulp4 = 4 * math.ulp(now)
        wait = records._wait_for_batch(1.0, seconds, now, ulp4)
        byte_wait = nbytes_bucket._wait_for_batch(float(nbytes), seconds, now, ulp4)
        wait = max(wait, byte_wait)
        if wait > 0:
            return wait
        # The grant's slack is the bucket's least (that of one token), as in grant().
        return Grant(
            shard_id,
            records._tokens + (_EPSILON + records._rate * ulp4),
            nbytes_bucket._tokens + (_EPSILON + nbytes_bucket._rate * ulp4),
        )

    def charge_grant(self, grant: Grant, now: float) -> None:
        """Charge what ``grant`` spent (as :meth:`charge` would) and start it afresh.

        Through the shard's lookup, not buckets kept on the grant: a shard evicted since
        (``max_shards``) is made anew and charged, so the tokens spent are not lost."""
        if grant.spent_records or grant.spent_bytes:
            self.charge(grant.shard_id, grant.spent_records, grant.spent_bytes, now)
            grant.spent_records = grant.spent_bytes = 0

    def batch_delay(self, shard_id: str, seconds: float, now: float) -> float:
        """Seconds until both buckets hold ``seconds`` worth of their rate (capped at their
        capacity): when a paced shard has earned enough for a well-filled batch."""
        shard = self._shard(shard_id)
        records, nbytes = shard.records, shard.bytes
        return max(
            records.time_until(min(records.capacity, records.rate_per_s * seconds), now),
            nbytes.time_until(min(nbytes.capacity, nbytes.rate_per_s * seconds), now),
        )

    def on_throttled(self, shard_id: str, now: float) -> None:
        """A record to ``shard_id`` was throttled: slow this shard, and only this shard."""
        shard = self._shard(shard_id)
        shard.throttles += 1
        if shard.last_decrease is not None and now - shard.last_decrease < self._cooldown:
            return
        shard.last_decrease = now
        shard.decreases += 1
        self._set_factor(shard, max(self._min_factor, shard.factor * self._decrease), now)

    def on_success(self, shard_id: str, records: int, now: float, nbytes: int = 0) -> None:
        """``records`` records of ``nbytes`` bytes in all to ``shard_id`` were accepted: speed
        the shard back up, by the records or the bytes, whichever used more of its capacity."""
        if records < 0:
            raise ValueError(f"records must be non-negative, got {records!r}")
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative, got {nbytes!r}")
        shard = self._shard(shard_id)
        if shard.factor < 1.0:
            used = max(float(records), nbytes / self._bytes_per_record)
            self._set_factor(shard, min(1.0, shard.factor + used * self._recovery), now)

    def forget(self, shard_id: str) -> None:
        """Stop tracking ``shard_id`` (it was closed by resharding). Unknown shards are ignored."""
        self._shards.pop(shard_id, None)

    def statistics(self, shard_id: str) -> ShardStats | None:
        """The shard's state now (a frozen :class:`ShardStats`), or ``None`` if it is not
        tracked."""
        shard = self._shards.get(shard_id)
        return None if shard is None else self._stats(shard)

    def all_statistics(self) -> dict[str, ShardStats]:
        """Every tracked shard's state now, least recently used first."""
        return {shard_id: self._stats(shard) for shard_id, shard in self._shards.items()}

    def stats(self, shard_id: str) -> ShardStats | None:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed("ShardRateLimiter.stats()", "ShardRateLimiter.statistics()")
        return self.statistics(shard_id)

    def all_stats(self) -> dict[str, ShardStats]:
        """Deprecated: :meth:`all_statistics`, the same snapshots."""
        renamed("ShardRateLimiter.all_stats()", "ShardRateLimiter.all_statistics()")
        return self.all_statistics()

    def _stats(self, shard: _Shard) -> ShardStats:
        return ShardStats(
            factor=shard.factor,
            records_per_s=shard.records.rate_per_s,
            bytes_per_s=shard.bytes.rate_per_s,
            throttles=shard.throttles,
            decreases=shard.decreases,
        )

    def _shard(self, shard_id: str) -> _Shard:
        shard = self._shards.get(shard_id)
        if shard is not None:
            self._shards.move_to_end(shard_id)
            return shard
        if len(self._shards) >= self._max_shards:
            self._shards.popitem(last=False)
            self._evicted += 1
        records_rate, bytes_rate = self._records_ceiling, self._bytes_ceiling
        shard = _Shard(
            TokenBucket(records_rate, max(1.0, records_rate)),
            TokenBucket(bytes_rate, max(float(self._max_record_bytes), bytes_rate)),
        )
        self._shards[shard_id] = shard
        return shard

    def _set_factor(self, shard: _Shard, factor: float, now: float) -> None:
        shard.factor = factor
        records_rate = self._records_ceiling * factor
        bytes_rate = self._bytes_ceiling * factor
        shard.records.configure(records_rate, max(1.0, records_rate), now)
        shard.bytes.configure(bytes_rate, max(float(self._max_record_bytes), bytes_rate), now)
