"""Token buckets and the per-shard rate limiter, driven by a fake clock (plain floats)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_actors.errors import ConfigError
from kinesis_actors.producer import ShardRateLimiter, TokenBucket

MIB = 1_048_576


def _drain_bucket(bucket: TokenBucket, amount: float, seconds: float) -> float:
    """Take ``amount`` as often as the bucket allows for ``seconds``; return the total taken."""
    now, taken = 0.0, 0.0
    while now <= seconds:
        if bucket.try_take(amount, now):
            taken += amount
        else:
            now += bucket.time_until(amount, now)
    return taken


def _drain_shard(limiter: ShardRateLimiter, shard: str, nbytes: int, seconds: float) -> int:
    """Send one record of ``nbytes`` as often as the shard allows; return how many went."""
    now, sent = 0.0, 0
    while now <= seconds:
        if limiter.try_acquire(shard, 1, nbytes, now):
            sent += 1
        else:
            now += limiter.delay(shard, 1, nbytes, now)
    return sent


# --- TokenBucket ----------------------------------------------------------------------------


def test_bucket_starts_full_and_refuses_what_it_does_not_hold() -> None:
    bucket = TokenBucket(10, 5)
    assert bucket.try_take(5, 0.0)
    assert not bucket.try_take(1, 0.0)
    assert bucket.tokens(0.0) == 0.0


def test_bucket_refills_by_elapsed_time_up_to_capacity() -> None:
    bucket = TokenBucket(10, 5)
    assert bucket.try_take(5, 0.0)
    assert bucket.tokens(0.2) == pytest.approx(2.0)
    assert bucket.tokens(100.0) == 5.0


def test_a_failed_take_takes_nothing() -> None:
    bucket = TokenBucket(10, 5)
    assert bucket.try_take(4, 0.0)
    assert not bucket.try_take(2, 0.0)
    assert bucket.tokens(0.0) == pytest.approx(1.0)


def test_time_until_is_zero_when_available_and_the_deficit_over_the_rate_otherwise() -> None:
    bucket = TokenBucket(10, 5)
    assert bucket.time_until(5, 0.0) == 0.0
    assert bucket.try_take(5, 0.0)
    assert bucket.time_until(3, 0.0) == pytest.approx(0.3)
    assert bucket.time_until(3, 0.1) == pytest.approx(0.2)


def test_a_clock_stepping_backwards_neither_adds_nor_removes_tokens() -> None:
    bucket = TokenBucket(10, 5)
    assert bucket.try_take(5, 10.0)
    assert bucket.tokens(9.0) == 0.0
    assert bucket.tokens(10.1) == pytest.approx(1.0)


def test_bucket_sustains_exactly_its_rate_over_a_long_run() -> None:
    rate, capacity, seconds = 100.0, 10.0, 60.0
    taken = _drain_bucket(TokenBucket(rate, capacity), 1, seconds)
    expected = rate * seconds + capacity
    assert abs(taken - expected) <= 0.01 * expected


def test_bucket_sustains_its_rate_with_fractional_rates_and_amounts() -> None:
    rate, capacity, seconds = 333.3, 50.0, 60.0
    taken = _drain_bucket(TokenBucket(rate, capacity), 7, seconds)
    expected = rate * seconds + capacity
    assert abs(taken - expected) <= 0.01 * expected


def test_an_amount_larger_than_the_capacity_grows_the_capacity_and_waits_a_finite_time() -> None:
    bucket = TokenBucket(100, 100)
    assert bucket.try_take(100, 0.0)
    wait = bucket.time_until(250, 0.0)
    assert bucket.capacity == 250
    assert wait == pytest.approx(2.5)
    assert not bucket.try_take(250, wait - 0.01)
    assert bucket.try_take(250, wait)


def test_configure_keeps_earned_tokens_up_to_the_new_capacity_and_switches_rate_at_now() -> None:
    bucket = TokenBucket(10, 10)
    assert bucket.try_take(10, 0.0)
    bucket.configure(100, 4, 0.5)  # 5 tokens earned at the old rate, clipped to 4
    assert bucket.tokens(0.5) == pytest.approx(4.0)
    assert bucket.try_take(4, 0.5)
    assert bucket.tokens(0.52) == pytest.approx(2.0)


@pytest.mark.parametrize(("rate", "capacity"), [(0, 1), (1, 0), (-1, 1), (math.inf, 1)])
def test_bucket_rejects_bad_configuration(rate: float, capacity: float) -> None:
    with pytest.raises(ConfigError):
        TokenBucket(rate, capacity)


def test_bucket_rejects_negative_amounts() -> None:
    bucket = TokenBucket(1, 1)
    with pytest.raises(ValueError, match="non-negative"):
        bucket.try_take(-1, 0.0)
    with pytest.raises(ValueError, match="non-negative"):
        bucket.time_until(-1, 0.0)


@given(
    rate=st.floats(0.1, 1e6),
    capacity=st.floats(1.0, 1e6),
    steps=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 10)), max_size=50),
)
def test_bucket_never_goes_negative_nor_gives_more_than_it_earned(
    rate: float, capacity: float, steps: list[tuple[float, float]]
) -> None:
    bucket = TokenBucket(rate, capacity)
    now, taken = 0.0, 0.0
    for fraction, dt in steps:
        now += dt
        amount = fraction * capacity
        if bucket.try_take(amount, now):
            taken += amount
        assert 0.0 <= bucket.tokens(now) <= bucket.capacity
    assert taken <= (capacity + rate * now) * (1 + 1e-6)


@given(
    rate=st.floats(0.01, 1e7),
    capacity=st.floats(0.01, 1e7),
    amount=st.floats(0, 1e8),
    start=st.floats(0, 1e6),
)
def test_waiting_time_until_is_always_enough(
    rate: float, capacity: float, amount: float, start: float
) -> None:
    bucket = TokenBucket(rate, capacity)
    assert bucket.try_take(capacity, start)
    wait = bucket.time_until(amount, start)
    assert math.isfinite(wait)
    assert bucket.try_take(amount, start + wait)


# --- ShardRateLimiter -----------------------------------------------------------------------


def test_a_shard_sustains_the_record_rate_times_rate_limit() -> None:
    limiter = ShardRateLimiter(rate_limit=1.5)
    sent = _drain_shard(limiter, "shard-0", 10, 60.0)
    expected = 1500 * 60 + 1500
    assert abs(sent - expected) <= 0.01 * expected


def test_a_shard_sustains_the_byte_rate_times_rate_limit() -> None:
    limiter = ShardRateLimiter(rate_limit=1.0)
    record = 100 * 1024
    sent_bytes = _drain_shard(limiter, "shard-0", record, 60.0) * record
    expected = MIB * 60 + MIB
    assert abs(sent_bytes - expected) <= 0.01 * expected


def test_try_acquire_takes_from_both_buckets_or_from_neither() -> None:
    limiter = ShardRateLimiter(
        records_per_s=10, bytes_per_s=100, rate_limit=1.0, max_record_bytes=100
    )
    assert limiter.try_acquire("s", 1, 100, 0.0)  # bytes empty, 9 records left
    assert not limiter.try_acquire("s", 9, 1, 0.0)
    assert limiter.try_acquire("s", 9, 0, 0.0)  # the refused call took no records
    assert not limiter.try_acquire("s", 1, 0, 0.0)


def test_delay_is_the_longer_wait_and_waiting_it_is_enough() -> None:
    limiter = ShardRateLimiter(
        records_per_s=10, bytes_per_s=100, rate_limit=1.0, max_record_bytes=100
    )
    assert limiter.try_acquire("s", 10, 100, 0.0)
    assert limiter.delay("s", 2, 50, 0.0) == pytest.approx(0.5)  # bytes: 50/100 > records: 2/10
    assert limiter.delay("s", 5, 10, 0.0) == pytest.approx(0.5)  # records: 5/10 > bytes
    assert not limiter.try_acquire("s", 2, 50, 0.49)
    assert limiter.try_acquire("s", 2, 50, 0.5)


def test_a_record_larger_than_the_byte_bucket_is_not_starved() -> None:
    # 0.5 * 1 MiB/s would make a 512 KiB bucket; a 1 MiB record must still get through.
    limiter = ShardRateLimiter(rate_limit=0.5)
    assert limiter.try_acquire("s", 1, MIB, 0.0)
    wait = limiter.delay("s", 1, MIB, 0.0)
    assert 0 < wait <= 2.0 + 1e-9  # 1 MiB at 512 KiB/s
    assert limiter.try_acquire("s", 1, MIB, wait)
    # Even at the floor factor, and for a multi-record call bigger than any bucket.
    for i in range(100):
        limiter.on_throttled("s", 1.0 + i)
    big = 3 * MIB
    wait = limiter.delay("s", 3, big, 200.0)
    assert math.isfinite(wait)
    assert limiter.try_acquire("s", 3, big, 200.0 + wait)


def test_one_throttled_record_does_not_halve_the_rate() -> None:
    limiter = ShardRateLimiter()
    for shard in ("hot", "cold"):
        assert limiter.try_acquire(shard, 1, 100, 0.0)
    limiter.on_throttled("hot", 0.0)
    hot = limiter.statistics("hot")
    assert hot is not None
    assert hot.throttles == 1
    assert hot.factor == pytest.approx(0.9)
    assert hot.records_per_s == pytest.approx(0.9 * 1000)
    assert hot.bytes_per_s == pytest.approx(0.9 * MIB)
    # Partial failures are routine: one throttled record in every 500-record call, 10 calls/s.
    lowest = 1.0
    for call in range(100):
        now = call / 10
        limiter.on_throttled("hot", now)
        lowest = min(lowest, limiter.all_statistics()["hot"].factor)
        limiter.on_success("hot", 499, now)
    assert lowest >= 0.9 - 1e-9
    # The throttled shard slowed only itself.
    cold = limiter.statistics("cold")
    assert cold is not None
    assert cold.factor == 1.0
    assert cold.records_per_s == 1000
    assert cold.bytes_per_s == MIB
    assert cold.throttles == 0


def test_a_throttled_shard_sends_less_and_the_other_shard_keeps_its_rate() -> None:
    limiter = ShardRateLimiter(cooldown=0.0)
    for _ in range(1000):
        limiter.on_throttled("hot", 0.0)
    hot = _drain_shard(limiter, "hot", 10, 10.0)
    cold = _drain_shard(limiter, "cold", 10, 10.0)
    assert hot == pytest.approx(0.05 * 1000 * 11, rel=0.02)
    assert cold == pytest.approx(1000 * 11, rel=0.01)


def test_the_factor_has_a_floor() -> None:
    limiter = ShardRateLimiter(min_factor=0.05, cooldown=0.0)
    for i in range(1000):
        limiter.on_throttled("s", float(i))
    stats = limiter.statistics("s")
    assert stats is not None
    assert stats.factor == 0.05
    assert stats.records_per_s == pytest.approx(0.05 * 1000)
    assert stats.decreases == 1000


def test_throttles_within_the_cooldown_decrease_once() -> None:
    limiter = ShardRateLimiter(cooldown=0.1)
    for _ in range(50):
        limiter.on_throttled("s", 1.0)
    limiter.on_throttled("s", 1.05)
    stats = limiter.statistics("s")
    assert stats is not None
    assert (stats.throttles, stats.decreases) == (51, 1)
    assert stats.factor == pytest.approx(0.9)
    limiter.on_throttled("s", 1.1)
    stats = limiter.statistics("s")
    assert stats is not None
    assert stats.factor == pytest.approx(0.81)


def test_successes_recover_additively_up_to_the_ceiling_and_no_further() -> None:
    limiter = ShardRateLimiter(recovery_per_record=0.001)
    limiter.on_throttled("s", 0.0)
    limiter.on_success("s", 50, 0.0)
    stats = limiter.statistics("s")
    assert stats is not None
    assert stats.factor == pytest.approx(0.95)
    limiter.on_success("s", 10_000, 0.0)
    stats = limiter.statistics("s")
    assert stats is not None
    assert stats.factor == 1.0
    assert stats.records_per_s == 1000


def test_successes_recover_by_the_records_or_the_bytes_whichever_used_more_capacity() -> None:
    """An aggregate of fifty 1 KiB records uses as much of a shard as fifty records sent alone
    (the gentle decrease is undone as fast in both cases)."""
    limiter = ShardRateLimiter(recovery_per_record=0.001)
    limiter.on_throttled("agg", 0.0)
    limiter.on_success("agg", 1, 0.0, 51_200)  # 51,200 bytes: 48.8 records' worth of 1 MiB/s
    stats = limiter.statistics("agg")
    assert stats is not None
    assert stats.factor == pytest.approx(0.9 + 0.001 * 51_200 * 1000 / MIB)
    limiter.on_throttled("small", 0.0)
    limiter.on_success("small", 50, 0.0, 500)  # the records bind
    stats = limiter.statistics("small")
    assert stats is not None
    assert stats.factor == pytest.approx(0.95)
    with pytest.raises(ValueError):
        limiter.on_success("small", 1, 0.0, -1)


def test_forget_drops_a_shard() -> None:
    limiter = ShardRateLimiter()
    limiter.on_throttled("old", 0.0)
    limiter.forget("old")
    limiter.forget("never-seen")
    assert limiter.statistics("old") is None
    assert len(limiter) == 0


def test_tracked_shards_are_bounded_and_the_least_recently_used_goes_first() -> None:
    limiter = ShardRateLimiter(max_shards=3)
    for shard in ("a", "b", "c"):
        limiter.try_acquire(shard, 1, 1, 0.0)
    limiter.delay("a", 1, 1, 0.0)  # a is now more recent than b
    limiter.try_acquire("d", 1, 1, 0.0)
    limiter.on_success("e", 1, 0.0)
    assert len(limiter) == 3
    assert limiter.evicted == 2
    assert list(limiter.all_statistics()) == ["a", "d", "e"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"records_per_s": 0},
        {"bytes_per_s": -1},
        {"rate_limit": 0},
        {"max_record_bytes": 1.5},
        {"decrease": 1.0},
        {"decrease": 0},
        {"min_factor": 0},
        {"min_factor": 1.5},
        {"recovery_per_record": -0.1},
        {"cooldown": -1},
        {"max_shards": 0},
    ],
)
def test_limiter_rejects_bad_configuration(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        ShardRateLimiter(**kwargs)  # type: ignore[arg-type]


_events = st.one_of(
    st.tuples(st.just("acquire"), st.integers(0, 600), st.integers(0, 2 * MIB)),
    st.tuples(st.just("throttle"), st.just(0), st.just(0)),
    st.tuples(st.just("success"), st.integers(0, 500), st.just(0)),
)


@given(st.lists(st.tuples(st.sampled_from(["s0", "s1"]), _events, st.floats(0, 2)), max_size=80))
def test_factor_and_rates_stay_within_floor_and_ceiling(
    events: list[tuple[str, tuple[str, int, int], float]],
) -> None:
    limiter = ShardRateLimiter()
    now = 0.0
    for shard, (kind, a, b), dt in events:
        now += dt
        if kind == "acquire":
            limiter.try_acquire(shard, a, b, now)
        elif kind == "throttle":
            limiter.on_throttled(shard, now)
        else:
            limiter.on_success(shard, a, now)
        for stats in limiter.all_statistics().values():
            assert 0.05 <= stats.factor <= 1.0
            assert stats.records_per_s == pytest.approx(1000 * stats.factor)
            assert stats.bytes_per_s == pytest.approx(MIB * stats.factor)


@given(
    steps=st.lists(
        st.tuples(
            st.floats(0, 0.5),  # seconds since the last step
            st.integers(1, 2 * MIB),  # the lane's first record
            st.floats(0.001, 2.0),  # the batch's seconds
            st.integers(0, 3),  # records spent of the grant, if one was opened
            st.booleans(),  # a throttle first, to vary the rates
        ),
        max_size=40,
    ),
    start=st.floats(0, 1e7),
)
def test_open_answers_what_delay_batch_delay_and_grant_answer_and_charges_as_charge(
    steps: list[tuple[float, int, float, int, bool]], start: float
) -> None:
    # open() reads each bucket once; the same questions asked one by one must agree with it,
    # on an identical limiter, and charge_grant must leave both alike.
    fused, apart = ShardRateLimiter(), ShardRateLimiter()
    now = start
    for dt, nbytes, seconds, spent, throttle in steps:
        now += dt
        if throttle:
            fused.on_throttled("s", now)
            apart.on_throttled("s", now)
        wait = max(apart.delay("s", 1, nbytes, now), apart.batch_delay("s", seconds, now))
        opened = fused.open("s", nbytes, seconds, now)
        if wait > 0:
            assert opened == wait
            continue
        assert not isinstance(opened, float)
        expected = apart.grant("s", now)
        assert (opened.records, opened.nbytes) == (expected.records, expected.nbytes)
        for _ in range(spent):
            opened.spend(nbytes)
            expected.spend(nbytes)
        fused.charge_grant(opened, now)
        apart.charge("s", expected.spent_records, expected.spent_bytes, now)
        assert (opened.spent_records, opened.spent_bytes) == (0, 0)
        assert fused.delay("s", 1, 1, now) == apart.delay("s", 1, 1, now)
        assert fused.grant("s", now).nbytes == apart.grant("s", now).nbytes


def test_a_grant_whose_shard_was_evicted_before_its_charge_still_charges_the_shard() -> None:
    # A grant keeps its shard's buckets; if the shard was evicted meanwhile (max_shards), the
    # buckets it would charge are no longer the shard's, and the spent tokens were lost: the
    # shard, made anew, could send a second's worth again at the same instant.
    limiter = ShardRateLimiter(max_shards=2)
    now = 100.0
    grant = limiter.open("A", 1_000, 0.05, now)
    assert not isinstance(grant, float)
    for _ in range(1_000):
        grant.spend(1_000)
    limiter.open("B", 1_000, 0.05, now)
    limiter.open("C", 1_000, 0.05, now)  # the third shard evicts A, the least recently used
    assert limiter.evicted == 1 and limiter.statistics("A") is None
    limiter.charge_grant(grant, now)
    assert limiter.delay("A", 1, 1_000, now) > 0
    assert limiter.grant("A", now).records < 1
