"""The aggregation codec on its own: round trips, exact sizes, the cap, malformed input."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_actors.records import (
    DEFAULT_AGGREGATION_MAX_BYTES,
    MAGIC,
    Aggregator,
    OutboundRecord,
    UserRecord,
    _aggregation,
    deaggregate,
    deaggregate_into,
    hash_key,
)

from .strategies import UserRecordInput, user_records


def _aggregate(records: list[UserRecordInput], max_bytes: int = 64 * 2**20) -> Aggregator:
    aggregator = Aggregator(max_bytes)
    for data, pk, ehk in records:
        assert aggregator.add(data, pk, ehk)
    return aggregator


def _expected(records: list[UserRecordInput]) -> list[UserRecord]:
    return [UserRecord(pk, ehk, data, i) for i, (data, pk, ehk) in enumerate(records)]


# --- round trips ----------------------------------------------------------------------------


@given(user_records())
def test_container_round_trip(records: list[UserRecordInput]) -> None:
    blob = _aggregate(records).build_container()
    assert blob.startswith(MAGIC)
    assert blob[-16:] == hashlib.md5(blob[4:-16]).digest()
    assert deaggregate(blob, "outer-key") == _expected(records)


@given(user_records(max_records=10))
def test_build_round_trip_through_the_outbound_record(records: list[UserRecordInput]) -> None:
    if not records:
        return
    out = _aggregate(records).build()
    assert out.user_record_count == len(records)
    assert deaggregate(out.data, out.partition_key, out.explicit_hash_key) == _expected(records)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 5 * 2**20])
def test_round_trip_and_exact_size_at_varint_boundaries(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    records = [(data, "k", None), (b"x", "k2", "12345")]
    aggregator = _aggregate(records)
    blob = aggregator.build_container()
    assert aggregator.container_size == len(blob) == aggregator.size
    assert deaggregate(blob, "outer") == _expected(records)


def test_many_distinct_keys_use_multibyte_indexes() -> None:
    records = [(f"d{i}".encode(), f"pk-{i}", str(i * 7919)) for i in range(300)]
    aggregator = _aggregate(records)
    blob = aggregator.build_container()
    assert aggregator.size == len(blob)
    assert deaggregate(blob, "outer") == _expected(records)


@pytest.mark.parametrize("keys", [200, 16_500])
def test_small_records_with_two_and_three_byte_key_indexes(keys: int) -> None:
    # Key indexes cross the one-, two- and three-byte varint boundaries (128 and 16,384)
    # while data sizes cross the small-record fast path's limit.
    records: list[UserRecordInput] = [(bytes(i % 130), f"k{i}", None) for i in range(keys)]
    aggregator = Aggregator(64 * 2**20)
    for data, pk, ehk in records:
        predicted = aggregator.size_if_added(data, pk, ehk)
        assert aggregator.add(data, pk, ehk)
        assert aggregator.size == predicted
    blob = aggregator.build_container()
    assert aggregator.size == len(blob)
    assert deaggregate(blob, "outer") == _expected(records)


def test_empty_container_decodes_to_no_records() -> None:
    blob = Aggregator().build_container()
    assert blob == MAGIC + hashlib.md5(b"").digest()
    assert Aggregator().container_size == 20
    assert deaggregate(blob, "pk") == []
    assert deaggregate_into(blob, [], [], []) == 0


# --- what build() sends ---------------------------------------------------------------------


def test_one_record_is_sent_plain() -> None:
    aggregator = Aggregator()
    aggregator.add(b"payload", "key", None)
    assert aggregator.build() == OutboundRecord(b"payload", "key", None, 1)
    assert aggregator.size == len(b"payload")

    with_ehk = Aggregator()
    with_ehk.add(b"payload", "key", "99")
    assert with_ehk.build() == OutboundRecord(b"payload", "key", "99", 1)


def test_several_records_go_under_the_first_records_keys() -> None:
    aggregator = Aggregator()
    aggregator.add(b"a", "first", None)
    aggregator.add(b"b", "second", "5")
    out = aggregator.build()
    assert out.partition_key == "first"
    assert out.explicit_hash_key == str(hash_key("first"))
    assert out.data == aggregator.build_container()
    assert out.user_record_count == 2

    explicit = Aggregator()
    explicit.add(b"a", "first", "123")
    explicit.add(b"b", "second", None)
    assert explicit.build().explicit_hash_key == "123"


def test_build_leaves_state_and_reset_clears_it() -> None:
    aggregator = Aggregator()
    with pytest.raises(ValueError, match="empty"):
        aggregator.build()
    aggregator.add(b"a", "k", None)
    aggregator.add(b"b", "k", None)
    first = aggregator.build()
    assert aggregator.build() == first
    assert len(aggregator) == 2
    aggregator.reset()
    assert len(aggregator) == 0
    assert aggregator.size == 0
    aggregator.add(b"c", "other", None)
    assert aggregator.build() == OutboundRecord(b"c", "other", None, 1)
    aggregator.add(b"d", "k", None)
    # The table restarted: "other" is index 0 again, "k" index 1.
    assert deaggregate(aggregator.build().data, "x") == [
        UserRecord("other", None, b"c", 0),
        UserRecord("k", None, b"d", 1),
    ]


def test_duplicate_keys_are_stored_once() -> None:
    long_key = "p" * 200
    repeated = _aggregate([(b"", long_key, "1" * 38)] * 10)
    distinct = _aggregate([(b"", long_key[:-1] + str(i), "1" * 37 + str(i)) for i in range(10)])
    # Each repeat costs only its record (~6 bytes); distinct keys cost ~240 bytes each.
    assert repeated.container_size < 200 + 38 + 10 * 10 + 40
    assert distinct.container_size > 10 * (200 + 38)


# --- size accounting and the cap ------------------------------------------------------------


@given(user_records(max_records=30, max_data=2000))
def test_predicted_size_is_exact_after_every_add(records: list[UserRecordInput]) -> None:
    aggregator = Aggregator(64 * 2**20)
    for data, pk, ehk in records:
        predicted = aggregator.size_if_added(data, pk, ehk)
        assert aggregator.add(data, pk, ehk)
        assert aggregator.size == predicted == len(aggregator.build().data)
        assert aggregator.container_size == len(aggregator.build_container())


@given(user_records(max_records=40, max_data=400), st.integers(21, 3000))
def test_cap_is_respected_and_refusal_changes_nothing(
    records: list[UserRecordInput], max_bytes: int
) -> None:
    aggregator = Aggregator(max_bytes)
    for data, pk, ehk in records:
        fits = aggregator.would_fit(data, pk, ehk)
        predicted = aggregator.size_if_added(data, pk, ehk)
        before = aggregator.build_container()
        count = len(aggregator)
        assert aggregator.add(data, pk, ehk) is fits
        if fits:
            assert len(aggregator) == count + 1
            assert count == 0 or predicted <= max_bytes
        else:
            assert count >= 1
            assert predicted > max_bytes
            assert aggregator.build_container() == before
            assert len(aggregator) == count
            aggregator.reset()
            assert aggregator.add(data, pk, ehk)
        if len(aggregator) >= 2:
            assert len(aggregator.build().data) <= max_bytes


def _warmed_pair(keys_before: int, max_bytes: int) -> tuple[Aggregator, Aggregator]:
    """Two aggregators holding the same ``keys_before`` one-byte records (while they fit),
    so the keys after them get indexes past 127."""
    by_run, by_record = Aggregator(max_bytes), Aggregator(max_bytes)
    for index in range(keys_before):
        if not by_record.add(b"x", f"warm-{index}"):
            break
        assert by_run.add(b"x", f"warm-{index}")
    return by_run, by_record


def _add_run_as_adds(
    by_run: Aggregator, by_record: Aggregator, datas: list[bytes], key: str
) -> int:
    """``add_run`` into one, an ``add`` per record into the other until one is refused: both
    took the same number, which is returned."""
    taken = by_run.add_run(datas, key)
    expected = 0
    for data in datas:
        if not by_record.add(data, key):
            break
        expected += 1
    assert taken == expected
    return taken


@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(1, 200)), min_size=1, max_size=12),
    st.integers(1, 300),
    st.integers(21, 20_000),
)
def test_add_run_is_add_per_record(
    runs: list[tuple[int, int]], keys_before: int, max_bytes: int
) -> None:
    """Runs of one key (the producer's domains): the same bytes and the same stopping point
    as one add() per record, across one- and two-byte key indexes, data sizes on both sides
    of the one-byte header, and caps that stop a run part way."""
    by_run, by_record = _warmed_pair(keys_before, max_bytes)
    for run, (key, count) in enumerate(runs):
        datas = [bytes([run % 256]) * (1 + (run * 37 + i * 11) % 140) for i in range(count)]
        taken = _add_run_as_adds(by_run, by_record, datas, f"key-{key}")
        assert by_run.build_container() == by_record.build_container()
        assert by_run.size == by_record.size == len(by_run.build().data)
        if taken < count:
            break


@given(
    st.lists(
        st.tuples(st.integers(0, 300), st.integers(1, 12), st.integers(1, 300)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 300),
    st.integers(21, 20_000),
)
def test_add_run_of_equal_sizes_is_add_per_record(
    runs: list[tuple[int, int, int]], keys_before: int, max_bytes: int
) -> None:
    """Runs whose records all have one size (add_run joins those at once): the same bytes,
    sizes and stopping point as one add() per record, with one- and two-byte lengths and key
    indexes, and an empty aggregator taking a first record bigger than its cap."""
    by_run, by_record = _warmed_pair(keys_before, max_bytes)
    for run, (key, count, size) in enumerate(runs):
        datas = [bytes([(run + i) % 256]) * size for i in range(count)]
        taken = _add_run_as_adds(by_run, by_record, datas, f"key-{key}")
        assert len(by_run) == len(by_record)
        assert by_run.build_container() == by_record.build_container()
        assert by_run.size == by_record.size == len(by_run.build().data)
        if taken < count:
            break


@pytest.mark.parametrize("mixed", [False, True])
def test_add_run_of_a_run_far_longer_than_the_room_takes_what_add_would(mixed: bool) -> None:
    """A run of 100,000 records into one aggregate (only the first few hundred fit; add_run
    looks at no more than the room could hold): the same as an add() per record."""
    datas = [bytes([i % 256]) * (100 + (i % 5 if mixed else 0)) for i in range(100_000)]
    by_run, by_record = Aggregator(), Aggregator()
    assert by_run.add(b"first", "other") and by_record.add(b"first", "other")
    expected = 1
    while by_record.add(datas[expected - 1], "hot"):
        expected += 1
    assert by_run.add_run(datas, "hot") == expected - 1
    assert by_run.build() == by_record.build()


def test_the_encoders_cache_is_bounded() -> None:
    """The record headers add and add_run reuse are kept in a bounded cache (process-wide:
    every aggregator shares it), so a stream of new keys and sizes cannot grow it."""
    cached = _aggregation._record_header
    assert cached.cache_info().maxsize == 16_384
    aggregator = Aggregator()
    for index in range(20_000):  # more new keys (and key indexes) than the cache holds
        if not aggregator.add_run([b"x" * (index % 100)], f"new-{index}"):
            aggregator.reset()
    assert cached.cache_info().currsize <= 16_384


def test_add_run_with_explicit_hash_keys_and_an_empty_run() -> None:
    by_run, by_record = Aggregator(), Aggregator()
    assert by_run.add_run([], "k") == 0
    datas = [b"a" * 10, b"b" * 200, b"c"]
    assert by_run.add_run(datas, "k", "12345") == 3
    for data in datas:
        assert by_record.add(data, "k", "12345")
    assert by_run.build() == by_record.build()


def test_oversized_single_record_is_accepted_alone_then_nothing_fits() -> None:
    aggregator = Aggregator()
    big = bytes(DEFAULT_AGGREGATION_MAX_BYTES * 2)
    assert aggregator.would_fit(big, "k")
    assert aggregator.add(big, "k")
    assert aggregator.size == len(big)
    assert not aggregator.would_fit(b"x", "k")
    assert not aggregator.add(b"x", "k")
    assert aggregator.build() == OutboundRecord(big, "k", None, 1)


def test_default_cap_is_the_kpl_default() -> None:
    aggregator = Aggregator()
    assert aggregator.max_bytes == 51_200
    while aggregator.add(bytes(100), "key"):
        pass
    # Records of 100 bytes cost 106 bytes each (+ the key once, + 20 overhead).
    assert aggregator.size <= 51_200 < aggregator.size + 106
    assert len(aggregator.build().data) == aggregator.size


def test_max_bytes_must_leave_room_for_the_overhead() -> None:
    with pytest.raises(ValueError, match="exceed 20"):
        Aggregator(20)
    assert Aggregator(21).max_bytes == 21


@pytest.mark.parametrize(
    ("pk", "ehk", "match"),
    [
        ("", None, "1 to 256"),
        ("k" * 257, None, "got 257"),
        ("\U0001f600" * 129, None, "got 258"),  # UTF-16 code units, as the service counts
        ("a\ud800", None, "lone surrogate"),
        ("k", "-1", "decimal integer"),
        ("k", str(2**128), r"2\*\*128"),
    ],
)
def test_invalid_keys_raise_and_leave_the_aggregator_unchanged(
    pk: str, ehk: str | None, match: str
) -> None:
    aggregator = Aggregator()
    aggregator.add(b"a", "ok", None)
    before = aggregator.build_container()
    for call in (aggregator.add, aggregator.would_fit, aggregator.size_if_added):
        with pytest.raises(ValueError, match=match):
            call(b"data", pk, ehk)
    assert aggregator.build_container() == before
    assert len(aggregator) == 1


def test_a_key_of_128_emoji_fits_the_service_limit_exactly() -> None:
    """256 UTF-16 code units: the longest key the service takes."""
    aggregator = Aggregator()
    aggregator.add(b"a", "\U0001f600" * 128, None)
    assert len(aggregator) == 1
