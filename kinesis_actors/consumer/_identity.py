"""Positions know their stream, sans-IO.

A positions document keyed by stream names alone cannot tell a stream from another one of the
same name: one deleted and created again (every dev/test reset, some redeploys) has new shards
whose ids repeat the old ones, so a resume took the old document's ``finished`` shards and
positions for the new stream's and delivered nothing (measured: 0 of 20 new records).

So a document carries each stream's identity, from DescribeStreamSummary at open: its ARN and
its creation time (a re-created stream keeps its ARN, not its creation time)::

    {"version": 1, "streams": {...},
     "identity": {"orders": {"arn": "arn:aws:kinesis:…:stream/orders",
                             "created": "2026-11-25T00:44:42.739000+00:00"}}}

The key is optional and the version stays 1: a document without it (written before) still
loads, unchecked, and an older library reading a new document ignores the key. At open, a
document whose identity is not the stream's raises
:class:`~kinesis_actors.errors.PositionsMismatchError`, which says how to start fresh.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..client import KinesisClient, stream_params
from ..errors import ConfigError, PositionsMismatchError
from ._replies import malformed

__all__ = [
    "IDENTITY_KEY",
    "StreamIdentity",
    "check_identity",
    "open_identities",
    "parse_identities",
    "stream_identity",
]

IDENTITY_KEY = "identity"


@dataclass(frozen=True, slots=True)
class StreamIdentity:
    """Which stream, and which incarnation of it: its ARN and creation time."""

    arn: str
    created: dt.datetime

    def to_dict(self) -> dict[str, str]:
        return {"arn": self.arn, "created": self.created.isoformat()}


def stream_identity(reply: Any) -> StreamIdentity:
    """The identity in a DescribeStreamSummary reply (``MalformedReplyError`` if absent)."""
    operation = "DescribeStreamSummary"
    summary = reply.get("StreamDescriptionSummary") if isinstance(reply, Mapping) else None
    if not isinstance(summary, Mapping):
        raise malformed(operation, "no 'StreamDescriptionSummary'", reply)
    arn, created = summary.get("StreamARN"), summary.get("StreamCreationTimestamp")
    if not isinstance(arn, str) or not arn:
        raise malformed(operation, "no 'StreamARN'", reply)
    if not isinstance(created, dt.datetime):
        raise malformed(operation, "no 'StreamCreationTimestamp'", reply)
    return StreamIdentity(arn, created.astimezone(dt.UTC))


def _fail(message: str) -> ConfigError:
    return ConfigError(f"ConsumerConfig.positions: {message}")


def parse_identities(
    data: Mapping[str, Any], streams: Collection[str]
) -> dict[str, StreamIdentity]:
    """The document's ``identity`` entries (none for a document written before they existed).

    A malformed entry, or one for a stream this consumer does not read, is a ConfigError.
    """
    found = data.get(IDENTITY_KEY)
    if found is None:
        return {}
    if not isinstance(found, Mapping):
        raise _fail(f"'{IDENTITY_KEY}' must be a dict of stream name to identity")
    identities: dict[str, StreamIdentity] = {}
    for stream, entry in found.items():
        if stream not in streams:
            raise _fail(f"'{IDENTITY_KEY}' names a stream this consumer does not read: {stream!r}")
        arn = entry.get("arn") if isinstance(entry, Mapping) else None
        created = entry.get("created") if isinstance(entry, Mapping) else None
        try:
            when = dt.datetime.fromisoformat(created) if isinstance(created, str) else None
        except ValueError:
            when = None
        if not isinstance(arn, str) or not arn or when is None or when.tzinfo is None:
            raise _fail(
                f"{IDENTITY_KEY}[{stream!r}] must be {{'arn': str, 'created': an ISO time with "
                f"its zone}}, got {entry!r:.200}"
            )
        identities[stream] = StreamIdentity(arn, when.astimezone(dt.UTC))
    return identities


def check_identity(stream: str, saved: StreamIdentity | None, actual: StreamIdentity) -> None:
    """Refuse a document written for another stream or another incarnation of ``stream``."""
    if saved is None or saved == actual:
        return
    fresh = (
        "Resuming from it would skip or repeat records. To start fresh, leave "
        "ConsumerConfig.positions out, or remove "
        f"{stream!r} from its 'streams' and '{IDENTITY_KEY}' (the stream is then read from "
        "ConsumerConfig.start)."
    )
    if saved.arn != actual.arn:
        raise PositionsMismatchError(
            f"ConsumerConfig.positions for {stream!r} was written for the stream {saved.arn}, "
            f"but {stream!r} is {actual.arn}. {fresh}"
        )
    raise PositionsMismatchError(
        f"ConsumerConfig.positions for {stream!r} was written for the stream created at "
        f"{saved.created.isoformat()}; the stream of that name now was created at "
        f"{actual.created.isoformat()} (deleted and created again: new shards, new sequence "
        f"numbers). {fresh}"
    )


async def open_identities(
    client: KinesisClient, streams: Mapping[str, str], saved: Mapping[str, StreamIdentity]
) -> dict[str, StreamIdentity]:
    """DescribeStreamSummary for each stream at open: its identity, checked against the
    document's. An unknown stream fails here (ResourceNotFoundError); a document of another
    stream or incarnation raises :class:`PositionsMismatchError` before anything is read.

    ``streams`` maps each stream's name (its key here and in the document) to its name or ARN
    as given (what the call sends). A stream given by ARN has that ARN as its identity, so a
    document written by name resumes by ARN and back, and one of another account's stream of
    the same name is refused."""
    identities: dict[str, StreamIdentity] = {}
    for stream, ref in streams.items():
        reply = await client.call("DescribeStreamSummary", stream_params(ref))
        identities[stream] = stream_identity(reply)
        check_identity(stream, saved.get(stream), identities[stream])
    return identities
