"""Shard sync, sans-IO: which leases to create for the shards ListShards lists.

Every worker runs it; creation is a conditional put (``attribute_not_exists(leaseKey)``), so
workers that sync at once create each lease once and the others' puts fail harmlessly.

The rules, after the KCL's ``HierarchicalShardSyncer``, shards taken parents first:

* a shard that has a lease is left alone (its checkpoint is the truth);
* a shard with a parent that had a lease starts at ``TRIM_HORIZON``: it is a child the
  stream made while the application ran, and all of it follows what its parents held; a
  shard whose parent gets its lease in the same pass starts where that parent does
  (``AT_TIMESTAMP`` stays ``AT_TIMESTAMP``: a child's oldest records may predate the
  timestamp too);
* otherwise the shard starts at the consumer's initial position. With ``LATEST`` a closed
  shard is skipped (there is nothing after its tip) and its open descendants start at
  ``LATEST``; with ``TRIM_HORIZON`` and ``AT_TIMESTAMP`` every shard, closed ones included,
  gets a lease, and the parent gate orders them.

Finished leases are never deleted here, so a closed shard that was read is never created
again while ListShards still lists it.

**A finished lease of an open shard is not believed.** ``SHARD_END`` is written by the reader
that reached the end of a closed shard; a shard never opens again. A lease that said
``SHARD_END`` before a listing that still shows its shard open was written by someone else (an
operator's hand edit, another application): believing it, nobody would ever read the rest of
the shard. Its real checkpoint is gone, and reading the shard again from its oldest record
could mean days of duplicates, so the group stops with a :class:`LeaseTableError` naming the
shard and what to write instead (:func:`ended_but_open`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._items import AT_TIMESTAMP, LATEST, TRIM_HORIZON, Lease

__all__ = ["INITIAL_POSITIONS", "Shard", "ended_but_open", "parse_shards", "plan_new_leases"]

INITIAL_POSITIONS = (TRIM_HORIZON, LATEST, AT_TIMESTAMP)


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard from ListShards, with what a lease records of it."""

    shard_id: str
    parents: tuple[str, ...] = ()
    closed: bool = False
    starting_hash_key: str | None = None
    ending_hash_key: str | None = None


def parse_shards(shards: Sequence[Mapping[str, Any]]) -> list[Shard]:
    """:class:`Shard` of each entry of ListShards' ``Shards``."""
    parsed = []
    for shard in shards:
        parents = tuple(
            parent
            for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId"))
            if parent
        )
        hash_range = shard.get("HashKeyRange") or {}
        closed = "EndingSequenceNumber" in (shard.get("SequenceNumberRange") or {})
        parsed.append(
            Shard(
                str(shard["ShardId"]),
                parents,
                closed,
                hash_range.get("StartingHashKey"),
                hash_range.get("EndingHashKey"),
            )
        )
    return parsed


def _parents_first(shards: Sequence[Shard]) -> list[Shard]:
    by_id = {shard.shard_id: shard for shard in shards}
    ordered: list[Shard] = []
    placed: set[str] = set()

    def place(shard: Shard, path: frozenset[str]) -> None:
        if shard.shard_id in placed or shard.shard_id in path:
            return
        for parent in shard.parents:
            if parent in by_id:
                place(by_id[parent], path | {shard.shard_id})
        placed.add(shard.shard_id)
        ordered.append(shard)

    for shard in shards:
        place(shard, frozenset())
    return ordered


def plan_new_leases(
    shards: Sequence[Shard],
    existing: Collection[str],
    *,
    initial_position: str,
    make_lease: Callable[[Shard, str], Lease],
) -> list[Lease]:
    """The leases to create, parents before children.

    ``existing`` are the shard ids of the stream that have a lease; ``make_lease(shard,
    checkpoint)`` builds the stream's lease for a shard (its key form, its stream's ARN).
    """
    if initial_position not in INITIAL_POSITIONS:
        raise ValueError(f"initial_position must be one of {INITIAL_POSITIONS}")
    known = set(existing)
    starts: dict[str, str] = {}  # checkpoints created in this pass
    created: list[Lease] = []
    for shard in _parents_first(shards):
        if shard.shard_id in known or shard.shard_id in starts:
            continue
        if any(parent in known for parent in shard.parents):
            checkpoint = TRIM_HORIZON
        elif any(parent in starts for parent in shard.parents):
            # Its parents start at the initial position too: at a timestamp, so does it
            # (its oldest records may predate the timestamp as well).
            inherited = {starts[parent] for parent in shard.parents if parent in starts}
            checkpoint = AT_TIMESTAMP if AT_TIMESTAMP in inherited else TRIM_HORIZON
        elif initial_position == LATEST and shard.closed:
            continue
        else:
            checkpoint = initial_position
        created.append(make_lease(shard, checkpoint))
        starts[shard.shard_id] = checkpoint
    return created


def ended_but_open(finished_before: Collection[str], shards: Sequence[Shard]) -> list[str]:
    """The shards whose lease was ``SHARD_END`` before ``shards`` were listed (the ids in
    ``finished_before``) although the listing shows them open: not believable (see the
    module's doc). Taken in that order, a shard closed by a split while the listing ran
    cannot be mistaken for one: its lease ends only after it closed."""
    return sorted(
        shard.shard_id for shard in shards if shard.shard_id in finished_before and not shard.closed
    )
