"""Which idle shards the planner probes (``_idle``): no clock, no server."""

from __future__ import annotations

from collections import Counter

from spark_bridge._idle import IdleProbes


def keys(count: int) -> list[tuple[str, str]]:
    return [("s", f"shard-{index:04d}") for index in range(count)]


def test_shards_not_yet_found_idle_are_always_probed() -> None:
    probes = IdleProbes(rate=10, free=2)
    assert probes.skipped(keys(100), now=0.0) == set()


def test_a_few_idle_shards_are_probed_every_trigger() -> None:
    probes = IdleProbes(rate=10, free=4)
    shards = keys(4)
    for key in shards:
        probes.found_idle(key, 0.0)
    for trigger in range(5):
        assert probes.skipped(shards, now=trigger * 0.001) == set()


def test_many_idle_shards_share_the_budget_longest_unprobed_first() -> None:
    probes = IdleProbes(rate=100, free=10)
    shards = keys(1000)
    for key in shards:
        probes.found_idle(key, 0.0)
    probes.skipped(shards, now=0.0)
    counts: Counter[tuple[str, str]] = Counter()
    now = 0.0
    for _ in range(40):  # 20 s of triggers twice a second
        now += 0.5
        skipped = probes.skipped(shards, now)
        probed = [key for key in shards if key not in skipped]
        assert len(probed) <= 50  # 100 a second
        for key in probed:
            counts[key] += 1
            probes.found_idle(key, now)
    assert sum(counts.values()) == 2000
    assert set(counts.values()) == {2}, "every idle shard is probed every 10 s, in turn"


def test_a_busy_shard_is_planned_every_trigger_again() -> None:
    probes = IdleProbes(rate=1, free=1)
    shards = keys(10)
    for key in shards:
        probes.found_idle(key, 0.0)
    probes.found_busy(shards[3])
    skipped = probes.skipped(shards, now=0.5)
    assert shards[3] not in skipped
    assert len(skipped) == 9
