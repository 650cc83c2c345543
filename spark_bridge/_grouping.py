"""Which shards of a micro-batch one Spark task reads. Sans-IO.

Every Spark task has a fixed cost whatever it reads: scheduling, serialising the task, a
Python worker's round trip (measured: 60-100 ms of Python worker CPU per task of a 3-row
shard, besides the client). One task per shard made a 1,024-shard micro-batch 1,024 tasks
(170 s under ``Trigger.AvailableNow`` on 2 cores); a task now reads a group of shards,
concurrently on one event loop (``_range.read_ranges``).

The grouping is a pure function of the micro-batch's moved shards (from its start and end
offsets) and the options: a replayed micro-batch, a retried or speculative task regroup
exactly as the first run did. Only shards that moved get a task: idle shards cost none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["MAX_AUTO_TASKS", "group", "shards_per_task"]

T = TypeVar("T")

MAX_AUTO_TASKS = 32
"""Tasks per micro-batch at most when ``shardsPerTask`` is not set. Up to 32 moved shards
keep a task each (a small stream reads as before, one shard a task); past that, shards share
tasks, at least 2 a task. 32 tasks keep the fixed per-task cost about a second of CPU per
micro-batch while still filling 32 cores; on a bigger cluster ``shardsPerTask`` spreads wider
(docs/spark.md has the measurements)."""


def shards_per_task(moved: int, option: int | None) -> int:
    """Shards per task for a micro-batch of ``moved`` shards: ``shardsPerTask`` if given,
    else as few per task as keep the tasks within :data:`MAX_AUTO_TASKS`."""
    if option is not None:
        return option
    return max(1, -(-moved // MAX_AUTO_TASKS))


def group(items: Sequence[T], per_task: int) -> list[list[T]]:
    """``items`` (in their given, stable order) cut into the fewest runs of at most
    ``per_task``, sized as evenly as possible (the first ones get the extra)."""
    if not items:
        return []
    count = -(-len(items) // per_task)
    base, extra = divmod(len(items), count)
    out: list[list[T]] = []
    index = 0
    for part in range(count):
        size = base + (1 if part < extra else 0)
        out.append(list(items[index : index + size]))
        index += size
    return out
