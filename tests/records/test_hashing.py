"""Partition-key and hash-key rules, and the shard map's range lookup."""

from __future__ import annotations

import hashlib
import itertools
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_actors.records import (
    MAX_HASH_KEY,
    HashRange,
    ShardMap,
    effective_hash_key,
    hash_key,
    parse_explicit_hash_key,
    validate_partition_key,
)

# --- hash_key -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "md5_hex"),
    [
        ("a", "0cc175b9c0f1b6a831c399e269772661"),
        ("abc", "900150983cd24fb0d6963f7d28e17f72"),
        # MD5 of the UTF-8 bytes C3 A9; Latin-1 (E9) would give 3406877694691ddd...
        ("é", "66ddcd97cfdeabb2f6fb8a999b4bc76f"),
        ("😀", "2a02eac39d716a70ecf37579185927b6"),
    ],
)
def test_hash_key_is_md5_of_utf8_read_big_endian(key: str, md5_hex: str) -> None:
    assert hash_key(key) == int(md5_hex, 16)


@given(st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=256))
def test_hash_key_agrees_with_hashlib(key: str) -> None:
    # hash_key uses CPython's own MD5 where there is one: the same digest as hashlib's.
    expected = hashlib.md5(key.encode("utf-8"), usedforsecurity=False).hexdigest()
    assert hash_key(key) == int(expected, 16)


def test_hash_key_range() -> None:
    values = [hash_key(str(i)) for i in range(1000)]
    assert all(0 <= v <= MAX_HASH_KEY for v in values)
    # MD5 spreads keys: some hash keys need the full 128 bits.
    assert max(values).bit_length() == 128


# --- explicit hash keys ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0", "1", "42", str(2**64), str(MAX_HASH_KEY), "1" + "0" * 37])
def test_parse_explicit_hash_key_accepts(text: str) -> None:
    assert parse_explicit_hash_key(text) == int(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "-1",
        "+1",
        " 1",
        "1 ",
        "01",
        "00",
        "1e3",
        "0x10",
        "1_000",
        "1.0",
        "\u0661\u0662",  # Arabic-Indic digits: int() accepts them, the service does not
        "1" * 40,
    ],
)
def test_parse_explicit_hash_key_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="decimal integer string"):
        parse_explicit_hash_key(text)


def test_parse_explicit_hash_key_rejects_2_pow_128() -> None:
    with pytest.raises(ValueError, match=r"2\*\*128"):
        parse_explicit_hash_key(str(2**128))
    # 39 digits but above the range: the pattern alone would accept it.
    with pytest.raises(ValueError, match=r"\[0, 2\*\*128 - 1\]"):
        parse_explicit_hash_key("9" * 39)


def test_effective_hash_key_prefers_the_explicit_one() -> None:
    assert effective_hash_key("k") == hash_key("k")
    assert effective_hash_key("k", "7") == 7
    with pytest.raises(ValueError):
        effective_hash_key("k", "07")


# --- partition keys -------------------------------------------------------------------------


def test_partition_key_empty_rejected() -> None:
    with pytest.raises(ValueError, match=r"1 to 256 characters \(UTF-16 code units.*got 0"):
        validate_partition_key("")


def test_partition_key_256_ok_257_rejected() -> None:
    assert validate_partition_key("k" * 256) == "k" * 256
    with pytest.raises(ValueError, match=r"1 to 256 characters.*got 257"):
        validate_partition_key("k" * 257)


@pytest.mark.parametrize("char", ["é", "漢"])
def test_partition_key_counts_characters_not_bytes(char: str) -> None:
    key = char * 256
    assert len(key.encode("utf-8")) > 256
    assert validate_partition_key(key) == key
    with pytest.raises(ValueError, match="got 257"):
        validate_partition_key(key + char)


def test_item_15_partition_key_counts_utf16_code_units_as_the_service_does() -> None:
    """an emoji is two UTF-16 code units, so 128 fit and 129 do not."""
    assert validate_partition_key("😀" * 128) == "😀" * 128
    assert validate_partition_key("😀" * 127 + "kk") == "😀" * 127 + "kk"
    with pytest.raises(ValueError, match="got 258"):
        validate_partition_key("😀" * 129)
    with pytest.raises(ValueError, match="got 257"):
        validate_partition_key("😀" * 128 + "k")


def test_partition_key_lone_surrogate_rejected() -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        validate_partition_key("ok\ud800")


# --- HashRange and ShardMap -----------------------------------------------------------------


def _even_ranges(count: int) -> list[HashRange]:
    """``count`` shards splitting the hash key space evenly, as CreateStream does."""
    step = (MAX_HASH_KEY + 1) // count
    return [
        HashRange(
            f"shardId-{i:012d}",
            i * step,
            MAX_HASH_KEY if i == count - 1 else (i + 1) * step - 1,
        )
        for i in range(count)
    ]


def test_hash_range_validates_bounds() -> None:
    with pytest.raises(ValueError, match="start <= end"):
        HashRange("s", 5, 4)
    with pytest.raises(ValueError, match="2\\*\\*128 - 1"):
        HashRange("s", 0, MAX_HASH_KEY + 1)
    with pytest.raises(ValueError):
        HashRange("s", -1, 3)
    assert 4 in HashRange("s", 4, 4)
    assert 5 not in HashRange("s", 4, 4)


def test_lookup_at_inclusive_range_edges() -> None:
    ranges = _even_ranges(4)
    shard_map = ShardMap(ranges)
    assert shard_map.shard_for_hash_key(0) == ranges[0].shard_id
    assert shard_map.shard_for_hash_key(MAX_HASH_KEY) == ranges[3].shard_id
    for left, right in itertools.pairwise(ranges):
        assert shard_map.shard_for_hash_key(left.ending_hash_key) == left.shard_id
        assert shard_map.shard_for_hash_key(right.starting_hash_key) == right.shard_id
        assert shard_map.shard_for_hash_key(left.ending_hash_key - 1) == left.shard_id
        assert shard_map.shard_for_hash_key(right.starting_hash_key + 1) == right.shard_id
    assert shard_map.gaps() == []


def test_lookup_outside_the_hash_key_space_raises() -> None:
    shard_map = ShardMap(_even_ranges(2))
    with pytest.raises(ValueError):
        shard_map.lookup(-1)
    with pytest.raises(ValueError):
        shard_map.lookup(MAX_HASH_KEY + 1)
    for outside in (-1, MAX_HASH_KEY + 1):  # shard_for_hash_key searches on its own
        with pytest.raises(ValueError, match=r"\[0, 2\*\*128 - 1\]"):
            shard_map.shard_for_hash_key(outside)
    gapped = ShardMap([HashRange("a", 10, 19)])
    with pytest.raises(ValueError):
        gapped.shard_for_hash_key(-1)
    assert gapped.shard_for_hash_key(0) is None


def test_gaps_map_to_none_and_are_reported() -> None:
    shard_map = ShardMap([HashRange("a", 10, 19), HashRange("b", 30, 39)])
    assert shard_map.shard_for_hash_key(9) is None
    assert shard_map.shard_for_hash_key(10) == "a"
    assert shard_map.shard_for_hash_key(19) == "a"
    assert shard_map.shard_for_hash_key(20) is None
    assert shard_map.shard_for_hash_key(29) is None
    assert shard_map.shard_for_hash_key(30) == "b"
    assert shard_map.shard_for_hash_key(40) is None
    assert shard_map.gaps() == [(0, 9), (20, 29), (40, MAX_HASH_KEY)]
    assert ShardMap([]).gaps() == [(0, MAX_HASH_KEY)]
    assert ShardMap([]).lookup(5) is None


def test_overlapping_ranges_rejected() -> None:
    with pytest.raises(ValueError, match="overlapping"):
        ShardMap([HashRange("a", 0, 10), HashRange("b", 10, 20)])


def test_shard_for_partition_key_and_explicit_hash_key() -> None:
    ranges = _even_ranges(8)
    shard_map = ShardMap(ranges)
    for key in ["a", "b", "user-17", "漢字"]:
        expected = next(r.shard_id for r in ranges if hash_key(key) in r)
        assert shard_map.shard_for(key) == expected
    assert shard_map.shard_for("a", str(MAX_HASH_KEY)) == ranges[-1].shard_id
    assert shard_map.shard_for("a", "0") == ranges[0].shard_id


@given(
    bounds=st.lists(st.integers(0, MAX_HASH_KEY), min_size=1, max_size=40, unique=True),
    probes=st.lists(st.integers(0, MAX_HASH_KEY), max_size=30),
    keep=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_lookup_agrees_with_a_linear_scan(
    bounds: list[int], probes: list[int], keep: list[bool]
) -> None:
    # Cut the key space at the given points; drop some pieces to make gaps.
    cuts = sorted(bounds)
    starts = [0, *(c + 1 for c in cuts if c < MAX_HASH_KEY)]
    ends = [*(c for c in cuts if c < MAX_HASH_KEY), MAX_HASH_KEY]
    ranges = [
        HashRange(f"s{i}", start, end)
        for i, (start, end) in enumerate(zip(starts, ends, strict=True))
        if keep[i % len(keep)]
    ]
    shard_map = ShardMap(ranges)
    for probe in [*probes, *starts, *ends]:
        expected = next((r.shard_id for r in ranges if probe in r), None)
        assert shard_map.shard_for_hash_key(probe) == expected


def _list_shards_entry(shard: HashRange, *, closed: bool = False) -> dict[str, Any]:
    sequence_range: dict[str, str] = {"StartingSequenceNumber": "1"}
    if closed:
        sequence_range["EndingSequenceNumber"] = "2"
    return {
        "ShardId": shard.shard_id,
        "HashKeyRange": {
            "StartingHashKey": str(shard.starting_hash_key),
            "EndingHashKey": str(shard.ending_hash_key),
        },
        "SequenceNumberRange": sequence_range,
    }


@given(seed=st.integers(0, 2**32), page_size=st.integers(1, 7))
def test_from_shards_is_independent_of_pagination_order(seed: int, page_size: int) -> None:
    ranges = _even_ranges(16)
    # A resharded stream: a closed parent whose range overlaps its two open children.
    parent = HashRange("shardId-parent", ranges[0].starting_hash_key, ranges[1].ending_hash_key)
    entries = [_list_shards_entry(r) for r in ranges] + [_list_shards_entry(parent, closed=True)]
    rng = random.Random(seed)
    rng.shuffle(entries)
    pages = [entries[i : i + page_size] for i in range(0, len(entries), page_size)]
    rng.shuffle(pages)
    shard_map = ShardMap.from_shards(entry for page in pages for entry in page)
    assert shard_map.ranges == tuple(ranges)
    assert len(shard_map) == 16
    assert list(shard_map) == ranges
    probes = [rng.randrange(MAX_HASH_KEY + 1) for _ in range(20)]
    reference = ShardMap(ranges)
    for probe in probes:
        assert shard_map.shard_for_hash_key(probe) == reference.shard_for_hash_key(probe)


def test_from_shards_include_closed_keeps_parents_and_so_overlaps() -> None:
    ranges = _even_ranges(2)
    parent = HashRange("parent", 0, MAX_HASH_KEY)
    entries = [_list_shards_entry(r) for r in ranges] + [_list_shards_entry(parent, closed=True)]
    assert len(ShardMap.from_shards(entries)) == 2
    with pytest.raises(ValueError, match="overlapping"):
        ShardMap.from_shards(entries, include_closed=True)
    only_parent = ShardMap.from_shards(
        [_list_shards_entry(parent, closed=True)], include_closed=True
    )
    assert only_parent.shard_for_hash_key(123) == "parent"
