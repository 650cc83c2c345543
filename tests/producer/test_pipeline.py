"""The producer's sans-IO pipeline, driven without a loop, a clock or a server."""

from __future__ import annotations

import random
from itertools import pairwise
from typing import Any

import pytest

from kinesis_actors import errors
from kinesis_actors.producer import PutResult, ShardRateLimiter
from kinesis_actors.producer._handle import NO_OUTCOMES
from kinesis_actors.producer._pipeline import (
    UNPREDICTED_LANE,
    WHOLE_STREAM_LANE,
    Call,
    Entry,
    Pipeline,
)
from kinesis_actors.producer._waiting import IDLE_DOMAINS, WaitingRoom
from kinesis_actors.records import MAX_HASH_KEY, HashRange, ShardMap, deaggregate, hash_key

HALF = MAX_HASH_KEY // 2
TWO_SHARDS = ShardMap([HashRange("s0", 0, HALF), HashRange("s1", HALF + 1, MAX_HASH_KEY)])

Outcome = tuple[Entry, PutResult | None, BaseException | None]


class Harness:
    def __init__(self, **overrides: Any) -> None:
        self.settled: list[Outcome] = []
        options: dict[str, Any] = {
            "limiter": ShardRateLimiter(records_per_s=1e9, bytes_per_s=1e12),
            "settle": lambda e, r, x: self.settled.append((e, r, x)),
            "aggregation": True,
            "aggregation_max_bytes": 51_200,
            "max_call_records": 500,
            "max_call_bytes": 5 * 1024 * 1024,
            "full_records": 10_000,
            "full_bytes": 5 * 1024 * 1024,
            "linger": 0.1,
            "preserve_order": True,
            "retry_base": 0.1,
            "retry_max": 1.0,
            "record_ttl": None,
            "rng": random.Random(7),
        }
        options.update(overrides)
        shard_map = options.pop("shard_map", TWO_SHARDS)
        self.pipeline = Pipeline(**options)
        self.pipeline.set_shard_map(shard_map)
        self.count = 0

    def add(self, key: str, data: bytes | None = None, now: float = 0.0) -> Entry:
        data = data if data is not None else f"{key}-{self.count}".encode()
        self.count += 1
        entry = Entry(data, key, None, hash_key(key), len(data) + len(key), now)
        self.pipeline.add(entry)
        return entry

    def call_of(self, entry: Entry, now: float) -> Call:
        """The call that sends ``entry`` (added last) at ``now``, forced."""
        call = self.call(now=now)
        assert [e for part in call.parts for e in part.entries] == [entry]
        return call

    def call(self, now: float = 1.0, force: bool = True) -> Call:
        call = self.pipeline.next_call(now, force=force)
        assert call is not None
        return call


def ok(call: Call) -> list[dict[str, Any]]:
    return [{"ShardId": part.lane, "SequenceNumber": str(i)} for i, part in enumerate(call.parts)]


def user_records(call: Call) -> list[tuple[str, bytes]]:
    """What a consumer would see, deaggregated, per Kinesis record in call order."""
    seen = []
    for part in call.parts:
        for record in deaggregate(part.data, part.partition_key):
            seen.append((record.partition_key, record.data))
    return seen


def test_linger_holds_a_lone_record_until_it_is_due() -> None:
    h = Harness()
    h.add("a", now=0.0)
    assert h.pipeline.next_call(0.05) is None
    assert h.pipeline.next_wakeup(0.05) == pytest.approx(0.1)
    call = h.pipeline.next_call(0.1)
    assert call is not None and len(call.parts) == 1


def test_aggregates_only_records_predicted_for_the_same_shard() -> None:
    h = Harness()
    keys = [f"key-{i}" for i in range(40)]
    for key in keys:
        h.add(key)
    call = h.call()
    assert {part.lane for part in call.parts} == {"s0", "s1"}
    for part in call.parts:
        lanes = {TWO_SHARDS.shard_for(entry.partition_key) for entry in part.entries}
        assert lanes == {part.lane}
        # The aggregate's own explicit hash key routes it to the first record's shard.
        assert TWO_SHARDS.shard_for_hash_key(int(part.explicit_hash_key or 0)) == part.lane
    assert sorted(key for key, _ in user_records(call)) == sorted(keys)


def test_a_call_respects_500_records_and_its_byte_limit() -> None:
    h = Harness(aggregation=False, max_call_bytes=20_000)
    for i in range(1200):
        h.add(f"k{i}", b"x" * 10)
    call = h.call()
    assert len(call.parts) == 500
    h2 = Harness(aggregation=False, max_call_bytes=20_000)
    for i in range(100):
        h2.add(f"k{i}", b"x" * 996)  # 1,000 bytes with a 4-character key... about
    call = h2.call()
    assert call.nbytes <= 20_000
    assert len(call.parts) == 20_000 // 1_000


def test_preserve_order_keeps_one_record_per_key_in_flight() -> None:
    h = Harness(aggregation=False)
    for _ in range(3):
        h.add("hot")
    first = h.call()
    assert len(first.parts) == 1
    assert h.pipeline.next_call(5.0, force=True) is None  # the next "hot" waits for the ack
    h.pipeline.complete(first, ok(first), 1.0)
    second = h.call(now=1.0)
    assert [e.data for p in second.parts for e in p.entries] == [b"hot-1"]


def test_without_preserve_order_a_key_goes_as_fast_as_limits_allow() -> None:
    h = Harness(aggregation=False, preserve_order=False)
    for _ in range(3):
        h.add("hot")
    call = h.call()
    assert [e.data for p in call.parts for e in p.entries] == [b"hot-0", b"hot-1", b"hot-2"]


def test_a_throttled_record_is_retried_before_later_records_of_its_key() -> None:
    """No silent drop, and the ordering guarantee: a partial failure never reorders a key."""
    h = Harness(aggregation=False)
    a0, b0 = h.add("a"), h.add("b")
    first = h.call()
    a1 = h.add("a", now=1.0)
    results = ok(first)
    failed_index = next(i for i, p in enumerate(first.parts) if p.entries[0] is a0)
    results[failed_index] = {"ErrorCode": "ProvisionedThroughputExceededException"}
    h.pipeline.complete(first, results, 1.0)
    assert [outcome[0] for outcome in h.settled] == [b0]
    assert h.pipeline.throttled == 1 and h.pipeline.retries == 1
    # "a" waits out its backoff; a1 must not overtake a0.
    assert h.pipeline.next_call(1.0, force=True) is None
    wake = h.pipeline.next_wakeup(1.0, force=True)
    assert wake is not None and 1.0 < wake <= 1.1
    retry = h.call(now=wake)
    assert [e for p in retry.parts for e in p.entries] == [a0]
    h.pipeline.complete(retry, ok(retry), wake)
    last = h.call(now=wake)
    assert [e for p in last.parts for e in p.entries] == [a1]
    assert a0.attempts == 1


def test_records_of_an_aggregate_get_sub_sequence_numbers_in_order() -> None:
    h = Harness()
    entries = [h.add("same") for _ in range(5)]
    call = h.call()
    h.pipeline.complete(call, ok(call), 1.0)
    results = {id(e): r for e, r, _ in h.settled}
    subs = [getattr(results[id(e)], "sub_sequence_number", None) for e in entries]
    assert subs == [0, 1, 2, 3, 4]
    lone = Harness()
    single = lone.add("one")
    call = lone.call()
    lone.pipeline.complete(call, ok(call), 1.0)
    expected = PutResult(TWO_SHARDS.shard_for("one") or "", "0", 0)
    assert lone.settled[0][0] is single and lone.settled[0][1] == expected


@pytest.mark.parametrize("preserve_order", [True, False])
@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize(("size", "aggregates"), [(100, (6, 8)), (8, (1, 1))])
def test_a_hot_keys_long_backlog_drains_in_order_an_aggregate_at_a_time(
    preserve_order: bool, mixed: bool, size: int, aggregates: tuple[int, int]
) -> None:
    """A domain holding more records than the slice of a run handed to an aggregate at once
    (_RUN_SLICE), and, of 100-byte records, than an aggregate: each aggregate is filled, the
    records come out in order, nothing twice, and the waiting room's counts stay true after
    every call."""
    h = Harness(preserve_order=preserve_order)
    sizes = [size + (i % 7 if mixed else 0) for i in range(3_000)]
    for index, size in enumerate(sizes):
        h.add("hot", index.to_bytes(4, "big") * (size // 4) + b"x" * (size % 4))
    pipeline, seen, calls = h.pipeline, [], 0
    while pipeline.pending_records:
        call = h.call(now=1.0 + calls)
        calls += 1
        assert all(len(part.data) <= 51_200 for part in call.parts)
        seen += [data for _, data in user_records(call)]
        pipeline.complete(call, ok(call), 1.0 + calls)
        left = 3_000 - len(seen)
        assert pipeline.pending_records == pipeline.ready_records == left
        assert pipeline.ready_bytes == sum(size + 3 for size in sizes[len(seen) :])
    assert [int.from_bytes(data[:4], "big") for data in seen] == list(range(3_000))
    # 100-106-byte records: ~470 an aggregate; 8-14-byte ones: all 3,000 in one
    assert aggregates[0] <= pipeline.kinesis_records_sent <= aggregates[1]


def test_a_non_retryable_failure_settles_with_its_typed_error() -> None:
    h = Harness()
    entry = h.add("k")
    call = h.call()
    h.pipeline.complete(call, [{"ErrorCode": "KMSAccessDeniedException", "ErrorMessage": "no"}], 1)
    assert h.settled[0][0] is entry
    assert isinstance(h.settled[0][2], errors.KMSError)
    assert h.pipeline.pending_records == 0


def test_record_ttl_fails_a_record_instead_of_retrying_it_forever() -> None:
    h = Harness(record_ttl=2.0, aggregation=False)
    entry = h.add("k", now=0.0)
    call = h.call(now=0.1)
    throttled = errors.ThrottlingError("slow down")
    h.pipeline.fail(call, throttled, 2.5)
    outcome = h.settled[0]
    assert outcome[0] is entry
    assert isinstance(outcome[2], errors.RecordExpiredError)
    assert outcome[2].__cause__ is throttled


def test_record_ttl_also_expires_records_that_never_left() -> None:
    h = Harness(record_ttl=1.0, aggregation=False)
    first = h.add("k", now=0.0)
    h.call(now=0.0)  # "k" is now in flight and its second record waits
    waiting = h.add("k", now=0.0)
    assert h.pipeline.next_call(2.0, force=True) is None
    assert [e for e, _, x in h.settled if isinstance(x, errors.RecordExpiredError)] == [waiting]
    assert first not in [e for e, _, _ in h.settled]


def test_an_acknowledgement_on_another_shard_asks_for_a_new_shard_map() -> None:
    h = Harness()
    h.add("k")
    call = h.call()
    wrong = "s1" if call.parts[0].lane == "s0" else "s0"
    h.pipeline.complete(call, [{"ShardId": wrong, "SequenceNumber": "9"}], 1.0)
    assert h.pipeline.needs_refresh and h.pipeline.mispredicted == 1
    assert h.settled[0][1] == PutResult(wrong, "9", 0)  # the truth, not the prediction


def test_a_new_shard_map_moves_waiting_records_to_their_new_lanes() -> None:
    h = Harness()
    for i in range(20):
        h.add(f"k{i}")
    # A split of both shards into four.
    quarter = MAX_HASH_KEY // 4
    four = ShardMap(
        [
            HashRange("c0", 0, quarter),
            HashRange("c1", quarter + 1, HALF),
            HashRange("c2", HALF + 1, HALF + quarter),
            HashRange("c3", HALF + quarter + 1, MAX_HASH_KEY),
        ]
    )
    h.pipeline.set_shard_map(four)
    call = h.call()
    for part in call.parts:
        assert {four.shard_for(e.partition_key) for e in part.entries} == {part.lane}
    assert sum(len(p.entries) for p in call.parts) == 20


def test_a_gap_in_the_shard_map_uses_the_unpredicted_lane_and_asks_for_a_refresh() -> None:
    h = Harness(shard_map=ShardMap([HashRange("s0", 0, HALF)]))
    key = next(f"k{i}" for i in range(100) if hash_key(f"k{i}") > HALF)
    h.add(key)
    assert h.pipeline.needs_refresh
    assert h.call().parts[0].lane == UNPREDICTED_LANE


def test_auto_distribution_uses_one_lane_for_the_stream() -> None:
    h = Harness(shard_map=None)
    for i in range(10):
        h.add(f"k{i}")
    call = h.call()
    assert [p.lane for p in call.parts] == [WHOLE_STREAM_LANE]
    assert len(call.parts[0].entries) == 10


def test_a_rate_limited_lane_waits_and_does_not_hold_up_the_other() -> None:
    limiter = ShardRateLimiter(records_per_s=2, bytes_per_s=1e9, rate_limit=1.0)
    h = Harness(limiter=limiter, aggregation=False, preserve_order=False)
    s0_keys = [f"k{i}" for i in range(50) if TWO_SHARDS.shard_for(f"k{i}") == "s0"][:5]
    s1_key = next(f"k{i}" for i in range(50) if TWO_SHARDS.shard_for(f"k{i}") == "s1")
    for key in s0_keys:
        h.add(key)
    h.add(s1_key)
    call = h.call(now=0.0)
    by_lane: dict[str, int] = {}
    for part in call.parts:
        by_lane[part.lane] = by_lane.get(part.lane, 0) + 1
    assert by_lane == {"s0": 2, "s1": 1}  # a bucket of 2 records; s1 unaffected
    wake = h.pipeline.next_wakeup(0.0, force=True)
    # The next token comes at 0.5 s; the lane looks at the quantum's next grid point.
    assert wake == pytest.approx(0.6)


def test_paced_shards_counts_the_shards_whose_pacing_holds_ready_records_back() -> None:
    limiter = ShardRateLimiter(records_per_s=2, bytes_per_s=1e9, rate_limit=1.0)
    h = Harness(limiter=limiter, aggregation=False, preserve_order=False)
    s0_keys = [f"k{i}" for i in range(50) if TWO_SHARDS.shard_for(f"k{i}") == "s0"][:5]
    s1_key = next(f"k{i}" for i in range(50) if TWO_SHARDS.shard_for(f"k{i}") == "s1")
    for key in s0_keys:
        h.add(key)
    h.add(s1_key)
    assert h.pipeline.paced_shards(0.0) == 0  # nothing was refused a grant yet
    h.call(now=0.0)  # s0 sends its bucket of 2 and waits; s1 sends its only record
    assert h.pipeline.paced_shards(0.0) == 1
    # Once s0's tokens are back it is not held any more, whether or not a call went since.
    assert h.pipeline.paced_shards(10.0) == 0


def test_drain_and_abandon_settle_everything_with_the_error() -> None:
    h = Harness(aggregation=False)
    sent = h.add("a")
    call = h.call()
    waiting = [h.add("a"), h.add("b")]
    closed = errors.ProducerClosedError("closed")
    assert h.pipeline.drain(closed) == 2
    h.pipeline.abandon(call, closed)
    assert {id(e) for e, _, x in h.settled if x is closed} == {id(sent), *map(id, waiting)}


@pytest.mark.parametrize("aggregation", [True, False])
def test_an_abandoned_call_releases_its_keys_for_their_next_records(aggregation: bool) -> None:
    """With ``preserve_order`` a key's next records wait while one of its records is in
    flight. A call abandoned while the pipeline goes on (not after a drain) fails its records
    and must let those keys move, or their next records would wait for good."""
    h = Harness(aggregation=aggregation)
    first = [h.add("a"), h.add("b")]
    call = h.call()
    later = [h.add("a"), h.add("b")]
    assert h.pipeline.next_call(1.0, force=True) is None  # both keys are in flight
    lost = errors.ProducerClosedError("cut")
    h.pipeline.abandon(call, lost)
    assert sorted(id(e) for e, _, x in h.settled if x is lost) == sorted(map(id, first))
    again = h.call()
    assert sorted(id(e) for part in again.parts for e in part.entries) == sorted(map(id, later))


@pytest.mark.parametrize("answer", ["throttled call", "throttled records", "unknown"])
def test_an_answer_landing_after_a_drain_settles_its_records_instead_of_retrying(
    answer: str,
) -> None:
    """An abort drains the pipeline and cancels the calls in flight, but a call whose answer
    had already arrived (its sender scheduled, not yet run) still reports it. Its records used
    to go back into the drained pipeline, where nothing would ever send or settle them: a
    flush waiting on them (SyncProducer's close after an abort) hung for good."""
    h = Harness(aggregation=False)
    a, b = h.add("a"), h.add("b")
    call = h.call()
    closed = errors.ProducerClosedError("aborted")
    h.pipeline.drain(closed)
    throttled = errors.ThrottlingError("ProvisionedThroughputExceededException")
    if answer == "throttled call":
        h.pipeline.fail(call, throttled, 1.0)
    elif answer == "throttled records":
        failure = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "x"}
        h.pipeline.complete(call, [failure, failure], 1.0)
    else:
        h.pipeline.unknown(call, errors.MalformedReplyError("?", operation="PutRecords"), 1.0)
    assert sorted(id(e) for e, _, x in h.settled if x is closed) == sorted([id(a), id(b)])
    assert h.pipeline.pending_records == 0
    assert h.pipeline.next_call(10.0, force=True) is None


@pytest.mark.parametrize("aggregation", [True, False])
def test_an_acknowledgement_after_a_drain_moves_no_domain_of_the_drained_pipeline(
    aggregation: bool,
) -> None:
    """An answer's release moves the domains it names (an aggregate names its runs'); after
    a drain they hold nothing: nothing is counted ready or sent again."""
    h = Harness(aggregation=aggregation)
    h.add("a"), h.add("a"), h.add("b")
    call = h.call()
    sent = [entry for part in call.parts for entry in part.entries]
    h.add("a")  # waits behind its key's records in flight
    h.pipeline.drain(errors.ProducerClosedError("closed"))
    h.pipeline.complete(call, ok(call), 1.0)
    assert [id(e) for e, r, _ in h.settled if r is not None] == [id(e) for e in sent]
    assert h.pipeline.ready_records == h.pipeline.pending_records == 0
    assert h.pipeline.next_call(10.0, force=True) is None


def test_a_domain_reused_after_its_records_expired_backs_off_from_its_new_failure_only() -> None:
    """Idle domains are kept for their key's next records; one that went idle while backing
    off (its records expired) must not make the next record of its key wait out that old
    backoff after a failure of its own."""
    h = Harness(aggregation=False, retry_base=0.1, retry_max=1000.0, record_ttl=50.0)
    throttled = errors.ThrottlingError("ProvisionedThroughputExceededException")
    h.add("a", now=0.0)
    now = 0.0
    while now < 50.0:  # fail until the backoff (ceilings doubling from 0.1 s) passes 50 s
        call = h.call(now)
        h.pipeline.fail(call, throttled, now)
        (domain,) = h.pipeline._room._domains.values()
        now = domain.not_before
    old_not_before = domain.not_before
    assert old_not_before > 50.2  # backing off past the record's deadline (50 s)
    h.pipeline.next_call(50.05, force=True)  # the sweep fails the expired record
    assert isinstance(h.settled[-1][2], errors.RecordExpiredError)
    h.add("a", now=50.05)  # the same key: the idle domain is reused
    call = h.call(50.05)
    h.pipeline.fail(call, throttled, 50.05)
    assert h.pipeline._room._domains["a"].not_before <= 50.05 + 0.1  # its own first backoff


def test_an_answer_with_the_wrong_number_of_results_is_an_unknown_outcome() -> None:
    h = Harness(aggregation=False)
    a, b = h.add("a"), h.add("b")
    call = h.call()
    h.pipeline.complete(call, [], 1.0)
    assert h.settled == []
    assert h.pipeline.retries == 2
    assert a.unknown_outcomes == b.unknown_outcomes == 1
    assert isinstance(a.last_error, errors.MalformedReplyError)


def test_a_record_backing_off_expires_at_its_deadline_not_after_its_backoff() -> None:
    h = Harness(record_ttl=1.0, retry_base=10.0, retry_max=10.0, aggregation=False)
    entry = h.add("k", now=0.0)
    call = h.call(now=0.1)
    h.pipeline.fail(call, errors.ThrottlingError("slow down"), 0.2)
    assert h.settled == []  # backing off, for up to 10 s
    assert h.pipeline.next_wakeup(0.2, force=True) == 1.0  # ... but woken at its deadline
    assert h.pipeline.next_call(0.99, force=True) is None
    assert h.settled == []
    assert h.pipeline.next_call(1.0, force=True) is None  # failed, never sent again
    (settled,) = h.settled
    assert settled[0] is entry and isinstance(settled[2], errors.RecordExpiredError)
    assert "after 1 attempt(s)" in str(settled[2])
    assert h.pipeline.pending_records == 0


def test_a_record_waiting_behind_its_key_expires_at_its_deadline() -> None:
    h = Harness(record_ttl=1.0, aggregation=False)
    h.add("k", now=0.0)
    h.call(now=0.0)  # in flight: the next record of "k" waits for it
    waiting = h.add("k", now=0.5)
    # The first record's deadline may wake the dispatcher once for nothing (it is in flight):
    assert h.pipeline.next_call(1.0, force=True) is None and h.settled == []
    assert h.pipeline.next_wakeup(1.0, force=True) == 1.5
    h.pipeline.next_call(1.5, force=True)
    assert [e for e, _, x in h.settled if isinstance(x, errors.RecordExpiredError)] == [waiting]


def test_an_older_retry_behind_a_younger_one_still_expires_at_its_deadline() -> None:
    """Without preserve_order two records of a key can be in flight and fail in reverse order;
    the older one, put back behind the younger, must still be failed at its own deadline, not
    sent after it (found by the pipeline's model-based test)."""
    h = Harness(record_ttl=1.0, aggregation=False, preserve_order=False)
    old = h.add("k", now=0.0)
    first = h.call(now=0.0)
    young = h.add("k", now=0.5)
    second = h.call(now=0.5)
    throttled = [{"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "x"}]
    h.pipeline.complete(first, throttled, 0.6)  # the older one back first,
    h.pipeline.complete(second, throttled, 0.7)  # then the younger, at the front of the key
    call = h.pipeline.next_call(1.2, force=True)  # past the older one's deadline (1.0)
    sent = [] if call is None else [entry for part in call.parts for entry in part.entries]
    assert old not in sent
    assert [e for e, _, x in h.settled if isinstance(x, errors.RecordExpiredError)] == [old]
    assert young in sent  # its deadline is 1.5


@pytest.mark.parametrize(
    "result",
    [{}, {"ShardId": "s0"}, {"SequenceNumber": "1"}, {"ShardId": 1, "SequenceNumber": "1"}, "x"],
    ids=["empty", "no-sequence", "no-shard", "int-shard", "not-an-object"],
)
def test_a_result_with_neither_position_nor_error_is_an_unknown_outcome(result: Any) -> None:
    h = Harness(aggregation=False)
    h.add("a")
    call = h.call()
    h.pipeline.complete(call, [result], 1.0)  # no KeyError, no acknowledgement
    assert h.settled == [] and h.pipeline.retries == 1


def test_unknown_outcomes_are_resent_at_most_max_unknown_outcomes_times() -> None:
    h = Harness(aggregation=False, max_unknown_outcomes=3, retry_base=0.001, retry_max=0.001)
    entry = h.add("a")
    now, sent = 1.0, 0
    while not h.settled:
        call = h.call(now=now)
        sent += 1
        h.pipeline.fail(call, errors.MalformedReplyError("garbled", operation="PutRecords"), now)
        now += 1.0
    assert sent == 3
    (settled,) = h.settled
    assert settled[0] is entry and isinstance(settled[2], errors.MalformedReplyError)
    assert "up to 3 time(s)" in str(settled[2])
    assert isinstance(settled[2].__cause__, errors.MalformedReplyError)


def test_throttles_and_5xx_do_not_count_as_unknown_outcomes() -> None:
    h = Harness(aggregation=False, max_unknown_outcomes=1, retry_base=0.001, retry_max=0.001)
    entry = h.add("a")
    now = 1.0
    for error in (errors.ThrottlingError("slow"), errors.ServiceError("500")) * 3:
        h.pipeline.fail(h.call(now=now), error, now)
        now += 1.0
    assert h.settled == [] and entry.attempts == 6 and entry.unknown_outcomes == 0


class CountingLimiter(ShardRateLimiter):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.charged_bytes = 0

    def charge(self, shard_id: str, records: int, nbytes: int, now: float) -> None:
        self.charged_bytes += nbytes
        super().charge(shard_id, records, nbytes, now)


def test_every_kinesis_record_sent_is_charged_to_its_shard() -> None:
    """A benchmark found aggregates a few bytes over the byte tokens going out uncharged."""
    limiter = CountingLimiter(records_per_s=1e6, bytes_per_s=60_000)
    h = Harness(limiter=limiter)
    for i in range(3_000):
        h.add(f"key-{i % 300}", b"x" * 100)
    sent = 0
    now = 0.0
    for _ in range(50):
        call = h.pipeline.next_call(now, force=True)
        if call is not None:
            sent += call.nbytes
            h.pipeline.complete(call, ok(call), now)
        now += 0.1
    assert sent > 0 and limiter.charged_bytes == sent


def test_a_saturated_shard_waits_for_a_batch_worth_of_tokens() -> None:
    """One call per quantum (200 ms of tokens), not one call per trickle of tokens."""
    limiter = ShardRateLimiter(records_per_s=1_000, bytes_per_s=1e12)
    h = Harness(limiter=limiter, aggregation=False, preserve_order=False)
    key = next(f"k{i}" for i in range(50) if TWO_SHARDS.shard_for(f"k{i}") == "s0")
    for _ in range(3_000):
        h.add(key, b"x")
    first = h.call(now=0.0)
    assert len(first.parts) == 500  # the bucket's 1,000 tokens, at most 500 per call
    second = h.call(now=0.0)
    assert len(second.parts) == 500
    assert h.pipeline.next_call(0.001, force=True) is None  # one token earned: not enough
    wake = h.pipeline.next_wakeup(0.001, force=True)
    assert wake == pytest.approx(0.2, abs=1e-6)  # the grid's next point
    third = h.call(now=0.2)
    assert 195 <= len(third.parts) <= 205


def test_a_saturated_shard_calls_on_the_quantums_grid_whatever_the_loops_latency() -> None:
    """A caller late by its latency at every wake-up still sends a quantum's tokens at every
    point of the grid: the calls keep their spacing (without the grid they drifted by the
    latency each time, so some seconds held a call less)."""
    limiter = ShardRateLimiter(records_per_s=1_000, bytes_per_s=1e12)
    h = Harness(limiter=limiter, aggregation=False, preserve_order=False)
    key = next(f"k{i}" for i in range(50) if TWO_SHARDS.shard_for(f"k{i}") == "s0")
    for _ in range(6_000):
        h.add(key, b"x")
    now, sent = 0.0, []
    while len(sent) < 12:
        call = h.pipeline.next_call(now, force=True)
        if call is not None:
            sent.append((now, len(call.parts)))
            h.pipeline.complete(call, ok(call), now)
            continue  # an answer wakes the caller, which looks again at once
        wake = h.pipeline.next_wakeup(now, force=True)
        assert wake is not None
        now = wake + 0.013  # the loop's latency, every time
    steady = sent[4:]  # past the first second's burst
    points = [round((at - 0.013) / 0.2, 6) for at, _ in steady]
    assert points == [float(round(point)) for point in points]
    assert [b - a for a, b in pairwise(points)] == [1.0] * (len(points) - 1)
    assert all(195 <= parts <= 205 for _, parts in steady)


def test_records_over_half_an_aggregate_go_alone() -> None:
    h = Harness(aggregation_max_bytes=1_000)
    big = [h.add("same", b"x" * 600) for _ in range(2)]
    call = h.call()
    assert [p.entries for p in call.parts] == [[big[0]]]  # one per key in flight, alone
    assert call.parts[0].data == b"x" * 600


def test_idle_domains_are_kept_for_their_next_records_and_pruned_past_the_bound() -> None:
    h = Harness()
    h.add("a")
    h.add("a")  # a key's second record: the two share a domain
    call = h.call()
    h.pipeline.complete(call, ok(call), 1.0)
    domain = h.pipeline._room._domains["a"]  # idle now, and kept
    h.add("a")
    assert h.pipeline._room._domains["a"] is domain  # the key's next record reuses it
    call = h.call()
    h.pipeline.complete(call, ok(call), 1.0)
    largest = 0
    for index in range(3 * IDLE_DOMAINS):  # one new key at a time, two records each
        h.add(f"k{index}")
        h.add(f"k{index}")
        call = h.call()
        h.pipeline.complete(call, ok(call), 1.0)
        largest = max(largest, len(h.pipeline._room._domains))
    assert largest <= IDLE_DOMAINS + 1  # past it, every idle one was pruned
    assert len(h.pipeline._room._domains) < IDLE_DOMAINS
    assert len(h.settled) == 2 * 3 * IDLE_DOMAINS + 3


def test_pruned_domains_are_made_new_for_keys_never_seen_before() -> None:
    """Keys that come in pairs need a domain each: pruned ones are made new, so the domains
    ever made stay at the prune bound, and each lands in its new key's lane."""
    h = Harness()
    made: dict[int, object] = {}  # held, so that no two domains share an id
    for index in range(3 * IDLE_DOMAINS):
        key = f"k{index}"
        h.add(key)
        h.add(key)
        domain = h.pipeline._room._domains[key]
        made[id(domain)] = domain
        assert (domain.key, domain.lane.shard_id) == (key, TWO_SHARDS.shard_for(key))
        call = h.call()
        assert [(e.partition_key, p.lane) for p in call.parts for e in p.entries] == [
            (key, TWO_SHARDS.shard_for(key))
        ] * 2
        h.pipeline.complete(call, ok(call), 1.0)
    assert len(made) <= IDLE_DOMAINS + 2  # the first prune comes at IDLE_DOMAINS + 1
    assert len(h.settled) == 2 * 3 * IDLE_DOMAINS
    assert all(error is None for _, _, error in h.settled)


@pytest.mark.parametrize("preserve_order", [True, False])
def test_a_keys_lone_record_waits_as_itself_without_a_domain(preserve_order: bool) -> None:
    """Keys that never repeat (UUIDs): each record waits as itself in its key's lane, and
    no domain is made, kept or pruned for it."""
    h = Harness(preserve_order=preserve_order)
    for index in range(3 * IDLE_DOMAINS):
        key = f"k{index}"
        entry = h.add(key)
        assert h.pipeline._room._lone[key] is entry
        call = h.call()
        assert [(e, p.lane) for p in call.parts for e in p.entries] == [
            (entry, TWO_SHARDS.shard_for(key))
        ]
        h.pipeline.complete(call, ok(call), 1.0)
        assert key not in h.pipeline._room._lone  # its key is free again
    assert h.pipeline._room._domains == {}
    assert h.pipeline._room._spare_domains == []
    assert len(h.settled) == 3 * IDLE_DOMAINS
    assert all(error is None for _, _, error in h.settled)


def test_a_keys_second_record_waits_behind_its_first_in_flight_alone() -> None:
    """With preserve_order, a key whose one record is in flight (as itself, no domain) has
    its next record wait for that answer."""
    h = Harness()
    first = h.add("a")
    sent = h.call()
    second = h.add("a")
    assert h.pipeline.next_call(2.0, force=True) is None  # "a" is in flight
    h.pipeline.complete(sent, ok(sent), 2.0)
    assert [e for part in h.call(2.0).parts for e in part.entries] == [second]
    assert [entry for entry, _, _ in h.settled] == [first]


def test_a_keys_second_record_joins_its_first_waiting_alone_in_order() -> None:
    """A key's record waiting as itself is joined by the key's next one: both go, in order,
    in one Kinesis record."""
    h = Harness()
    first = h.add("a")
    second = h.add("a")
    call = h.call()
    assert [part.entries for part in call.parts] == [[first, second]]
    assert user_records(call) == [("a", first.data), ("a", second.data)]


@pytest.mark.parametrize("preserve_order", [True, False])
def test_a_lone_record_that_failed_goes_again_before_its_keys_next_record(
    preserve_order: bool,
) -> None:
    """A lone record's failure puts it back first in a domain of its key, ahead of the key's
    record that came meanwhile (which, without preserve_order, was waiting alone)."""
    h = Harness(preserve_order=preserve_order, retry_base=0.1, retry_max=0.1)
    first = h.add("a")
    sent = h.call()
    second = h.add("a")
    h.pipeline.fail(sent, errors.ThrottlingError("ProvisionedThroughputExceededException"), 1.0)
    again = h.call(5.0)
    assert [e for part in again.parts for e in part.entries] == [first, second]


def test_a_pruned_domain_still_named_in_a_lane_queue_is_not_made_new() -> None:
    """A domain can fall idle while its lane's queue still names it (records that expired
    while ready); made new for another key, that stale name would stand for it."""
    room = WaitingRoom(preserve_order=True)
    stale = room.new_domain("stale", hash_key("stale"))
    stale.queued = True  # idle and empty, but still in a lane's queue
    idle = room.new_domain("idle", hash_key("idle"))
    room._prune()
    assert room._spare_domains == [idle]
    assert room.new_domain("next", hash_key("next")) is idle


def test_acknowledged_aggregates_speed_their_throttled_shard_up_by_their_bytes() -> None:
    """The capacity benchmark's first burst meets 2 throttles a shard; counted per Kinesis
    record, its ~20 aggregates a second earned back 0.02 a second: 10 % of the shard's
    capacity lost for 5 s. Each aggregate now counts as the capacity it used."""
    limiter = ShardRateLimiter()  # the service's 1,000 records/s and 1 MiB/s
    h = Harness(limiter=limiter)
    # Keys of the lower half of s0: an aggregate holds one half of its shard's range.
    keys = [f"k{i}" for i in range(400) if 2 * hash_key(f"k{i}") <= HALF][:50]
    limiter.on_throttled("s0", 0.0)
    for i in range(150):
        h.add(keys[i % len(keys)], b"x" * 1024)
    call = h.call(now=0.05)  # within the cooldown: the throttle below does not slow it again
    assert [part.lane for part in call.parts] == ["s0"] * 3
    results = ok(call)
    results[2] = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "x"}
    h.pipeline.complete(call, results, 0.05)
    used = sum(part.size for part in call.parts[:2]) / 1048.576  # records' worth of capacity
    stats = limiter.statistics("s0")
    assert stats is not None and stats.throttles == 2 and stats.decreases == 1
    assert stats.factor == pytest.approx(0.9 + 0.001 * used)
    assert stats.factor > 0.99  # it was 0.902: two Kinesis records


def test_the_lane_whose_head_waited_longest_meets_the_shards_tokens_first() -> None:
    """Both halves of a saturated shard share its tokens: the older head goes first, so
    neither half runs dry and sends its keys a record at a time while the other holds the
    backlog (what the lanes' dict order did)."""
    limiter = ShardRateLimiter(records_per_s=1e9, bytes_per_s=800, max_record_bytes=800)
    h = Harness(limiter=limiter)
    keys = [f"k{i}" for i in range(400) if TWO_SHARDS.shard_for(f"k{i}") == "s0"]
    middle = (HALF + 1) // 2  # where s0's upper half starts
    lower = [key for key in keys if hash_key(key) < middle][:5]
    upper = [key for key in keys if hash_key(key) >= middle][:5]
    for key in lower:  # its lane is made first, and its records are the younger
        h.add(key, b"y" * 100, now=0.5)
    for key in upper:
        h.add(key, b"x" * 100, now=0.2)
    sent = {entry.partition_key for part in h.call(now=1.0).parts for entry in part.entries}
    assert set(upper) <= sent  # the shard's 800 bytes of tokens went to the older half
    assert not set(lower) <= sent  # the younger half had the rest


def test_a_record_for_an_open_shard_is_not_held_behind_another_shards_pacing() -> None:
    """The dispatcher's looks read a summary of the lanes kept between them (the oldest head,
    the first lane that may send). While one shard is paced, a record for another shard whose
    tokens are there goes at the next look, not when the paced shard opens."""
    h = Harness(limiter=ShardRateLimiter(records_per_s=1, bytes_per_s=1e12), linger=0.05)
    keys = {TWO_SHARDS.shard_for(f"k{i}"): f"k{i}" for i in range(50)}
    sent = h.call_of(h.add(keys["s0"], now=0.0), now=0.0)  # the shard's one token
    h.pipeline.complete(sent, ok(sent), 0.0)
    h.add(keys["s0"], now=0.01)  # paced: s0's next token comes at 1 s
    assert h.pipeline.next_call(0.1) is None
    assert h.pipeline.next_wakeup(0.1) == pytest.approx(1.0)
    other = h.add(keys["s1"], now=0.3)
    call = h.pipeline.next_call(0.3)  # the dispatcher's look when the record came
    assert call is not None, "held until s0 opens"
    assert [part.entries for part in call.parts] == [[other]]
    assert h.pipeline.next_wakeup(0.3) == pytest.approx(1.0)  # s0's record, when s0 opens


def _key_of_other_shard(key: str) -> str:
    """A key whose record the map predicts for another shard than ``key``'s."""
    own = TWO_SHARDS.shard_for(key)
    return next(
        candidate
        for candidate in (f"other-{index}" for index in range(1_000))
        if TWO_SHARDS.shard_for(candidate) != own
    )


def test_a_lone_records_entry_refilled_after_it_expired_is_sent_from_its_new_keys_lane() -> None:
    """Entries are recycled: a lone record that expired while ready leaves a stale place in
    its lane's queue (dropped at the lane's next look, which a linger or the pacing can put
    off), and its entry may come back at once for another key's record. That stale place
    must not pass for the new record: taken there, it would share an aggregate of the old
    key's lane, on a shard that does not own its key."""
    h = Harness(record_ttl=1.0)
    entry = h.add("a", now=0.0)
    assert h.pipeline.next_call(5.0) is None  # the sweep expires it
    assert isinstance(h.settled[-1][2], errors.RecordExpiredError)
    other = _key_of_other_shard("a")
    data = b"recycled"
    entry.fill(data, other, None, hash_key(other), len(data) + len(other), NO_OUTCOMES, 0, 0)
    entry.enqueued = 5.0
    h.pipeline.add(entry)
    call = h.call(5.5)
    assert [(part.lane, part.entries) for part in call.parts] == [
        (TWO_SHARDS.shard_for(other), [entry])
    ]


def test_a_refilled_lone_entry_does_not_join_an_aggregate_of_its_old_lane() -> None:
    """The silent form of the same fault: a lone record expired behind a key whose record is
    in flight; refilled for a key of the other shard, its stale place sat behind that key's
    domain, which its answer put back at the lane's head. The aggregate built there would
    carry the new record to a shard that does not own its key, acknowledged, unseen."""
    h = Harness(record_ttl=1.0, linger=10.0)
    a_half = TWO_SHARDS.shard_for("a"), hash_key("a") % 2**127 >= 2**126
    neighbour = next(
        key
        for key in (f"y{index}" for index in range(1_000))
        if (TWO_SHARDS.shard_for(key), hash_key(key) % 2**127 >= 2**126) == a_half
    )
    h.add(neighbour, now=0.0)
    sent = h.call(0.0)  # the neighbour's record out, alone
    entry = h.add("a", now=0.05)  # lone, in the neighbour's lane
    h.add(neighbour, now=0.9)  # waits behind its key's record in flight
    assert h.pipeline.next_call(1.2) is None  # the sweep expires "a"
    other = _key_of_other_shard("a")
    data = b"recycled"
    entry.fill(data, other, None, hash_key(other), len(data) + len(other), NO_OUTCOMES, 0, 0)
    entry.enqueued = 1.2
    h.pipeline.add(entry)
    h.pipeline.complete(sent, ok(sent), 1.2)  # the neighbour's domain: ready at the front
    call = h.call(1.3)
    lanes = {e.partition_key: part.lane for part in call.parts for e in part.entries}
    assert lanes == {neighbour: TWO_SHARDS.shard_for("a"), other: TWO_SHARDS.shard_for(other)}


def test_places_left_by_lone_records_are_bounded_while_their_lane_does_not_move() -> None:
    """Lone records that expire or join a domain leave their places in a lane's queue, which
    only the head drops; a lane that lingers (or is paced) while records come and go must
    not pile them up: they are swept out once they are half the queue."""
    h = Harness(record_ttl=1.0, linger=1_000.0)
    room = h.pipeline._room
    longest = 0
    for round_ in range(60):
        now = 2.0 * round_
        for index in range(50):
            h.add(f"gone-{round_}-{index}", now=now)  # expires alone
            h.add(f"pair-{round_}-{index}", now=now)  # joined by the next, then expires
            h.add(f"pair-{round_}-{index}", now=now)
        assert h.pipeline.next_call(now + 1.5) is None  # the sweep: every one expired
        longest = max([longest, *(len(lane.ready) for lane in room._lanes.lanes())])
    assert len(h.settled) == 60 * 150
    assert all(isinstance(error, errors.RecordExpiredError) for _, _, error in h.settled)
    assert longest <= 2 * 64 + 150  # the sweep's floor, twice, and one round's places
