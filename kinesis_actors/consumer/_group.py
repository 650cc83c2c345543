"""The consumer's side of a lease table: which shards this worker holds, and their checkpoints.

With ``ConsumerConfig.lease_table`` set, a worker reads exactly the shards whose leases it
holds. The lease coordinator (``kinesis_actors.leases``) takes, renews, steals and releases
leases and says so with events; this module turns them into the consumer's terms:

* :class:`LeaseAssignment` is the :class:`~._shards.Assignment` seam: the shards held now.
  The coordinator hands a child over only once its parents' leases reached SHARD_END, so
  the parent gate is the table's, across workers;
* :func:`saved_from_lease` says where a newly held shard resumes: after its checkpoint
  (sequence and sub-sequence number, so mid-aggregate too, exactly like ``positions``), or
  at the consumer's start for a lease that was never checkpointed;
* :func:`lease_event` is how the consumer logs what it did with a shard's lease.

Sans-IO; ``_membership`` is the I/O around the coordinator.

A worker id defaults to :func:`default_worker_id`: host, process id and a random suffix, so
two processes never share one by accident (the table could not tell them apart).
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

from ..records import Position
from ._config import StartingPosition
from ._positions import SavedShard, ShardKey

__all__ = [
    "SPECIAL_CHECKPOINTS",
    "LeaseAssignment",
    "default_worker_id",
    "lease_event",
    "saved_from_lease",
]

#: The KCL's checkpoints that are not sequence numbers.
SPECIAL_CHECKPOINTS = frozenset({"TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", "SHARD_END"})


def default_worker_id() -> str:
    """``host:pid:random`` (unique per process: a restarted process gets a new id)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class LeaseAssignment:
    """The shards whose leases this worker holds now (owned by the consumer's lease task)."""

    gates_parents = False

    def __init__(self) -> None:
        self._held: set[ShardKey] = set()

    def owns(self, key: ShardKey) -> bool:
        return key in self._held

    def add(self, key: ShardKey) -> None:
        self._held.add(key)

    def discard(self, key: ShardKey) -> None:
        self._held.discard(key)

    def __iter__(self) -> Iterator[ShardKey]:
        return iter(sorted(self._held))

    def __len__(self) -> int:
        return len(self._held)


def saved_from_lease(
    checkpoint: str,
    sub_sequence: int,
    parents: tuple[str, ...],
    latest_pinned_at: int | None = None,
    *,
    now: datetime | None = None,
) -> SavedShard:
    """Where a shard whose lease was just acquired resumes.

    A sequence-number checkpoint resumes exactly after (sequence, sub-sequence): the user
    records of that Kinesis record up to the sub-sequence number are dropped, as with
    ``positions``. ``SHARD_END`` is finished. ``TRIM_HORIZON``, and any start of a child
    shard (its parents finished, so everything in it is new to the application), read from
    the trim horizon. ``LATEST`` of a root shard that an earlier owner started reading
    (``latest_pinned_at``, epoch millis, see ``LeaseAcquired``) reads from that time, so
    that nothing that arrived since is skipped; a pin ahead of ``now`` (another host's clock
    ahead of ours) is taken as ``now``. ``LATEST`` without a pin and ``AT_TIMESTAMP`` of a
    root shard return a :class:`SavedShard` without a start: the consumer's own ``start``
    applies.
    """
    if checkpoint == "SHARD_END":
        return SavedShard(finished=True)
    if checkpoint not in SPECIAL_CHECKPOINTS:
        return SavedShard(committed=Position(checkpoint, sub_sequence))
    if checkpoint == "TRIM_HORIZON" or parents:
        return SavedShard(start=StartingPosition.trim_horizon())
    if checkpoint == "LATEST" and latest_pinned_at is not None:
        pinned = datetime.fromtimestamp(latest_pinned_at / 1000, UTC)
        stamp = min(pinned, now or datetime.now(UTC))
        return SavedShard(start=StartingPosition.at_timestamp(stamp))
    return SavedShard()


def lease_event(event: str, key: ShardKey, **details: object) -> dict[str, object]:
    """The ``extra`` of a log record that says what this worker did with a shard's lease
    (``start``, ``stop``, ``finish``, ``release``): one ``lease_event`` attribute, so a log
    handler can keep a machine-readable history (the acceptance tests do)."""
    return {"lease_event": {"ev": event, "stream": key[0], "shard": key[1], **details}}
