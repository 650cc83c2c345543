"""The consumer's life in INFO lines of its own: opened, where each shard starts and why,
closed with its counts.

A user who turns on INFO for ``kinesis_actors`` should read what the consumer decided (the
streams and their shards, the mode, a shard resumed from a lease's checkpoint or started at
LATEST), not the transport's lines. Sans-IO: these build the sentences; the consumer logs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._config import StartingPosition
from ._positions import SavedShard

__all__ = ["closed_line", "opened_line", "start_line"]


def opened_line(
    shards: Mapping[str, int], mode: str, *, lease_table: str | None, worker_id: str | None
) -> str:
    """``consumer opened: orders (4 shards), mode polling, ...``: ``shards`` is the number
    of shards listed per stream, open and closed."""
    listed = ", ".join(
        f"{stream} ({count} shard{'s' if count != 1 else ''})" for stream, count in shards.items()
    )
    share = (
        f"shards shared through the lease table {lease_table!r} as worker {worker_id!r}"
        if lease_table is not None
        else "every shard read by this worker"
    )
    return f"consumer opened: {listed}; mode {mode}; {share}"


def _position(start: StartingPosition) -> str:
    if start.type == "AT_TIMESTAMP" and start.timestamp is not None:
        return f"AT_TIMESTAMP {start.timestamp.isoformat()}"
    if start.sequence_number is not None:
        return f"{start.type} {start.sequence_number}"
    return start.type


def start_line(
    key: tuple[str, str],
    saved: SavedShard | None,
    start: StartingPosition,
    *,
    configured: str,
    from_lease: bool,
    known_at_open: bool,
    resumed: bool,
) -> str:
    """Where a shard starts and why: a checkpoint (the positions given, or a lease's), or a
    start position (the configured initial position, or TRIM_HORIZON for a shard that
    appeared since the consumer opened or since the positions were saved). ``configured`` is
    the type of ``ConsumerConfig.start``."""
    where = f"{key[0]}/{key[1]}"
    if saved is not None and saved.committed is not None:
        source = "the lease's checkpoint" if from_lease else "the positions given"
        return (
            f"{where}: starts after sequence number {saved.committed.sequence_number} "
            f"(sub {saved.committed.sub_sequence_number}), from {source}"
        )
    if saved is not None and saved.start is not None:
        source = "the lease" if from_lease else "the positions given"
        return f"{where}: starts at {_position(saved.start)}, from {source}"
    if resumed:
        why = "a shard not in the positions given (new since they were saved)"
    elif not known_at_open:
        why = "a shard that appeared since the consumer opened"
    elif configured == "LATEST" and start.type == "AT_TIMESTAMP":
        why = "the initial position LATEST, pinned to the open for a shard with parents"
    else:
        why = "the initial position"
    return f"{where}: starts at {_position(start)}, {why}"


def closed_line(shards: Iterable[Mapping[str, Any]], *, clean: bool) -> str:
    """``consumer closed: 1,200 records in 14 batches from 4 shards`` (the shards' counters)."""
    counted = list(shards)
    records = sum(int(shard.get("user_records", 0)) for shard in counted)
    batches = sum(int(shard.get("batches", 0)) for shard in counted)
    how = "" if clean else " (on an error)"
    return (
        f"consumer closed{how}: {records:,} records in {batches:,} batches "
        f"from {len(counted)} shard{'s' if len(counted) != 1 else ''}"
    )
