"""The pipeline across a split: no key's records in two children.

Sans-IO, without a loop or a server. A fake service places each Kinesis record as Kinesis
does, by its explicit hash key (an aggregate's is its first record's hash key) or its
partition key's hash, on the shards open *now*, while the pipeline still predicts with the
map it was given. Readers of a split's two children run in parallel, so a key with records
in both is delivered out of order: every test checks which shards each key's records landed
on, and where each user record landed against the shard that owns the hash key it carries
(its explicit hash key inside the aggregate, else its partition key's hash: a key pinned
after a misplacement carries the hash key it follows).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_actors.producer import ShardRateLimiter, _lanes, _waiting
from kinesis_actors.producer._pipeline import Call, Entry, Part, Pipeline
from kinesis_actors.records import (
    MAX_HASH_KEY,
    Aggregator,
    HashRange,
    ShardMap,
    deaggregate,
    hash_key,
)

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
            for record in deaggregate(part.data, part.partition_key, part.explicit_hash_key):
                self.landed[record.partition_key].add(shard)
                carried = record.explicit_hash_key
                placed_by = hash_key(record.partition_key) if carried is None else int(carried)
                if self.shards.shard_for_hash_key(placed_by) != shard:
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


def carried(part: Part | Entry) -> list[int]:
    """The hash key each user record of ``part`` carries (see the module's docstring)."""
    return [
        hash_key(record.partition_key) if record.explicit_hash_key is None
        else int(record.explicit_hash_key)
        for record in deaggregate(part.data, part.partition_key, part.explicit_hash_key)
    ]  # fmt: skip


def owner(shards: ShardMap, part: Part | Entry) -> set[str | None]:
    return {shards.shard_for_hash_key(carried_by) for carried_by in carried(part)}


KEYS = [f"user-{i}" for i in range(300)]


def split_a_third_in(settled: list[Entry]) -> tuple[Pipeline, Service]:
    """Two rounds of every key put, the first sent as the parent splits a third of the way
    into its range (small aggregates straddle the point), every answer in."""
    p = pipeline(settled, aggregation_max_bytes=2_000)
    add(p, KEYS, rounds=2)
    service = Service(children(MAX_HASH_KEY // 3))
    for call in calls(p):
        p.complete(call, service.answer(call), 1.0)
    return p, service


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
    # Points spread over the range (plain integers up to 2**128 shrink to the edges, where
    # almost nothing is in flight across the split).
    split_at=st.one_of(
        st.just(MIDDLE),
        st.integers(1, MAX_HASH_KEY),
        st.integers(1, 9_999).map(lambda share: MAX_HASH_KEY * share // 10_000),
    ),
    in_flight=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    first=st.integers(1, 3),
)
def test_for_any_split_point_no_key_lands_in_both_children(
    split_at: int, in_flight: int, seed: int, first: int
) -> None:
    """Whatever the split point and however many calls are out when it happens: only
    aggregates built before the first answer from a child put records on a shard that does
    not own the hash key they carry, the pipeline counts exactly those, at the midpoint
    there are none, and the keys they misplaced follow them, so no key is in both children.
    With ``first`` at 1 every key's record waits alone (no domain) when it is misplaced."""
    rng = random.Random(seed)
    keys = [f"k{rng.getrandbits(32)}" for _ in range(rng.randint(2, 120))]
    settled: list[Entry] = []
    p = pipeline(settled, max_call_records=rng.randint(1, 8))
    add(p, keys, rounds=first)
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
    assert len(settled) == (first + 2) * len(keys)
    assert len(service.misplaced) == misplaced_before
    assert p.misplaced_records == misplaced_before
    assert service.keys_in_two_children() == []  # the misplaced keys followed their records
    if split_at == MIDDLE:
        assert misplaced_before == 0


def test_keys_an_off_midpoint_split_misplaced_follow_their_records_to_that_child() -> None:
    """A split a third of the way into the range, aggregates in flight across it: the keys
    they put on the wrong child send every later record there too (their Kinesis records
    carry the hash key they landed by), through the stale answers and the listing after,
    so no key has records in both children; the other keys go back to their own."""
    settled: list[Entry] = []
    p, service = split_a_third_in(settled)
    strays = {key for key, _ in service.misplaced}
    assert strays  # the split point fell inside aggregates in flight
    assert p.pinned_keys >= len(strays)
    add(p, KEYS, rounds=2, now=1.0)
    for call in calls(p, now=1.1):  # stale: one key per Kinesis record, no listing yet
        p.complete(call, service.answer(call), 1.1)
    p.set_shard_map(service.shards)
    assert p.pinned_keys == len(strays)  # the others own their records' shard: lifted
    add(p, KEYS, rounds=2, now=1.2)
    while p.pending_records:
        for call in calls(p, now=1.3):
            p.complete(call, service.answer(call), 1.3)
    assert len(settled) == 6 * len(KEYS)
    assert service.keys_in_two_children() == []
    for key in strays:  # every record of a stray key after the split on the one child
        assert len(service.landed[key] - {"p"}) == 1
    assert p.misplaced_records == len(service.misplaced)
    assert p.misplaced_keys == len(strays)
    assert p.pins_refused == 0


def test_a_merge_of_the_children_lifts_the_pins() -> None:
    """Once a listing shows one shard owning both a pinned key's own hash key and the one it
    follows (the children merged back), the key goes back to its own: its records are on
    the merged shard's parents, which readers finish first."""
    settled: list[Entry] = []
    p, service = split_a_third_in(settled)
    p.set_shard_map(service.shards)
    assert p.pinned_keys > 0
    domains = p._room._domains
    pinned = [key for key, domain in domains.items() if domain.pinned]
    assert pinned
    merged = ShardMap([HashRange("m", 0, MAX_HASH_KEY)])
    p.set_shard_map(merged)
    assert p.pinned_keys == 0
    for key in pinned:  # back on its own hash key, in its own half of the merged shard
        domain = domains[key]
        assert isinstance(key, str) and not domain.pinned
        assert (domain.hash_key, domain.explicit_hash_key) == (hash_key(key), None)
        assert domain.lane is p._room._lanes.lane(hash_key(key))
    service.shards = merged
    add(p, KEYS, rounds=1, now=2.0)
    built = calls(p, now=2.1)
    for call in built:
        for part in call.parts:
            assert carried(part) == [hash_key(entry.partition_key) for entry in part.entries]
        p.complete(call, service.answer(call), 2.1)
    assert not p.pending_records


def test_a_pinned_key_keeps_its_pin_when_its_domain_is_pruned_and_made_again() -> None:
    """Pins outlive the idle domains that are pruned (thousands of other keys passing by):
    the key's next record, in a new domain, still follows its misplaced records."""
    settled: list[Entry] = []
    p, service = split_a_third_in(settled)
    p.set_shard_map(service.shards)
    stray = min(key for key, _ in service.misplaced)
    where = service.landed[stray] - {"p"}
    others = [f"passer-{i}" for i in range(10_000)]  # past the idle domains kept (4,096)
    add(p, others, now=2.0)
    while p.pending_records:
        for call in calls(p, now=2.1):
            p.complete(call, service.answer(call), 2.1)
    add(p, [stray], now=3.0)
    [call] = calls(p, now=3.1)
    p.complete(call, service.answer(call), 3.1)
    assert service.landed[stray] - {"p"} == where


def test_a_pinned_key_sent_alone_carries_the_hash_key_it_follows() -> None:
    """A record too big to share an aggregate goes alone, and still under its pin."""
    settled: list[Entry] = []
    p, service = split_a_third_in(settled)
    p.set_shard_map(service.shards)
    while p.pending_records:
        for call in calls(p, now=1.5):
            p.complete(call, service.answer(call), 1.5)
    stray = min(key for key, _ in service.misplaced)
    big = b"x" * 1_500  # over half an aggregate
    p.add(Entry(big, stray, None, hash_key(stray), len(big) + len(stray), 2.0))
    [call] = calls(p, now=2.1)
    [part] = call.parts
    assert part.explicit_hash_key is not None
    assert part.explicit_hash_key != str(hash_key(stray))
    p.complete(call, service.answer(call), 2.1)
    assert service.keys_in_two_children() == []
    assert settled[-1].partition_key == stray


def test_keys_past_the_pin_bound_are_refused_and_counted(monkeypatch: Any) -> None:
    """Pins are bounded: past the bound a misplaced key is not pinned, and counted."""
    monkeypatch.setattr(_lanes, "MAX_PINS", 1)
    settled: list[Entry] = []
    p, _ = split_a_third_in(settled)
    assert p.pinned_keys == 1
    assert p.pins_refused > 0


def test_keys_misplaced_by_an_aggregate_whose_domains_were_made_new_meanwhile_are_pinned() -> None:
    """Without preserve_order a domain whose run went out falls idle at once, and thousands
    of other keys passing by get it pruned and made new for one of them before the answer
    comes. The answer from a child must pin the keys the aggregate misplaced, read from its
    records, not whatever keys those domain objects stand for by then."""
    settled: list[Entry] = []
    p = pipeline(settled, preserve_order=False, aggregation_max_bytes=2_000)
    add(p, KEYS, rounds=2)
    before = calls(p)  # out while the parent splits a third of the way in
    passers = [f"passer-{i}" for i in range(_waiting.IDLE_DOMAINS + 500)]
    add(p, passers, rounds=2, now=0.5)
    calls(p, now=0.6)  # out and idle: the prune takes every idle domain, KEYS' too
    late = [f"late-{i}" for i in range(400)]
    add(p, late, rounds=2, now=0.7)  # domains made new, some of them KEYS' old ones
    service = Service(children(MAX_HASH_KEY // 3))
    for call in before:
        p.complete(call, service.answer(call), 1.0)
    strays = {key for key, _ in service.misplaced}
    assert strays
    assert p._room._lanes.pins.keys() >= strays
    assert not any(key.startswith("late") for key in p._room._lanes.pins)
    add(p, KEYS, rounds=2, now=1.0)
    p.set_shard_map(service.shards)
    while p.pending_records:
        for call in calls(p, now=1.3):
            p.complete(call, service.answer(call), 1.3)
    assert service.keys_in_two_children() == []


def test_a_pinned_records_data_that_looks_like_an_aggregate_is_placed_as_one_record() -> None:
    """A pinned key's record sent alone travels as a part of one, with the user's data as
    it is; if that data is itself a KPL aggregate (records forwarded as they were read),
    an answer from a child must not take it for one of ours: it is settled like any other."""
    settled: list[Entry] = []
    p, service = split_a_third_in(settled)
    while p.pending_records:  # still the parent's map: these answers are mispredicted too
        for call in calls(p, now=1.5):
            p.complete(call, service.answer(call), 1.5)
    stray = min(key for key, _ in service.misplaced)
    forwarded = Aggregator(51_200)
    forwarded.add(b"y" * 800, "a")
    forwarded.add(b"z" * 800, "b")
    data = forwarded.build().data
    entry = Entry(data, stray, None, hash_key(stray), len(data) + len(stray), 2.0)
    p.add(entry)
    [call] = calls(p, now=2.1)
    [part] = call.parts
    assert isinstance(part, Part) and part.explicit_hash_key is not None  # pinned, alone
    p.complete(call, service.answer(call), 2.1)
    assert settled[-1] is entry
    assert p.pending_records == 0
