"""The source's offsets: where each shard's micro-batch starts and ends. Sans-IO.

An offset says, per shard, how far the stream has been planned. Every form is a *cut* that
names a record the driver saw, so it means the same thing forever (within retention):

* ``{"before": "X", "ms": t}``: every record before Kinesis record ``X`` (``t`` is ``X``'s
  arrival time, epoch ms, which the planner uses to size the next window);
* ``{"after": "L", "ms": t}``: every record up to and including Kinesis record ``L`` (all
  of its aggregated user records);
* ``{"sequence_number": "S", "sub_sequence_number": n}``: every user record up to ``(S, n)``,
  a cut inside a KPL aggregate (the read limits cut there; it is also the whole format of
  offsets written before version 2, so old checkpoints resume);
* ``{"finished": true}``: a closed shard, read to its end;
* ``{"start": {...}}``: nothing read yet; where reading begins.

The three record forms are one :class:`Bound` ``(sequence, sub)``: a user record belongs
before the cut when ``(its sequence, its sub-sequence) <= (sequence, sub)``, with
``sub = -1`` for "before" and a sub larger than any aggregate for "after".

Version 2 documents also carry each stream's identity (ARN and creation time, from
DescribeStreamSummary), so an offset of a stream that was deleted and created again under
the same name is refused rather than read as if nothing happened. Version 1
documents (checkpoints of the previous source, ``readPath=driver``, since removed: the
consumer's positions) have no identity and still load, so such a checkpoint resumes here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kinesis_actors import StartingPosition
from kinesis_actors.errors import ConfigError, PositionsMismatchError

__all__ = [
    "AFTER",
    "BEFORE",
    "OFFSET_VERSION",
    "Bound",
    "Offset",
    "ShardEntry",
    "StreamIdentity",
    "canonical",
    "changed_shards",
    "check_identity",
    "parse_offset",
]

OFFSET_VERSION = 2
BEFORE = -1
"""The ``sub`` of a cut just before a Kinesis record: none of its user records is in."""
AFTER = 1 << 40
"""The ``sub`` of a cut just after a Kinesis record: all of its user records are in
(an aggregate holds at most a few thousand)."""


def canonical(offset: Any) -> str:
    """One spelling per offset, to compare what Spark hands back with what we returned."""
    return json.dumps(offset, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True, order=True)
class Bound:
    """A cut inside a shard: user records ``(sequence, sub) <= (self.sequence, self.sub)``
    are before it."""

    sequence: int
    sub: int

    def includes(self, sequence: int, sub: int) -> bool:
        return (sequence, sub) <= (self.sequence, self.sub)

    def iterator_params(self) -> dict[str, Any]:
        """GetShardIterator parameters that start reading just past this cut.

        A cut after a whole record starts AFTER it; the others start AT their record and
        drop the user records already before the cut (see :meth:`includes`).
        """
        if self.sub >= AFTER:
            return {
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": str(self.sequence),
            }
        return {
            "ShardIteratorType": "AT_SEQUENCE_NUMBER",
            "StartingSequenceNumber": str(self.sequence),
        }


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """One shard's place in an offset: exactly one of ``bound``, ``start`` or ``finished``."""

    bound: Bound | None = None
    start: StartingPosition | None = None
    finished: bool = False
    arrival_ms: int | None = None
    """Arrival time of the record the cut sits at, when known (sizes the next window)."""

    def iterator_params(self) -> dict[str, Any]:
        if self.bound is not None:
            return self.bound.iterator_params()
        start = self.start if self.start is not None else StartingPosition.trim_horizon()
        return start.iterator_params()

    def to_json(self) -> dict[str, Any]:
        if self.finished:
            return {"finished": True}
        bound = self.bound
        if bound is None:
            start = self.start if self.start is not None else StartingPosition.trim_horizon()
            return {"start": start.to_dict()}
        out: dict[str, Any]
        if bound.sub == BEFORE:
            out = {"before": str(bound.sequence)}
        elif bound.sub >= AFTER:
            out = {"after": str(bound.sequence)}
        else:
            return {"sequence_number": str(bound.sequence), "sub_sequence_number": bound.sub}
        if self.arrival_ms is not None:
            out["ms"] = self.arrival_ms
        return out

    def describe(self) -> str:
        return canonical(self.to_json())


@dataclass(frozen=True, slots=True)
class StreamIdentity:
    """Which incarnation of a stream name: its ARN and creation time (epoch ms)."""

    arn: str
    created_ms: int


@dataclass(slots=True)
class Offset:
    """A parsed offset: per stream its identity (None in version 1) and shard entries."""

    shards: dict[tuple[str, str], ShardEntry] = field(default_factory=dict)
    identities: dict[str, StreamIdentity] = field(default_factory=dict)
    version: int = OFFSET_VERSION

    def to_json(self, streams: tuple[str, ...]) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for stream in streams:
            shards = {
                shard_id: entry.to_json()
                for (name, shard_id), entry in sorted(self.shards.items())
                if name == stream
            }
            body: dict[str, Any] = {"shards": shards}
            identity = self.identities.get(stream)
            if identity is not None:
                body["arn"] = identity.arn
                body["created_ms"] = identity.created_ms
            document[stream] = body
        return {"version": OFFSET_VERSION, "streams": document}


def _fail(message: str) -> ConfigError:
    return ConfigError(
        f"the kinesis source cannot use this checkpoint's offset: {message}. Start the query "
        "with a new checkpointLocation (and initialPosition) to read the stream afresh"
    )


def _digits(value: Any, where: str) -> int:
    if not isinstance(value, str) or not value.isdigit() or len(value) > 129:
        raise _fail(
            f"{where}: a sequence number must be a string of at most 129 digits, got {value!r}"
        )
    return int(value)


def _ms(entry: Mapping[str, Any], where: str) -> int | None:
    value = entry.get("ms")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"{where}: ms must be an integer, got {value!r}")
    return value


def _entry(entry: Any, where: str) -> ShardEntry:
    if not isinstance(entry, Mapping):
        raise _fail(f"{where} must be an object, got {entry!r}")
    if entry.get("finished") is True:
        return ShardEntry(finished=True)
    if "before" in entry:
        sequence = _digits(entry["before"], where)
        return ShardEntry(bound=Bound(sequence, BEFORE), arrival_ms=_ms(entry, where))
    if "after" in entry:
        sequence = _digits(entry["after"], where)
        return ShardEntry(bound=Bound(sequence, AFTER), arrival_ms=_ms(entry, where))
    if "sequence_number" in entry:
        sequence = _digits(entry["sequence_number"], where)
        sub = entry.get("sub_sequence_number", 0)
        if isinstance(sub, bool) or not isinstance(sub, int) or not 0 <= sub < AFTER:
            raise _fail(f"{where}: sub_sequence_number must be an integer >= 0, got {sub!r}")
        return ShardEntry(bound=Bound(sequence, sub))
    if "start" in entry:
        try:
            start = StartingPosition.from_dict(entry["start"], option=where)
        except ConfigError as exc:
            raise _fail(f"{where}: {exc.message}") from None
        return ShardEntry(start=start)
    raise _fail(f"{where} is not a shard position: {entry!r}")


def parse_offset(document: Any, streams: tuple[str, ...]) -> Offset:
    """Parse an offset of version 2, or of version 1 (written by the removed driver read path).

    Raises :class:`ConfigError` (naming what is wrong and what to do) for any other shape, or
    for an offset of other streams than the query reads.
    """
    if not isinstance(document, Mapping):
        raise _fail(f"expected an object, got {type(document).__name__}")
    version = document.get("version")
    if version not in (1, OFFSET_VERSION):
        raise _fail(f"unsupported version {version!r} (this source writes {OFFSET_VERSION})")
    body = document.get("streams")
    if not isinstance(body, Mapping):
        raise _fail("'streams' must be an object")
    unknown = sorted(set(body) - set(streams))
    if unknown:
        raise _fail(
            f"it names streams the query does not read: {unknown} (reading {list(streams)})"
        )
    offset = Offset(version=int(version))
    for stream, value in body.items():
        if not isinstance(value, Mapping):
            raise _fail(f"streams[{stream!r}] must be an object")
        shards: Any = value
        if version != 1:
            shards = value.get("shards")
            if not isinstance(shards, Mapping):
                raise _fail(f"streams[{stream!r}].shards must be an object")
            arn, created = value.get("arn"), value.get("created_ms")
            if arn is not None or created is not None:
                if (
                    not isinstance(arn, str)
                    or isinstance(created, bool)
                    or not isinstance(created, int)
                ):
                    raise _fail(f"streams[{stream!r}]: arn and created_ms are malformed")
                offset.identities[stream] = StreamIdentity(arn, created)
        for shard_id, entry in shards.items():
            if not isinstance(shard_id, str) or not shard_id:
                raise _fail(f"bad shard id {shard_id!r} in {stream!r}")
            offset.shards[(stream, shard_id)] = _entry(entry, f"{stream}/{shard_id}")
    return offset


def check_identity(stream: str, saved: StreamIdentity | None, now: StreamIdentity) -> None:
    """Refuse an offset written for another incarnation of ``stream`` (a stream deleted and
    created again under its name: names alone cannot tell them apart)."""
    if saved is None or saved == now:
        return
    raise PositionsMismatchError(
        f"the checkpoint's offset was written for stream {stream!r} {saved.arn} created at "
        f"{saved.created_ms} (epoch ms), but the stream now is {now.arn} created at "
        f"{now.created_ms}: it was deleted and created again. Its sequence numbers mean nothing "
        "in the new stream; start the query with a new checkpointLocation to read it afresh"
    )


def changed_shards(
    start: Offset, end: Offset
) -> list[tuple[tuple[str, str], ShardEntry | None, ShardEntry]]:
    """The shards whose entry moved between ``start`` and ``end``, in a stable order."""
    out = []
    for key, after in sorted(end.shards.items()):
        before = start.shards.get(key)
        if before is None or before.to_json() != after.to_json():
            out.append((key, before, after))
    return out
