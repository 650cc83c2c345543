"""Which lane a hash key waits in: the shard map's halves, the lanes, and the pinned keys.

A :class:`LaneMap` is the geometry the :class:`~._waiting.WaitingRoom` places domains by: the
map's shards cut at their midpoints into ordered halves (one bisect finds a hash key's half),
a :class:`~._domains.Lane` per half met so far, the shards found gone since the map was set
(their lanes are stale), and the keys pinned to another hash key after an aggregate landed on
a child that may not own them (``_waiting``'s header says why). It knows nothing of domains
or records: the waiting room asks it for lanes and pins and moves its domains itself. Kept
apart because it changes only when the map does or a reshard shows, while the waiting room
changes with every record. Sans-IO.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping

from ..records import ShardMap
from ._domains import DomainKey, Lane

__all__ = ["MAX_PINS", "UNPREDICTED_LANE", "WHOLE_STREAM_LANE", "LaneKey", "LaneMap"]

LaneKey = str | tuple[str, bool]
"""A lane's key: a predicted shard's id with ``True`` for the upper half of its hash range,
``False`` for the lower; or one of the two lanes without a prediction, by name."""

WHOLE_STREAM_LANE = "*"
"""The one lane of a stream with ``AUTO`` record distribution: shards cannot be predicted."""

UNPREDICTED_LANE = "?"
"""The lane of records whose hash key no known open shard covers (a reshard is under way)."""

MAX_PINS = 65_536
"""The most keys pinned at once (see :meth:`LaneMap.pin`); past it a key is not pinned
and its misplaced records are all that is left of its order (counted by the pipeline)."""


class LaneMap:
    """The lanes of one shard map (or of none: one lane for the whole stream), the stale
    shards and the pinned keys. Every field here, and a lane's ``stale``, is written by this
    class alone."""

    def __init__(self) -> None:
        self._map: ShardMap | None = None
        self._lanes: dict[LaneKey, Lane] = {}
        # Shards an acknowledgement from another shard showed gone (split or merged) since the
        # map was set: their lanes are stale. Bounded by the map.
        self._stale_shards: set[str] = set()
        # The map's shards in halves, ordered: where each half starts and ends, and its lane's
        # key (set by reset).
        self._half_starts: list[int] = []
        self._half_ends: list[int] = []
        self._half_keys: list[tuple[str, bool]] = []
        # Pinned keys: (the hash key they follow, their own), kept when their domain is
        # pruned, until a map lifts them. Bounded by MAX_PINS.
        self._pins: dict[DomainKey, tuple[int, int]] = {}
        self.needs_refresh = False

    @property
    def shard_map(self) -> ShardMap | None:
        """The map lanes are predicted with; ``None`` means one lane for the whole stream."""
        return self._map

    @property
    def pins(self) -> Mapping[DomainKey, tuple[int, int]]:
        """The pinned keys: (the hash key each follows, its own). A read-only view, the same
        object for the lane map's life (a reader may keep it)."""
        return self._pins

    def lanes(self) -> Iterable[Lane]:
        """Every lane met since the map was set."""
        return self._lanes.values()

    def get(self, key: LaneKey) -> Lane | None:
        """The lane of ``key``, if it was met since the map was set."""
        return self._lanes.get(key)

    def reset(
        self, shard_map: ShardMap | None
    ) -> tuple[dict[LaneKey, Lane], list[tuple[DomainKey, int]]]:
        """Predict with ``shard_map`` from now on, with no lane met yet and no shard stale:
        the lanes of the old map, and the keys whose pins the new map lifted, each with its
        own hash key (which it goes back to)."""
        self._map = shard_map
        self.needs_refresh = False
        self._stale_shards.clear()
        halves = []
        for found in shard_map or ():
            start, end = found.starting_hash_key, found.ending_hash_key
            middle = (start + end + 1) // 2  # where the upper half starts
            if middle > start:  # a shard of one hash key has no lower half
                halves.append((start, middle - 1, (found.shard_id, False)))
            halves.append((middle, end, (found.shard_id, True)))
        self._half_starts = [start for start, _, _ in halves]
        self._half_ends = [end for _, end, _ in halves]
        self._half_keys = [key for _, _, key in halves]
        lifted = self._lift_pins() if self._pins else []
        old, self._lanes = self._lanes, {}
        return old, lifted

    def clear(self) -> None:
        """Forget every lane (their domains are gone); the map and the pins stay."""
        self._lanes.clear()

    def shard_of(self, hash_key: int) -> str | None:
        """The map's shard that owns ``hash_key``, if one does."""
        index = bisect_right(self._half_starts, hash_key) - 1
        if index >= 0 and hash_key <= self._half_ends[index]:
            return self._half_keys[index][0]
        return None

    def lane(self, hash_key: int) -> Lane:
        """The lane of ``hash_key``: its shard's half, or a lane without a prediction (and
        then the map needs a refresh)."""
        key: LaneKey
        if self._map is None:
            key = shard_id = WHOLE_STREAM_LANE
        else:
            index = bisect_right(self._half_starts, hash_key) - 1
            if index >= 0 and hash_key <= self._half_ends[index]:
                key = self._half_keys[index]
                shard_id = key[0]
            else:
                key = shard_id = UNPREDICTED_LANE
                self.needs_refresh = True
        lane = self._lanes.get(key)
        if lane is None:
            stale = shard_id == UNPREDICTED_LANE or shard_id in self._stale_shards
            lane = self._lanes[key] = Lane(shard_id, stale=stale)
        return lane

    def mark_stale(self, shard_id: str) -> None:
        """``shard_id`` is gone: until the next map its lanes are stale, and the map needs a
        refresh."""
        self.needs_refresh = True
        self._stale_shards.add(shard_id)
        for lane in self._lanes.values():
            if lane.shard_id == shard_id:
                lane.stale = True

    def pin(self, key: DomainKey, hash_key: int, own: int) -> bool:
        """Pin ``key`` (whose own hash key is ``own``) to ``hash_key``; False if refused,
        past :data:`MAX_PINS` keys. A key pinned again keeps its own hash key."""
        pins = self._pins
        pinned = pins.get(key)
        if pinned is None and len(pins) >= MAX_PINS:
            return False
        pins[key] = (hash_key, own if pinned is None else pinned[1])
        return True

    def _lift_pins(self) -> list[tuple[DomainKey, int]]:
        """Pins whose hash key and the key's own are owned by one shard of the new map: a
        merge brought them together again (or the key was never off its shard), so the key
        can go back to its own hash key without leaving the shard its records are on."""
        shard_of = self.shard_of
        lifted = [
            key
            for key, (point, own) in self._pins.items()
            if (shard := shard_of(point)) is not None and shard == shard_of(own)
        ]
        return [(key, self._pins.pop(key)[1]) for key in lifted]
