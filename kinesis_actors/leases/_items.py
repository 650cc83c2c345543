"""The KCL's lease item, sans-IO: :class:`Lease` and its DynamoDB encoding.

One item per shard, in the attribute names and types the KCL's ``DynamoDBLeaseSerializer``
and ``DynamoDBMultiStreamLeaseSerializer`` use, so that a table moves between a KCL
application and this library with its checkpoints:

=====================================  ====  ===============================================
attribute                              type  meaning
=====================================  ====  ===============================================
``leaseKey``                           S     hash key: the shard id (single-stream), or
                                             ``account:stream:creationEpoch:shardId``
``leaseOwner``                         S     the worker holding it; absent when free
``leaseCounter``                       N     bumped by every write of the holder (renewal,
                                             checkpoint) and by every take: others watch it
``checkpoint``                         S     a sequence number, or ``TRIM_HORIZON``,
                                             ``LATEST``, ``AT_TIMESTAMP``, ``SHARD_END``
``checkpointSubSequenceNumber``        N     records of a KPL aggregate already processed
``pendingCheckpoint`` (+ ``...SubSequenceNumber``)  the KCL's two-phase checkpoint: read, kept
``ownerSwitchesSinceCheckpoint``       N     takes by another worker since the last checkpoint
``parentShardId``                      SS    the shard's parents (one after a split, two after
                                             a merge); absent for a root shard
``childShardIds``                      SS    written when the shard is finished
``startingHashKey`` / ``endingHashKey`` S    the shard's hash key range
``streamName`` / ``shardId``           S     multi-stream leases only: the stream identifier
                                             ``account:stream:creationEpoch`` and the shard
``streamArn``, ``streamCreationEpoch``  S, N  ours, ignored by the KCL: which stream (and
                                             which incarnation of it) a single-stream lease
                                             is for (see :class:`Lease`)
``latestPinnedAt``                     N     ours, ignored by the KCL: for a ``LATEST``
                                             lease, when its first reader started (epoch
                                             millis on the service's clock, minus a margin)
``checkpointOwner``                    S     the KCL 3.x's graceful handoff: the worker that
                                             still reads the lease and must checkpoint and
                                             hand it to ``leaseOwner``; absent otherwise
=====================================  ====  ===============================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AT_TIMESTAMP",
    "LATEST",
    "SHARD_END",
    "SPECIAL_CHECKPOINTS",
    "TRIM_HORIZON",
    "Lease",
    "decode_lease",
    "encode_lease",
    "lease_key",
    "stream_identifier",
]

TRIM_HORIZON = "TRIM_HORIZON"
"""Checkpoint of a shard not yet read that starts at its oldest retained record."""
LATEST = "LATEST"
"""Checkpoint of a shard not yet read that starts at its tip."""
AT_TIMESTAMP = "AT_TIMESTAMP"
"""Checkpoint of a shard not yet read that starts at the consumer's configured timestamp
(the KCL stores no timestamp in the item either: it comes from the application's config)."""
SHARD_END = "SHARD_END"
"""Checkpoint of a shard read to its end: its children may be read."""

SPECIAL_CHECKPOINTS = frozenset({TRIM_HORIZON, LATEST, AT_TIMESTAMP, SHARD_END})

# Attribute names, exactly the KCL's.
KEY = "leaseKey"
OWNER = "leaseOwner"
COUNTER = "leaseCounter"
CHECKPOINT = "checkpoint"
SUB_SEQUENCE = "checkpointSubSequenceNumber"
PENDING = "pendingCheckpoint"
PENDING_SUB_SEQUENCE = "pendingCheckpointSubSequenceNumber"
OWNER_SWITCHES = "ownerSwitchesSinceCheckpoint"
PARENTS = "parentShardId"
CHILDREN = "childShardIds"
STARTING_HASH_KEY = "startingHashKey"
ENDING_HASH_KEY = "endingHashKey"
STREAM_ID = "streamName"  # the KCL keeps the multi-stream identifier under this old name
SHARD_ID = "shardId"
# Ours; the KCL ignores attributes it does not know and keeps them through its updates.
STREAM_ARN = "streamArn"
STREAM_CREATED = "streamCreationEpoch"
LATEST_PINNED = "latestPinnedAt"
# The KCL 3.x's graceful handoff (DynamoDBLeaseSerializer's CHECKPOINT_OWNER).
CHECKPOINT_OWNER = "checkpointOwner"
# The KCL 3.5's row kind: "LEASE" (or absent) for a lease; its other rows share the table.
ENTITY_TYPE = "entityType"


def stream_identifier(account: str, stream: str, creation_epoch: int) -> str:
    """The KCL's multi-stream identifier: ``account:stream:creationEpoch`` (epoch seconds)."""
    return f"{account}:{stream}:{creation_epoch}"


def lease_key(shard_id: str, identifier: str | None = None) -> str:
    """The ``leaseKey`` of a shard: the shard id alone for a single-stream application (the
    KCL's default), ``identifier:shardId`` for a multi-stream one."""
    return shard_id if identifier is None else f"{identifier}:{shard_id}"


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease item as read from (or to be written to) the table.

    ``stream_identifier`` is set for multi-stream leases only (``account:stream:epoch``);
    single-stream leases are keyed by the shard id and say nothing of their stream in the
    KCL's format, so this library writes the stream's ARN and creation time next to them
    (``stream_arn``, ``stream_created``, epoch seconds): a lease for a shard of another
    stream, or of a deleted stream created again under the same name (same ARN), which would
    otherwise be resumed as ours because shard ids repeat from stream to stream, is then
    detected. KCL-written leases have neither.

    ``latest_pinned_at`` (epoch milliseconds) is written by the first worker that reads a
    ``LATEST`` lease, before it reads: a later owner of the lease, still never checkpointed,
    reads from that time instead of the tip, so records that arrived in between are not
    skipped. The checkpoint stays ``LATEST`` (a KCL application reads the item as before).

    ``checkpoint_owner`` is set while the lease is being handed over (the KCL 3.x's
    ``checkpointOwner``): that worker still reads it, and will checkpoint and hand it to
    ``owner``, the worker that asked for it.
    """

    key: str
    shard_id: str
    counter: int = 0
    owner: str | None = None
    checkpoint: str = TRIM_HORIZON
    sub_sequence: int = 0
    pending_checkpoint: str | None = None
    pending_sub_sequence: int = 0
    owner_switches_since_checkpoint: int = 0
    parent_shard_ids: tuple[str, ...] = ()
    child_shard_ids: tuple[str, ...] = ()
    starting_hash_key: str | None = None
    ending_hash_key: str | None = None
    stream_identifier: str | None = None
    stream_arn: str | None = None
    stream_created: int | None = None
    latest_pinned_at: int | None = None
    checkpoint_owner: str | None = None

    @property
    def finished(self) -> bool:
        """Read to the shard's end (checkpoint ``SHARD_END``)."""
        return self.checkpoint == SHARD_END

    @property
    def stream_name(self) -> str | None:
        """The stream's name, from the multi-stream identifier or the ARN (None if neither)."""
        if self.stream_identifier is not None:
            parts = self.stream_identifier.split(":")
            return parts[1] if len(parts) == 3 else None
        if self.stream_arn is not None and "/" in self.stream_arn:
            return self.stream_arn.rsplit("/", 1)[1]
        return None


def _bad(name: str, kind: str, value: Any) -> ValueError:
    return ValueError(f"attribute {name!r} is not {kind}: {value!r}")


def _string(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name)
    if value is None:
        return None
    if not isinstance(value, Mapping) or not isinstance(value.get("S"), str):
        raise _bad(name, "a string", value)
    return str(value["S"])


def _number(item: Mapping[str, Any], name: str) -> int | None:
    value = item.get(name)
    if value is None:
        return None
    raw = value.get("N") if isinstance(value, Mapping) else None
    try:
        return int(str(raw))
    except ValueError:
        raise _bad(name, "an integer", value) from None


def _strings(item: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = item.get(name)
    if value is None:
        return ()
    raw = value.get("SS") if isinstance(value, Mapping) else None
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise _bad(name, "a string set", value)
    return tuple(sorted(raw))


def decode_lease(item: Mapping[str, Any]) -> Lease:
    """A :class:`Lease` from an item in the low-level shapes (``{"leaseKey": {"S": ...}}``).

    Absent numbers read as 0 and an absent checkpoint as ``TRIM_HORIZON``, as the KCL reads
    them. ``ValueError`` names the attribute of the wrong type.
    """
    key = _string(item, KEY)
    if not key:
        raise ValueError(f"an item without a {KEY!r}: {dict(item)!r}")
    identifier = _string(item, STREAM_ID)
    shard_id = _string(item, SHARD_ID) if identifier is not None else None
    pending = _string(item, PENDING) or None
    return Lease(
        key=key,
        shard_id=shard_id or key,
        counter=_number(item, COUNTER) or 0,
        owner=_string(item, OWNER),
        checkpoint=_string(item, CHECKPOINT) or TRIM_HORIZON,
        sub_sequence=_number(item, SUB_SEQUENCE) or 0,
        pending_checkpoint=pending,
        pending_sub_sequence=(_number(item, PENDING_SUB_SEQUENCE) or 0) if pending else 0,
        owner_switches_since_checkpoint=_number(item, OWNER_SWITCHES) or 0,
        parent_shard_ids=_strings(item, PARENTS),
        child_shard_ids=_strings(item, CHILDREN),
        starting_hash_key=_string(item, STARTING_HASH_KEY),
        ending_hash_key=_string(item, ENDING_HASH_KEY),
        stream_identifier=identifier,
        stream_arn=_string(item, STREAM_ARN),
        stream_created=_number(item, STREAM_CREATED),
        latest_pinned_at=_number(item, LATEST_PINNED),
        checkpoint_owner=_string(item, CHECKPOINT_OWNER),
    )


def encode_lease(lease: Lease) -> dict[str, Any]:
    """The item of ``lease``, attribute for attribute what the KCL writes (empty sets and
    absent values are left out: DynamoDB refuses an empty set)."""
    item: dict[str, Any] = {
        KEY: {"S": lease.key},
        COUNTER: {"N": str(lease.counter)},
        OWNER_SWITCHES: {"N": str(lease.owner_switches_since_checkpoint)},
        CHECKPOINT: {"S": lease.checkpoint},
        SUB_SEQUENCE: {"N": str(lease.sub_sequence)},
    }
    if lease.owner is not None:
        item[OWNER] = {"S": lease.owner}
    if lease.parent_shard_ids:
        item[PARENTS] = {"SS": sorted(lease.parent_shard_ids)}
    if lease.child_shard_ids:
        item[CHILDREN] = {"SS": sorted(lease.child_shard_ids)}
    if lease.pending_checkpoint:
        item[PENDING] = {"S": lease.pending_checkpoint}
        item[PENDING_SUB_SEQUENCE] = {"N": str(lease.pending_sub_sequence)}
    if lease.starting_hash_key is not None and lease.ending_hash_key is not None:
        item[STARTING_HASH_KEY] = {"S": lease.starting_hash_key}
        item[ENDING_HASH_KEY] = {"S": lease.ending_hash_key}
    if lease.stream_identifier is not None:
        item[STREAM_ID] = {"S": lease.stream_identifier}
        item[SHARD_ID] = {"S": lease.shard_id}
    if lease.stream_arn is not None:
        item[STREAM_ARN] = {"S": lease.stream_arn}
    if lease.stream_created is not None:
        item[STREAM_CREATED] = {"N": str(lease.stream_created)}
    if lease.latest_pinned_at is not None:
        item[LATEST_PINNED] = {"N": str(lease.latest_pinned_at)}
    if lease.checkpoint_owner is not None:
        item[CHECKPOINT_OWNER] = {"S": lease.checkpoint_owner}
    return item
