"""The ``startingPositions`` source option: where a new query starts, shard by shard. Sans-IO.

The option is JSON, in one of three forms:

* what :meth:`kinesis_actors.Consumer.positions` returned (``{"version": 1, "streams": …}``),
  so a job moving from the library's consumer starts where it stopped, mid-aggregate
  included;
* ``{"<stream>": {"<shard id>": <entry>}}``, the same without the envelope;
* ``{"<shard id>": <entry>}`` when the query reads one stream.

An entry is the consumer's: ``{"sequence_number": S, "sub_sequence_number": n}`` resumes just
after user record ``(S, n)`` (a KCL table's ``checkpoint`` and
``checkpointSubSequenceNumber``), ``{"start": {"type": "AT_SEQUENCE_NUMBER" |
"AFTER_SEQUENCE_NUMBER", "sequence_number": S}}`` or ``{"start": {"type": "AT_TIMESTAMP",
"timestamp": "2026-11-01T00:00:00+00:00"}}`` (also TRIM_HORIZON and LATEST), or
``{"finished": true}``. Every entry is checked when the options are parsed, before any call.

Shards the map does not name start at ``initialPosition``; a shard descending from a named
one is left to the planner, which reads it after its parents, from its trim horizon; a named
shard's unnamed ancestors count as finished (whoever stopped there had read them).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

from kinesis_actors import StartingPosition
from kinesis_actors.consumer import POSITIONS_VERSION, ShardKey, parse_positions
from kinesis_actors.errors import ConfigError

from ._offsets import Bound, ShardEntry
from ._policy import ShardInfo

__all__ = ["initial_entries", "parse_starting_positions"]

OPTION = "option startingPositions"


def parse_starting_positions(
    raw: str | None, streams: Collection[str]
) -> dict[ShardKey, ShardEntry]:
    """The option's entries by ``(stream, shard id)``; a bad map is a ConfigError naming the
    shard and the problem."""
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{OPTION} is not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{OPTION} must be a JSON object, got {type(data).__name__}")
    if "version" not in data:
        if len(streams) == 1 and not set(data) & set(streams):
            data = {next(iter(streams)): data}  # shard id → entry, for the one stream
        data = {"version": POSITIONS_VERSION, "streams": data}
    saved = parse_positions(data, streams, option=OPTION)
    entries: dict[ShardKey, ShardEntry] = {}
    for key, shard in saved.items():
        if shard.finished:
            entries[key] = ShardEntry(finished=True)
        elif shard.committed is not None:
            position = shard.committed
            bound = Bound(int(position.sequence_number), position.sub_sequence_number)
            entries[key] = ShardEntry(bound=bound)
        else:
            entries[key] = ShardEntry(start=shard.start)
    return entries


def initial_entries(
    named: Mapping[ShardKey, ShardEntry],
    listed: Mapping[ShardKey, ShardInfo],
    default: StartingPosition | None,
) -> dict[ShardKey, ShardEntry]:
    """The initial offset's shards: the named ones, their unnamed ancestors finished, and
    every other listed shard at ``default`` (None: TRIM_HORIZON, left for the first plan to
    find), but for descendants of a named shard, which the planner reads after their
    parents."""
    missing = sorted(set(named) - set(listed))
    if missing:
        stream, shard_id = missing[0]
        raise ConfigError(
            f"{OPTION} names shard {shard_id!r} of stream {stream!r}, which the stream does not "
            f"list (it lists {len([k for k in listed if k[0] == stream])} shards; a shard past "
            "the retention period is no longer listed)"
        )
    children: dict[ShardKey, list[ShardKey]] = {}
    for key, info in listed.items():
        for parent in info.parents:
            children.setdefault((key[0], parent), []).append(key)
    descendants: set[ShardKey] = set()
    pending = list(named)
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in descendants and child not in named:
                descendants.add(child)
                pending.append(child)
    # A named shard's unnamed ancestors were read by whoever wrote the map (a shard is read
    # after its parents): finished, or the planner would read them again before it.
    ancestors: set[ShardKey] = set()
    pending = list(named)
    while pending:
        stream, shard_id = pending.pop()
        shard = listed.get((stream, shard_id))
        for parent in shard.parents if shard is not None else ():
            key = (stream, parent)
            # An unlisted parent has expired: it holds nothing back (``eligible``).
            if key in listed and key not in ancestors and key not in named:
                ancestors.add(key)
                pending.append(key)
    entries = dict(named)
    for key in sorted(ancestors):
        entries[key] = ShardEntry(finished=True)
    if default is not None:
        for key in sorted(listed):
            if key not in entries and key not in descendants:
                entries[key] = ShardEntry(start=default)
    return entries
