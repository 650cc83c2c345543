"""Partition keys, hash keys and the shard map: which shard a record lands on.

Kinesis routes a record by a 128-bit hash key: the explicit hash key if the producer gave one,
otherwise the MD5 of the partition key's UTF-8 bytes read as a big-endian integer. Each open
shard owns an inclusive range of hash keys. A producer that predicts the shard (to aggregate per
shard, as the KPL does) needs the same arithmetic and a fast range lookup; both live here.
"""

from __future__ import annotations

import functools
import hashlib
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

try:
    # CPython's own MD5 for the short inputs hashed here (partition keys): it skips the
    # OpenSSL context copy behind every digest() of hashlib's, 255 ns a key against 510
    # (measured on this machine; a new key per record, such as UUIDs, hashes every record).
    # Called without keywords: ``usedforsecurity=False`` (which it ignores) cost 160 ns more
    # a call, the keyword path of its argument parsing. A Python built without it falls back
    # to hashlib's, which gives the same digests and needs the keyword under FIPS.
    from _md5 import md5 as _short_md5  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - CPython builds it unless told not to
    _short_md5 = functools.partial(hashlib.md5, usedforsecurity=False)

__all__ = [
    "MAX_HASH_KEY",
    "PARTITION_KEY_MAX_CHARS",
    "HashRange",
    "ShardMap",
    "effective_hash_key",
    "hash_key",
    "parse_explicit_hash_key",
    "validate_partition_key",
]

MAX_HASH_KEY = 2**128 - 1
"""The largest hash key: the hash key space is [0, 2**128 - 1]."""

PARTITION_KEY_MAX_CHARS = 256
"""Kinesis accepts partition keys of 1 to 256 characters, counted in UTF-16 code units (as
Java counts them): a character outside the Basic Multilingual Plane, an emoji, counts twice."""

# The service's own pattern for ExplicitHashKey: ASCII digits, no sign, no leading zeros.
# Written out rather than \d, which would also accept non-ASCII digits that int() parses.
_EXPLICIT_HASH_KEY = re.compile(r"0|[1-9][0-9]{0,38}", re.ASCII)


def validate_partition_key(partition_key: str) -> str:
    """Return ``partition_key`` unchanged if Kinesis would accept it, else raise ``ValueError``.

    The limit is counted as the service counts it, in UTF-16 code units, not bytes nor code
    points: 256 characters of accented or CJK text are fine although they encode to more than
    256 UTF-8 bytes, but 129 emoji (258 code units) are not; the service rejects them, and a
    record that passed here would fail the whole producer at the server.
    A string with a lone surrogate cannot be encoded as UTF-8 at all, so it is rejected too.
    """
    length = len(partition_key)
    if not partition_key.isascii():
        try:
            partition_key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                "partition key is not encodable as UTF-8 (it contains a lone surrogate)"
            ) from exc
        length = len(partition_key.encode("utf-16-le")) // 2
    if not 1 <= length <= PARTITION_KEY_MAX_CHARS:
        raise ValueError(
            f"partition key must be 1 to {PARTITION_KEY_MAX_CHARS} characters (UTF-16 code "
            f"units, as the service counts them; an emoji counts 2), got {length}"
        )
    return partition_key


def hash_key(partition_key: str) -> int:
    """The hash key Kinesis derives from a partition key: MD5 of its UTF-8 bytes, big-endian."""
    return int.from_bytes(_short_md5(partition_key.encode()).digest(), "big")


def parse_explicit_hash_key(explicit_hash_key: str) -> int:
    """Parse an explicit hash key as the service would, or raise ``ValueError``.

    Accepted: a decimal string of ASCII digits with no sign, spaces or leading zeros (the
    service's ``0|([1-9]\\d{0,38})`` pattern) whose value is at most ``2**128 - 1``.
    """
    if _EXPLICIT_HASH_KEY.fullmatch(explicit_hash_key) is None:
        raise ValueError(
            "explicit hash key must be a decimal integer string of ASCII digits without sign "
            f"or leading zeros, got {explicit_hash_key!r}"
        )
    value = int(explicit_hash_key)
    if value > MAX_HASH_KEY:
        raise ValueError(
            f"explicit hash key must be in [0, 2**128 - 1], got {explicit_hash_key} "
            "(2**128 or more)"
        )
    return value


def effective_hash_key(partition_key: str, explicit_hash_key: str | None = None) -> int:
    """The hash key that decides the shard: the explicit one if given, else the key's MD5."""
    if explicit_hash_key is not None:
        return parse_explicit_hash_key(explicit_hash_key)
    return hash_key(partition_key)


@dataclass(frozen=True, slots=True)
class HashRange:
    """One shard's inclusive range of hash keys, ``starting_hash_key <= h <= ending_hash_key``."""

    shard_id: str
    starting_hash_key: int
    ending_hash_key: int

    def __post_init__(self) -> None:
        if not 0 <= self.starting_hash_key <= self.ending_hash_key <= MAX_HASH_KEY:
            raise ValueError(
                f"shard {self.shard_id}: hash key range [{self.starting_hash_key}, "
                f"{self.ending_hash_key}] must satisfy 0 <= start <= end <= 2**128 - 1"
            )

    def __contains__(self, hash_key: object) -> bool:
        return isinstance(hash_key, int) and (
            self.starting_hash_key <= hash_key <= self.ending_hash_key
        )


class ShardMap:
    """Sans-IO lookup from hash key to shard over a set of non-overlapping ranges.

    Built from the open shards of a stream (any order: pages of ``ListShards`` may arrive in any
    order and the map comes out the same). Lookups are O(log n) with ``bisect``.

    Gaps are allowed, because a listing taken in the middle of a reshard can miss a child shard;
    a hash key that falls in a gap maps to ``None`` and the caller decides (typically: refresh
    the map, and meanwhile send without a shard prediction). Overlaps are rejected: they mean
    the listing mixed a closed parent with its children, and no answer would be right.
    """

    __slots__ = ("_ends", "_ranges", "_starts")

    def __init__(self, ranges: Iterable[HashRange]) -> None:
        ordered = sorted(ranges, key=lambda r: r.starting_hash_key)
        for previous, current in pairwise(ordered):
            if current.starting_hash_key <= previous.ending_hash_key:
                raise ValueError(
                    f"shards {previous.shard_id} and {current.shard_id} have overlapping hash "
                    "key ranges; pass only open shards (a closed parent overlaps its children)"
                )
        self._ranges: tuple[HashRange, ...] = tuple(ordered)
        self._starts: list[int] = [r.starting_hash_key for r in ordered]
        self._ends: list[int] = [r.ending_hash_key for r in ordered]

    @classmethod
    def from_shards(
        cls, shards: Iterable[Mapping[str, Any]], *, include_closed: bool = False
    ) -> ShardMap:
        """Build from ``Shard`` dicts as ``ListShards`` returns them (botocore's shapes).

        Closed shards (those whose ``SequenceNumberRange`` has an ``EndingSequenceNumber``) are
        left out unless ``include_closed``: they no longer accept writes, and their ranges
        overlap their children's.
        """
        ranges = []
        for shard in shards:
            if not include_closed and "EndingSequenceNumber" in shard.get(
                "SequenceNumberRange", {}
            ):
                continue
            key_range = shard["HashKeyRange"]
            ranges.append(
                HashRange(
                    shard["ShardId"],
                    int(key_range["StartingHashKey"]),
                    int(key_range["EndingHashKey"]),
                )
            )
        return cls(ranges)

    @property
    def ranges(self) -> tuple[HashRange, ...]:
        """The ranges, ordered by starting hash key."""
        return self._ranges

    def __len__(self) -> int:
        return len(self._ranges)

    def __iter__(self) -> Iterator[HashRange]:
        return iter(self._ranges)

    def lookup(self, hash_key: int) -> HashRange | None:
        """The range containing ``hash_key``, or ``None`` if it falls in a gap."""
        if not 0 <= hash_key <= MAX_HASH_KEY:
            raise ValueError(f"hash key must be in [0, 2**128 - 1], got {hash_key}")
        index = bisect_right(self._starts, hash_key) - 1
        if index >= 0 and hash_key <= self._ends[index]:
            return self._ranges[index]
        return None

    def shard_for_hash_key(self, hash_key: int) -> str | None:
        """The id of the shard owning ``hash_key``, or ``None`` if it falls in a gap."""
        found = self.lookup(hash_key)
        return None if found is None else found.shard_id

    def shard_for(self, partition_key: str, explicit_hash_key: str | None = None) -> str | None:
        """The id of the shard a record with these keys lands on, or ``None`` (gap)."""
        return self.shard_for_hash_key(effective_hash_key(partition_key, explicit_hash_key))

    def gaps(self) -> list[tuple[int, int]]:
        """Inclusive hash key ranges no shard covers; empty when the map is complete."""
        missing: list[tuple[int, int]] = []
        expected = 0
        for start, end in zip(self._starts, self._ends, strict=True):
            if start > expected:
                missing.append((expected, start - 1))
            expected = end + 1
        if expected <= MAX_HASH_KEY:
            missing.append((expected, MAX_HASH_KEY))
        return missing

    def __repr__(self) -> str:
        return f"ShardMap({len(self._ranges)} shards, {len(self.gaps())} gaps)"
