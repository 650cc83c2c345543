"""A shard ends only on proof: what to make of ResourceNotFound while reading.

"ResourceNotFound" on GetRecords, GetShardIterator or SubscribeToShard used to be taken for
"the shard expired" and the shard was marked finished for good. It can also mean a sequence
number of another shard or stream (a positions document mixed up), a re-created stream, or a
transient fault of the server or a proxy. So the reader asks the shard list:

* the shard is not listed: it expired (or the stream lost it): a legitimate end;
* the shard is listed: it is not finished. The read is retried from the same position a
  bounded number of times (``NotFoundPolicy.retries``, paced by the reader's backoff); after
  that, :class:`~kinesis_actors.errors.ShardUnreadableError` names the stream, the shard and
  the position, and the shard's position stays where it was (never ``finished``);
* the stream itself is gone: ShardUnreadableError as well (nothing is marked finished; a
  stream created again under the name is another incarnation, see ``_identity``).

A sequence number of another shard does not always fail: kinesis-mock's SubscribeToShard
starts at the shard's beginning instead. :func:`check_resumed_at` catches that: after a resume
AT a committed sequence number, a record before it is proof the number is not this shard's.

The decision is sans-IO (:class:`NotFoundPolicy`); :func:`shard_listed` is its one call.

The other end that needs proof is a closed shard's under Enhanced Fan-Out on a server that
never ends its subscription (kinesis-mock sends empty events for ever):
:func:`closed_shard_end` proves it with one GetRecords after the last continuation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..client import KinesisClient, StreamRef, is_retryable, stream_params
from ._config import StartingPosition
from ._discovery import list_shards

__all__ = [
    "NotFoundPolicy",
    "check_resumed_at",
    "closed_shard_end",
    "describe_position",
    "judge_not_found",
    "shard_listed",
    "unreadable",
]

log = logging.getLogger("kinesis_actors.consumer")

#: ListShards page size for the check: one page covers every shard of almost every stream.
_PAGE_SIZE = 1000


def describe_position(position: StartingPosition) -> str:
    """``AT_SEQUENCE_NUMBER 4968…`` / ``TRIM_HORIZON``: where a read was to start."""
    if position.sequence_number is not None:
        return f"{position.type} {position.sequence_number}"
    if position.timestamp is not None:
        return f"{position.type} {position.timestamp.isoformat()}"
    return position.type


def unreadable(
    stream: str,
    shard_id: str,
    position: StartingPosition,
    why: str,
    cause: errors.KinesisError | None = None,
) -> errors.ShardUnreadableError:
    """The typed error for an open shard that cannot be read from ``position``."""
    where = describe_position(position)
    hint = ""
    if position.sequence_number is not None:
        hint = (
            f"; the server may not know sequence number {position.sequence_number} in "
            f"{shard_id}: was the positions document written for another stream or shard?"
        )
    return errors.ShardUnreadableError(
        f"{stream}/{shard_id} is open but cannot be read from {where}: {why}{hint}. "
        "Its position is unchanged (not finished).",
        stream=stream,
        shard_id=shard_id,
        position=where,
        code=cause.code if cause is not None else None,
        operation=cause.operation if cause is not None else None,
    )


async def shard_listed(client: KinesisClient, stream: str, shard_id: str) -> bool:
    """Whether ListShards lists the shard (``stream``: its name or ARN). ResourceNotFound (the
    stream is gone) propagates."""
    shards, _ = await list_shards(client, stream, _PAGE_SIZE)
    return any(shard.shard_id == shard_id for shard in shards)


async def judge_not_found(
    client: KinesisClient,
    stream: str,
    shard_id: str,
    position: StartingPosition,
    *,
    policy: NotFoundPolicy,
    exc: errors.ResourceNotFoundError,
) -> bool:
    """What a ResourceNotFound while reading means, for both readers (polling and EFO):
    True if the shard is no longer listed (it expired: a legitimate end); False to retry
    from the same position (the caller paces it); ShardUnreadableError when the stream is
    gone or the listed shard has failed ``policy.retries`` times in a row. A permanent error
    of the check itself (a certificate that fails verification) propagates.
    ``stream`` is the stream's name or ARN (what the reader's calls name); errors name it."""
    ref, stream = stream, StreamRef.parse(stream).name
    try:
        listed = await shard_listed(client, ref, shard_id)
    except errors.ResourceNotFoundError as gone:
        raise unreadable(stream, shard_id, position, "the stream no longer exists", gone) from exc
    except (errors.TransportError, errors.ServiceError) as failed:
        if not is_retryable(failed):
            raise
        listed = True  # unknown: count it as an open shard's failure, retry, bounded
    if not listed:
        log.info("%s/%s is no longer listed: it expired", stream, shard_id)
        return True
    if not policy.open_shard_not_found():
        raise unreadable(stream, shard_id, position, f"{exc} (the shard is listed)", exc) from exc
    return False


async def closed_shard_end(
    client: KinesisClient, stream: str, shard_id: str, continuation: str
) -> tuple[str, ...] | None:
    """Whether a closed shard whose subscription is at its tip has ended: its children if one
    GetRecords after ``continuation`` proves it (no record, no next iterator), else None (not
    known to have ended, or the probe failed: logged, and the caller tries again later).

    Real Kinesis ends a closed shard's subscription with a null continuation and its
    ``ChildShards``; kinesis-mock 0.6.2 never does (it sends empty events for ever), and a
    consumer would then wait for ever on a parent it can never release. ``stream`` is the
    stream's name or ARN (what the reader's calls name)."""
    ref = StreamRef.parse(stream)
    try:
        iterator = await client.call(
            "GetShardIterator",
            {
                **stream_params(stream),
                "ShardId": shard_id,
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": continuation,
            },
        )
        result = await client.call(
            "GetRecords",
            {
                "ShardIterator": iterator["ShardIterator"],
                "Limit": 1,
                **({} if ref.arn is None else {"StreamARN": ref.arn}),
            },
        )
    except errors.KinesisError as exc:
        log.debug("%s/%s: end-of-shard probe failed: %s", ref.name, shard_id, exc)
        return None
    if result.get("Records") or result.get("NextShardIterator"):
        return None
    return tuple(child["ShardId"] for child in result.get("ChildShards") or ())


@dataclass(slots=True)
class NotFoundPolicy:
    """How many ResourceNotFound in a row an open (listed) shard is allowed before it is
    declared unreadable. Sans-IO: the reader reports, the policy counts."""

    retries: int = 3
    _streak: int = field(default=0)

    def open_shard_not_found(self) -> bool:
        """One more ResourceNotFound on a listed shard: True while it may be retried."""
        self._streak += 1
        return self._streak <= self.retries

    def read_succeeded(self) -> None:
        self._streak = 0


def check_resumed_at(
    stream: str,
    shard_id: str,
    position: StartingPosition,
    records: Sequence[Mapping[str, Any]],
) -> bool:
    """After a resume AT sequence number X (a committed position), the first records must
    not come before X: if they do, the server did not start at X, so X is not this shard's
    (kinesis-mock's SubscribeToShard ignores a foreign sequence number and starts at the
    shard's beginning; the skip to X would then drop every record, silently). Raises
    ShardUnreadableError naming the shard and X. Returns True once checked (records seen).
    """
    if position.type != "AT_SEQUENCE_NUMBER" or position.sequence_number is None:
        return True
    if not records:
        return False
    first = records[0]["SequenceNumber"]
    if int(first) < int(position.sequence_number):
        raise unreadable(
            stream,
            shard_id,
            position,
            f"the server answered from sequence number {first}, before it",
        )
    return True
