"""Which shards one Spark task reads (``_grouping``): no Spark, no server."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_bridge._grouping import MAX_AUTO_TASKS, group, shards_per_task


def test_a_small_micro_batch_keeps_a_task_per_shard() -> None:
    assert shards_per_task(1, None) == 1
    assert shards_per_task(MAX_AUTO_TASKS, None) == 1


def test_past_the_task_bound_shards_share_tasks_at_least_two_a_task() -> None:
    assert shards_per_task(MAX_AUTO_TASKS + 1, None) == 2
    assert shards_per_task(1000, None) == 32
    assert len(group(list(range(1000)), shards_per_task(1000, None))) == MAX_AUTO_TASKS


def test_the_option_wins_over_the_automatic_grouping() -> None:
    assert shards_per_task(1000, 5) == 5
    assert shards_per_task(3, 5) == 5
    assert len(group(list(range(1000)), 5)) == 200


def test_nothing_moved_means_no_task() -> None:
    assert group([], shards_per_task(0, None)) == []


@given(st.integers(0, 3000), st.one_of(st.none(), st.integers(1, 600)))
def test_every_shard_is_in_exactly_one_task_in_order_and_tasks_are_even(
    moved: int, option: int | None
) -> None:
    items = list(range(moved))
    per_task = shards_per_task(moved, option)
    tasks = group(items, per_task)
    assert [item for task in tasks for item in task] == items
    assert all(0 < len(task) <= per_task for task in tasks)
    if tasks:
        assert max(map(len, tasks)) - min(map(len, tasks)) <= 1
        assert len(tasks) == -(-moved // per_task)
    if option is None:
        assert len(tasks) <= MAX_AUTO_TASKS
    # A replay of the same micro-batch regroups exactly: the grouping is a pure function.
    assert group(items, shards_per_task(moved, option)) == tasks
