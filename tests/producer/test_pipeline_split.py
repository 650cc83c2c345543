"""The pipeline across a split: no key's records in two children (issue 31, finding 1).

Sans-IO, without a loop or a server. A fake service places each Kinesis record as Kinesis
does, by its explicit hash key (an aggregate's is its first record's hash key) or its
partition key's hash, on the shards open *now*, while the pipeline still predicts with the
map it was given. Readers of a split's two children run in parallel, so a key with records
in both is delivered out of order: every test checks where each user record landed against
the shard that owns its key.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_actors.producer import ShardRateLimiter
from kinesis_actors.producer._pipeline import Call, Entry, Part, Pipeline
from kinesis_actors.records import MAX_HASH_KEY, HashRange, ShardMap, deaggregate, hash_key

PARENT = ShardMap([HashRange("p", 0, MAX_HASH_KEY)])
MIDDLE = (MAX_HASH_KEY + 1) // 2  # SplitShard's usual NewStartingHashKey for this range


def children(split_at: int) -> ShardMap:
    """The open shards after splitting ``p``: ``c0`` below ``split_at``, ``c1`` from it."""
    return ShardMap([HashRange("c0", 0, split_at - 1), HashRange("c1", split_at, MAX_HASH_KEY)])


class Service:
    """Places Kinesis records on the shards open now, and remembers where each key went."""

    def __init__(self, shards: ShardMap) -> None:
        self.shards = shards
        self.landed: dict[str, set[str]] = defaultdict(set)  # key -> shards holding it
        self.misplaced: list[tuple[str, str]] = []  # (key, shard) where the shard is not its own

    def answer(self, call: Call) -> list[dict[str, Any]]:
        results = []
        for index, part in enumerate(call.parts):
            routing = part.explicit_hash_key
            shard = self.shards.shard_for_hash_key(
                int(routing) if routing is not None else hash_key(part.partition_key)
            )
            assert shard is not None
            # What a reader of the shard gets: every user record inside, checked by its key.
            for record in deaggregate(part.data, part.partition_key):
                self.landed[record.partition_key].add(shard)
                if self.shards.shard_for(record.partition_key) != shard:
                    self.misplaced.append((record.partition_key, shard))
            results.append({"ShardId": shard, "SequenceNumber": str(index)})
        return results

    def keys_in_two_children(self) -> list[str]:
        return sorted(key for key, shards in self.landed.items() if len(shards - {"p"}) > 1)


def pipeline(settled: list[Entry], **overrides: Any) -> Pipeline:
    options: dict[str, Any] = {
        "limiter": ShardRateLimiter(records_per_s=1e9, bytes_per_s=1e12),
        "settle": lambda entry, result, error: settled.append(entry),
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
    made = Pipeline(**options)
    made.set_shard_map(PARENT)
    return made


def add(p: Pipeline, keys: list[str], rounds: int = 1, now: float = 0.0) -> None:
    for round_ in range(rounds):
        for key in keys:
            data = f"{key}|{round_}".encode()
            p.add(Entry(data, key, None, hash_key(key), len(data) + len(key), now))


def calls(p: Pipeline, now: float = 1.0, most: int = 1_000) -> list[Call]:
    """The calls the pipeline would send now (``most`` of them), none answered: all in
    flight at once."""
    out = []
    while len(out) < most and (call := p.next_call(now, force=True)) is not None:
        out.append(call)
    return out


def owner(shards: ShardMap, part: Part | Entry) -> set[str | None]:
    return {shards.shard_for_hash_key(entry.hash_key) for entry in part.entries}


KEYS = [f"user-{i}" for i in range(300)]


def test_an_aggregate_holds_keys_of_one_half_of_its_shard() -> None:
    settled: list[Entry] = []
    p = pipeline(settled)
    add(p, KEYS, rounds=3)
    halves = children(MIDDLE)
    built = [part for call in calls(p) for part in call.parts]
    assert any(len(set(owner(halves, part))) == 1 and len(part.entries) > 50 for part in built)
    for part in built:
        assert len(owner(halves, part)) == 1, "an aggregate straddles its shard's midpoint"


def test_a_split_at_the_midpoint_with_aggregates_in_flight_puts_no_key_in_both_children() -> None:
    """The common split: every aggregate in flight across it lands whole on one child, the
    one that owns all its keys, so nothing is misplaced even before the first sign."""
    settled: list[Entry] = []
    # Small aggregates and calls: several calls in flight at the split.
    p = pipeline(settled, aggregation_max_bytes=2_000, max_call_records=3)
    add(p, KEYS, rounds=4)
    in_flight = calls(p)
    assert len(in_flight) > 1
    service = Service(children(MIDDLE))  # the split happens here, unknown to the pipeline
    for call in in_flight:
        p.complete(call, service.answer(call), 1.0)
    assert p.mispredicted and p.needs_refresh
    for call in calls(p, now=1.1):  # the stale map, before a listing shows the children
        p.complete(call, service.answer(call), 1.1)
    p.set_shard_map(service.shards)
    while p.pending_records:
        for call in calls(p, now=1.2):
            p.complete(call, service.answer(call), 1.2)
    assert len(settled) == 4 * len(KEYS)
    assert service.misplaced == []
    assert service.keys_in_two_children() == []
    assert p.misplaced_records == 0


def test_an_acknowledgement_from_a_child_stops_the_parents_keys_sharing_aggregates() -> None:
    """A split off the midpoint, first seen as an answer from a child: from then on, until
    the map is current, each Kinesis record of the parent's lanes holds one key, which lands
    on the child that owns it (before the fix, up to ``shard_map_min_refresh_interval`` of
    mixed aggregates, 107-113 records of 19-27 keys a split, landed on the wrong child)."""
    settled: list[Entry] = []
    p = pipeline(settled)
    add(p, KEYS)
    [first] = calls(p)  # built and sent before the split
    service = Service(children(MAX_HASH_KEY // 3))
    p.complete(first, service.answer(first), 1.0)
    misplaced_by_the_first = len(service.misplaced)
    assert misplaced_by_the_first > 0  # its aggregates straddled the split point
    add(p, KEYS, rounds=3, now=1.0)
    stale = calls(p, now=1.1)
    for call in stale:
        for part in call.parts:
            assert len({entry.partition_key for entry in part.entries}) == 1
        p.complete(call, service.answer(call), 1.1)
    assert len(service.misplaced) == misplaced_by_the_first  # nothing since the first sign
    assert p.misplaced_records == 0  # not known until a map says who owns what
    p.set_shard_map(service.shards)
    assert p.misplaced_records == misplaced_by_the_first
    assert p.misplaced_keys == len({key for key, _ in service.misplaced})


def test_a_listing_that_shows_the_split_aggregates_many_keys_per_child_again() -> None:
    settled: list[Entry] = []
    p = pipeline(settled)
    add(p, KEYS)
    [first] = calls(p)
    service = Service(children(MAX_HASH_KEY // 3))
    p.complete(first, service.answer(first), 1.0)
    add(p, KEYS, rounds=2, now=1.0)
    misplaced_by_the_first = len(service.misplaced)
    p.set_shard_map(service.shards)  # the refresh the answer asked for
    again = calls(p, now=1.1)
    parts = [part for call in again for part in call.parts]
    assert max(len({entry.partition_key for entry in part.entries}) for part in parts) > 10
    for part in parts:
        assert owner(service.shards, part) == {part.lane}
    for call in again:
        p.complete(call, service.answer(call), 1.1)
    assert len(service.misplaced) == misplaced_by_the_first


def test_records_in_a_gap_of_the_shard_map_never_share_an_aggregate_with_another_key() -> None:
    """A listing taken mid-reshard can miss a child: no shard is predicted for its keys, so
    an aggregate of them could land anywhere; each key goes on its own instead."""
    settled: list[Entry] = []
    p = pipeline(settled)
    p.set_shard_map(ShardMap([HashRange("c0", 0, MAX_HASH_KEY // 3)]))
    add(p, KEYS, rounds=2)
    service = Service(children(MAX_HASH_KEY // 3 + 1))
    for call in calls(p):
        for part in call.parts:
            assert len({entry.hash_key for entry in part.entries}) == 1 or part.lane == "c0"
        p.complete(call, service.answer(call), 1.0)
    assert service.misplaced == []


@settings(max_examples=60, deadline=None)
@given(
    split_at=st.one_of(st.just(MIDDLE), st.integers(1, MAX_HASH_KEY)),
    in_flight=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_for_any_split_point_only_aggregates_in_flight_at_the_split_can_misplace_a_key(
    split_at: int, in_flight: int, seed: int
) -> None:
    """Whatever the split point and however many calls are out when it happens: a record
    built after the first answer from a child lands on its key's shard; the records that did
    not are all in aggregates built before it, the pipeline counts exactly them, and at the
    midpoint there are none."""
    rng = random.Random(seed)
    keys = [f"k{rng.getrandbits(32)}" for _ in range(rng.randint(2, 120))]
    settled: list[Entry] = []
    p = pipeline(settled, max_call_records=rng.randint(1, 8))
    add(p, keys, rounds=3)
    before = calls(p, most=in_flight)
    service = Service(children(split_at))
    for call in before:
        p.complete(call, service.answer(call), 1.0)
    misplaced_before = len(service.misplaced)
    add(p, keys, rounds=2, now=1.0)
    for _ in range(3):  # stale: answers from the children, no listing yet
        for call in calls(p, now=1.1):
            p.complete(call, service.answer(call), 1.1)
    p.set_shard_map(service.shards)
    while p.pending_records:
        for call in calls(p, now=1.2):
            p.complete(call, service.answer(call), 1.2)
    assert len(settled) == 5 * len(keys)
    assert len(service.misplaced) == misplaced_before
    assert p.misplaced_records == misplaced_before
    if split_at == MIDDLE:
        assert misplaced_before == 0
