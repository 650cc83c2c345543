"""Shards as the consumer sees them: lineage, assignment to workers, the parent gate.

Sans-IO. :class:`ShardGraph` holds the latest ListShards answer per stream and answers two
questions: which shards belong to this worker, and which of them may be read now. *Who owns
a shard* is a seam, an :class:`Assignment`: :class:`StaticAssignment` (below) without a lease
table, the held leases with one (``_group``), where the lease coordinator hands a shard over
only once its parents' leases reached SHARD_END, so the gate is the table's, across workers.

**Static assignment.** A shard belongs to worker ``md5("{stream}/{shard_id}") mod worker_count``.
It depends on nothing but the shard's own name, so every worker computes the same answer at
any time, across restarts and resharding, with no coordination: no shard is read by two
workers and none by no worker.

**The parent gate.** A child is read only once each of its parents is
*released*: read to its end and, for this worker, handed on (see ``_pipeline``). A parent no
longer listed has expired and counts as released. A parent that belongs to *another* worker
cannot be observed from here; it counts as released as soon as the child exists (the parent
is then closed). That is the trade-off of assignment without coordination: per-key order
across a split or merge holds when parent and child land on the same worker (always, with
one worker), and otherwise only as far as the other worker keeps pace.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ._positions import ShardKey

__all__ = ["Assignment", "ShardGraph", "ShardInfo", "StaticAssignment", "owner"]


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One shard from ListShards: its parents (none, one after a split, two after a merge)."""

    stream: str
    shard_id: str
    parents: tuple[str, ...] = ()
    closed: bool = False

    @property
    def key(self) -> ShardKey:
        return (self.stream, self.shard_id)

    @classmethod
    def from_listing(cls, stream: str, shard: Mapping[str, Any]) -> ShardInfo:
        """Build from one entry of ListShards' ``Shards``."""
        parents = tuple(
            parent
            for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId"))
            if parent
        )
        closed = "EndingSequenceNumber" in shard.get("SequenceNumberRange", {})
        return cls(stream, shard["ShardId"], parents, closed)


def owner(stream: str, shard_id: str, worker_count: int) -> int:
    """The worker index that reads this shard (stable: a hash of the names only)."""
    digest = hashlib.md5(f"{stream}/{shard_id}".encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big") % worker_count


class Assignment(Protocol):
    """Who reads which shard: this worker reads the shards it ``owns``.

    ``gates_parents`` says whether the graph must hold a child back until this worker has
    released its parents (static assignment), or whoever hands shards over has already
    checked that the parents finished (leases).
    """

    @property
    def gates_parents(self) -> bool: ...

    def owns(self, key: ShardKey) -> bool: ...


class StaticAssignment:
    """Worker ``index`` of ``count`` owns the shards :func:`owner` maps to it (no table)."""

    gates_parents = True

    def __init__(self, index: int = 0, count: int = 1) -> None:
        if not 0 <= index < count:
            raise ValueError(f"worker_index {index} not in [0, {count})")
        self.index = index
        self.count = count

    def owns(self, key: ShardKey) -> bool:
        return self.count == 1 or owner(key[0], key[1], self.count) == self.index


class ShardGraph:
    """The known shards of every stream, and the gate between parents and children."""

    def __init__(
        self, worker_index: int = 0, worker_count: int = 1, *, assignment: Assignment | None = None
    ) -> None:
        self.assignment: Assignment = (
            StaticAssignment(worker_index, worker_count) if assignment is None else assignment
        )
        self._streams: dict[str, dict[str, ShardInfo]] = {}

    def update(self, stream: str, shards: Iterable[ShardInfo]) -> None:
        """Replace what is known of ``stream`` with a fresh, complete listing."""
        self._streams[stream] = {shard.shard_id: shard for shard in shards}

    def listed(self, key: ShardKey) -> bool:
        return key[1] in self._streams.get(key[0], {})

    def get(self, key: ShardKey) -> ShardInfo | None:
        return self._streams.get(key[0], {}).get(key[1])

    def assigned(self, key: ShardKey) -> bool:
        return self.assignment.owns(key)

    def keys(self) -> set[ShardKey]:
        """Every listed shard of every stream, whoever reads it."""
        return {
            (stream, shard_id) for stream, listing in self._streams.items() for shard_id in listing
        }

    def shards(self) -> list[ShardInfo]:
        """Every listed shard of this worker, stream by stream in listing order."""
        return [
            shard
            for listing in self._streams.values()
            for shard in listing.values()
            if self.assigned(shard.key)
        ]

    def has_parents(self, shard: ShardInfo) -> bool:
        """Whether any parent is still listed (a child, not a root, as far as we can see)."""
        return any(self.listed((shard.stream, parent)) for parent in shard.parents)

    def ready(self, shard: ShardInfo, released: Callable[[ShardKey], bool]) -> bool:
        """Whether ``shard`` may be read now: every parent is released (see module doc)."""
        if not self.assignment.gates_parents:
            return True  # handed over by the lease coordinator: the parents finished
        for parent in shard.parents:
            key = (shard.stream, parent)
            if not self.listed(key) or not self.assigned(key):
                continue  # expired, or another worker's: see the trade-off above
            if not released(key):
                return False
        return True
