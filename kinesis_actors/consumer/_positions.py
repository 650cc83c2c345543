"""Positions: where each shard stands, as plain data a user can store as JSON and give back.

Sans-IO. A shard's entry is one of

* ``{"sequence_number": "…", "sub_sequence_number": n}``: the last committed user record;
  resuming reads at that sequence number and drops the user records at or before ``n``, so a
  restart in the middle of a KPL aggregate neither repeats nor skips one;
* ``{"finished": true}``: read to its end and everything committed. Saved atomically with
  the other shards' positions, so a restore never re-reads a parent or starts a child early
  across a split;
* ``{"start": {...}}``: nothing committed yet; where reading began (LATEST is recorded as the
  moment its first iterator was taken, so nothing that arrives while stopped is skipped).

The document carries a version and the stream names, and each stream's identity when known
(``_identity``); anything else is a ConfigError. Sequence numbers are checked
against the service's rule (digits, at most 129) here, before any call.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .._validate import check_sequence_number
from ..errors import ConfigError
from ..records import Position
from ._config import StartingPosition
from ._identity import IDENTITY_KEY, StreamIdentity

__all__ = [
    "POSITIONS_VERSION",
    "SavedShard",
    "ShardKey",
    "encode_positions",
    "later",
    "parse_positions",
    "resume_from",
]

POSITIONS_VERSION = 1

ShardKey = tuple[str, str]
"""(stream, shard_id)."""


@dataclass(frozen=True, slots=True)
class SavedShard:
    """One shard's saved state: exactly one of ``committed``, ``start`` or ``finished``."""

    committed: Position | None = None
    start: StartingPosition | None = None
    finished: bool = False

    def to_dict(self) -> dict[str, Any]:
        if self.finished:
            return {"finished": True}
        if self.committed is not None:
            return {
                "sequence_number": self.committed.sequence_number,
                "sub_sequence_number": self.committed.sub_sequence_number,
            }
        start = self.start if self.start is not None else StartingPosition.trim_horizon()
        return {"start": start.to_dict()}


def order(position: Position) -> tuple[int, int]:
    """Positions compare by (sequence number as an integer, sub-sequence number)."""
    return int(position.sequence_number), position.sub_sequence_number


def later(a: Position | None, b: Position) -> Position:
    """The later of two positions (``a`` may be None)."""
    if a is None or order(b) > order(a):
        return b
    return a


def resume_from(saved: SavedShard) -> tuple[StartingPosition, Position | None]:
    """Where to read a shard from, and which user records to drop at that point.

    A committed position resumes AT its sequence number with the user records up to its
    sub-sequence number dropped: an aggregate is one Kinesis record, so AFTER would skip the
    rest of a partly committed aggregate.
    """
    if saved.committed is not None:
        start = StartingPosition.at_sequence_number(saved.committed.sequence_number)
        return start, saved.committed
    return (saved.start or StartingPosition.trim_horizon()), None


def encode_positions(
    entries: Mapping[ShardKey, SavedShard],
    streams: Collection[str],
    identities: Mapping[str, StreamIdentity] | None = None,
) -> dict[str, Any]:
    """The JSON-serializable document :meth:`Consumer.positions` returns."""
    document: dict[str, dict[str, Any]] = {stream: {} for stream in streams}
    for (stream, shard_id), saved in sorted(entries.items()):
        document.setdefault(stream, {})[shard_id] = saved.to_dict()
    out: dict[str, Any] = {"version": POSITIONS_VERSION, "streams": document}
    if identities:
        out[IDENTITY_KEY] = {stream: identities[stream].to_dict() for stream in sorted(identities)}
    return out


_OPTION = "ConsumerConfig.positions"


def _fail(message: str, option: str = _OPTION) -> ConfigError:
    return ConfigError(f"{option}: {message}")


def _parse_entry(stream: str, shard_id: str, entry: Any, option: str = _OPTION) -> SavedShard:
    where = f"{stream}/{shard_id}"
    if not isinstance(entry, Mapping):
        raise _fail(f"{where} must be a dict, got {entry!r}", option)
    if entry.get("finished") is True:
        return SavedShard(finished=True)
    if "sequence_number" in entry:
        sequence = entry["sequence_number"]
        sub = entry.get("sub_sequence_number", 0)
        try:
            check_sequence_number(f"{option} {where}: sequence_number", sequence)
        except ConfigError as exc:
            raise ConfigError(exc.message) from None
        if isinstance(sub, bool) or not isinstance(sub, int) or sub < 0:
            raise _fail(
                f"{where}: sub_sequence_number must be an integer >= 0, got {sub!r}", option
            )
        return SavedShard(committed=Position(sequence, sub))
    if "start" in entry:
        try:
            start = StartingPosition.from_dict(entry["start"], option=f"{option} {where}")
        except ConfigError as exc:
            raise _fail(f"{where}: {exc.message}", option) from None
        return SavedShard(start=start)
    raise _fail(f"{where} has neither a position, a start nor finished=true: {entry!r}", option)


def parse_positions(
    data: Mapping[str, Any], streams: Collection[str], *, option: str = _OPTION
) -> dict[ShardKey, SavedShard]:
    """Validate a positions document for a consumer of ``streams`` and return its entries.

    Raises :class:`ConfigError` for the wrong version or shape, and for a document that names
    a stream this consumer does not read (most likely it belongs to another consumer); its
    message starts with ``option``, the setting the document came from.
    """
    if not isinstance(data, Mapping):
        raise _fail(f"must be what positions() returned, got {type(data).__name__}", option)
    if data.get("version") != POSITIONS_VERSION:
        raise _fail(
            f"unsupported version {data.get('version')!r} (expected {POSITIONS_VERSION})", option
        )
    document = data.get("streams")
    if not isinstance(document, Mapping):
        raise _fail("'streams' must be a dict of stream name to shards", option)
    unknown = sorted(set(document) - set(streams))
    if unknown:
        raise _fail(
            f"names streams this consumer does not read: {unknown} (reading {sorted(streams)})",
            option,
        )
    entries: dict[ShardKey, SavedShard] = {}
    for stream, shards in document.items():
        if not isinstance(shards, Mapping):
            raise _fail(f"streams[{stream!r}] must be a dict of shard id to position", option)
        for shard_id, entry in shards.items():
            if not isinstance(shard_id, str) or not shard_id:
                raise _fail(f"bad shard id {shard_id!r} in {stream!r}", option)
            entries[(stream, shard_id)] = _parse_entry(stream, shard_id, entry, option)
    return entries
