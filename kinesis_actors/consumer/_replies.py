"""The consumer's own checks of the replies it believes, sans-IO.

The client validates every 2xx reply for the fields the library uses and raises
:class:`~kinesis_actors.errors.MalformedReplyError` (retried like a 5xx) for one it cannot
believe. The consumer checks again here, for two reasons: a shard must end only on proof, so
"no ``NextShardIterator``" counts only in a reply that is otherwise whole (``Records`` and
``MillisBehindLatest`` present), and nothing here may ever read a field with ``[]`` that a
garbled reply could lack (a bare ``KeyError`` crashed readers and discovery).

Every function raises ``MalformedReplyError`` naming the operation; the callers treat it like
any other service failure (retried, paced, bounded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import MalformedReplyError

__all__ = [
    "BadRecord",
    "GetRecordsReply",
    "get_records_reply",
    "malformed",
    "shard_iterator",
    "subscribe_event",
]


BadRecord = tuple[int, str | None, str]
"""(index in the reply, sequence number or None, what is wrong): the client's shape."""


def malformed(operation: str, what: str, reply: Any) -> MalformedReplyError:
    return MalformedReplyError(
        f"a success reply that cannot be believed: {what} (got {reply!r:.200})",
        code="MalformedReply",
        operation=operation,
    )


@dataclass(frozen=True, slots=True)
class GetRecordsReply:
    """A GetRecords reply whose envelope is whole (its records are checked separately)."""

    records: Sequence[Mapping[str, Any]]
    next_iterator: str | None
    millis_behind_latest: int
    child_shards: tuple[str, ...]

    @property
    def finished(self) -> bool:
        """The shard's end, proved: a whole reply with no next iterator."""
        return self.next_iterator is None


def get_records_reply(reply: Any) -> GetRecordsReply:
    """Check GetRecords' envelope: ``Records`` (a list) and ``MillisBehindLatest`` (an int)
    must be there; ``NextShardIterator`` absent or null is the end, any other non-string is
    malformed; ``ChildShards`` entries must name their shard."""
    operation = "GetRecords"
    if not isinstance(reply, Mapping):
        raise malformed(operation, "not a JSON object", reply)
    records = reply.get("Records")
    if not isinstance(records, list):
        raise malformed(operation, "no 'Records' list", reply)
    millis = reply.get("MillisBehindLatest")
    if isinstance(millis, bool) or not isinstance(millis, int):
        raise malformed(operation, "no 'MillisBehindLatest'", reply)
    following = reply.get("NextShardIterator")
    if following is not None and (not isinstance(following, str) or not following):
        raise malformed(operation, "a 'NextShardIterator' that is not a string", reply)
    return GetRecordsReply(records, following, millis, child_shard_ids(operation, reply))


def child_shard_ids(operation: str, reply: Mapping[str, Any]) -> tuple[str, ...]:
    """The ids in a reply's (or an event's) ``ChildShards``, checked."""
    children = reply.get("ChildShards") or ()
    if not isinstance(children, list | tuple):
        raise malformed(operation, "'ChildShards' is not a list", reply)
    ids: list[str] = []
    for child in children:
        shard_id = child.get("ShardId") if isinstance(child, Mapping) else None
        if not isinstance(shard_id, str) or not shard_id:
            raise malformed(operation, "a child shard without a 'ShardId'", reply)
        ids.append(shard_id)
    return tuple(ids)


def shard_iterator(reply: Any) -> str:
    """GetShardIterator's ``ShardIterator``, which must be a non-empty string."""
    iterator = reply.get("ShardIterator") if isinstance(reply, Mapping) else None
    if not isinstance(iterator, str) or not iterator:
        raise malformed("GetShardIterator", "no 'ShardIterator'", reply)
    return iterator


def subscribe_event(event: Any) -> Mapping[str, Any]:
    """A SubscribeToShard event the reader can believe: ``Records`` a list,
    ``MillisBehindLatest`` an int, ``ContinuationSequenceNumber`` absent, null or a string
    (so that a missing continuation means the end, not a garbled event)."""
    if not isinstance(event, Mapping):
        raise MalformedReplyError(
            f"an event that is not an object: {event!r:.200}", operation="SubscribeToShard"
        )
    records, millis = event.get("Records"), event.get("MillisBehindLatest")
    continuation = event.get("ContinuationSequenceNumber")
    if (
        not isinstance(records, list)
        or isinstance(millis, bool)
        or not isinstance(millis, int)
        or (continuation is not None and not isinstance(continuation, str))
    ):
        raise MalformedReplyError(
            f"an event without Records or MillisBehindLatest: {event!r:.200}",
            operation="SubscribeToShard",
        )
    return event
