"""The streams one coordinator reads: their identity, their lease keys, and whose a lease is.

A single-stream KCL lease says nothing of its stream, and shard ids repeat from stream to
stream, so the leases this library creates carry the stream's ARN and creation time, and a
lease of another stream (or of a deleted stream created again under the same name) is a
:class:`LeaseTableError` before anything is written. Multi-stream leases name their stream
by the KCL's identifier ``account:stream:creationEpoch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..client import StreamRef, stream_params
from ._errors import LeaseLostError, LeaseTableError
from ._items import Lease, lease_key, stream_identifier
from ._sync import Shard, parse_shards
from ._table import Caller

__all__ = ["LeasedStream", "Streams", "describe_stream", "list_stream_shards"]


@dataclass(frozen=True, slots=True)
class LeasedStream:
    """One stream: its name, ARN, creation time (epoch seconds) and KCL identifier, and how
    the user named it (``given``: the name, or the ARN of another account's stream, which
    its calls send as ``StreamARN``). Its lease keys are the same whichever form was given."""

    name: str
    arn: str
    created: int
    identifier: str
    given: str


async def describe_stream(kinesis: Caller, given: str) -> LeasedStream:
    """The stream's identity, from DescribeStreamSummary (``given``: its name or ARN)."""
    name = StreamRef.parse(given, option="streams").name
    reply = await kinesis.call("DescribeStreamSummary", stream_params(given))
    summary = reply["StreamDescriptionSummary"]
    arn = str(summary["StreamARN"])
    created = int(summary["StreamCreationTimestamp"].timestamp())
    account = arn.split(":")[4] if arn.count(":") >= 5 else ""
    return LeasedStream(name, arn, created, stream_identifier(account, name, created), given)


async def list_stream_shards(kinesis: Caller, given: str) -> list[Shard]:
    """Every shard ListShards lists for the stream (its name or ARN), every page followed."""
    shards: list[Shard] = []
    params: dict[str, Any] = stream_params(given)
    while True:
        reply = await kinesis.call("ListShards", params)
        shards.extend(parse_shards(reply.get("Shards") or []))
        token = reply.get("NextToken")
        if not token:
            return shards
        params = {"NextToken": token}


class Streams:
    """Lease keys and lease ownership for a set of streams (sans-IO)."""

    def __init__(self, refs: Sequence[LeasedStream], *, multi: bool, table: str) -> None:
        self.multi = multi
        self.table = table
        self.by_name = {ref.name: ref for ref in refs}
        self._by_identifier = {ref.identifier: ref for ref in refs}

    def key(self, stream: str, shard_id: str) -> str:
        """The lease key of a shard of one of our streams."""
        ref = self.by_name.get(stream)
        if ref is None:
            raise LeaseLostError(f"{stream!r} is not read here", stream=stream, shard_id=shard_id)
        return lease_key(shard_id, ref.identifier if self.multi else None)

    def new_lease(self, ref: LeasedStream, shard: Shard, checkpoint: str) -> Lease:
        """A lease for a shard that has none, in this table's form."""
        identifier = ref.identifier if self.multi else None
        return Lease(
            key=lease_key(shard.shard_id, identifier),
            shard_id=shard.shard_id,
            checkpoint=checkpoint,
            parent_shard_ids=shard.parents,
            starting_hash_key=shard.starting_hash_key,
            ending_hash_key=shard.ending_hash_key,
            stream_identifier=identifier,
            stream_arn=None if self.multi else ref.arn,
            stream_created=None if self.multi else ref.created,
        )

    def owner_of(self, lease: Lease) -> LeasedStream | None:
        """The stream of ``lease`` if it is one of ours, None for a stream of another
        application in a multi-stream table; :class:`LeaseTableError` for a lease that must
        not be touched."""
        table = self.table
        if not self.multi:
            (ref,) = self.by_name.values()
            if lease.stream_identifier is not None:
                raise LeaseTableError(
                    f"table {table!r} holds multi-stream leases ({lease.key!r}); this worker "
                    f"reads one stream, {ref.name!r}, with single-stream keys: use another "
                    "table, or multi_stream=True",
                    table=table,
                )
            foreign = lease.stream_arn is not None and lease.stream_arn != ref.arn
            if foreign or (
                lease.stream_created is not None and lease.stream_created != ref.created
            ):
                raise LeaseTableError(
                    f"lease {lease.key!r} in table {table!r} is for a shard of stream "
                    f"{lease.stream_arn} created at epoch {lease.stream_created}, this worker "
                    f"reads {ref.arn} created at epoch {ref.created}; a single-stream lease "
                    "table serves one stream: use another table (nothing was written)",
                    table=table,
                )
            return ref
        if lease.stream_identifier is None:
            raise LeaseTableError(
                f"table {table!r} holds single-stream leases ({lease.key!r}); this worker "
                f"reads {', '.join(self.by_name)} with multi-stream keys: use another table",
                table=table,
            )
        theirs = self._by_identifier.get(lease.stream_identifier)
        if theirs is None and lease.stream_name in self.by_name:
            ours = self.by_name[str(lease.stream_name)]
            raise LeaseTableError(
                f"lease {lease.key!r} in table {table!r} is for an earlier stream named "
                f"{ours.name!r} ({lease.stream_identifier}); the stream now is "
                f"{ours.identifier}: delete those leases or use another table",
                table=table,
            )
        return theirs

    def parents_of(self, lease: Lease) -> list[str]:
        """The lease keys of ``lease``'s parents (same stream, same key form)."""
        identifier = lease.stream_identifier if self.multi else None
        return [lease_key(parent, identifier) for parent in lease.parent_shard_ids]
