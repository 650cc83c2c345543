"""Arrow batches from Kinesis records: schema, deaggregation, timestamps, resume filtering."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_actors.records import (
    RECORD_SCHEMA,
    Aggregator,
    Position,
    build_record_batch,
)

from .strategies import user_records

ARRIVAL = datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=UTC)
ARRIVAL_MS = 1714566615123


def _record(
    sequence_number: int | str,
    data: bytes,
    partition_key: str = "pk",
    stamp: datetime | float = ARRIVAL,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "SequenceNumber": str(sequence_number),
        "ApproximateArrivalTimestamp": stamp,
        "Data": data,
        "PartitionKey": partition_key,
        **extra,
    }


def _aggregate(*records: tuple[bytes, str, str | None]) -> bytes:
    aggregator = Aggregator()
    for data, pk, ehk in records:
        assert aggregator.add(data, pk, ehk)
    return aggregator.build_container()


def _rows(
    records: list[dict[str, Any]], after: tuple[str, int] | None = None
) -> list[tuple[str, int, bytes]]:
    batch = build_record_batch("s", "shard-1", records, after=after).batch
    return list(
        zip(
            batch.column("sequence_number").to_pylist(),
            batch.column("sub_sequence_number").to_pylist(),
            batch.column("data").to_pylist(),
            strict=True,
        )
    )


def test_schema_is_exactly_the_documented_one() -> None:
    expected = [
        ("stream", pa.string(), False),
        ("shard_id", pa.string(), False),
        ("sequence_number", pa.string(), False),
        ("sub_sequence_number", pa.int64(), False),
        ("partition_key", pa.string(), False),
        ("explicit_hash_key", pa.string(), True),
        ("approximate_arrival_timestamp", pa.timestamp("ms", tz="UTC"), False),
        ("data", pa.binary(), False),
    ]
    assert [(f.name, f.type, f.nullable) for f in RECORD_SCHEMA] == expected
    assert RECORD_SCHEMA.metadata is None


def test_plain_records() -> None:
    records = [
        _record(100, b"a", "k1"),
        _record(101, b"", "k2", ExplicitHashKey="5"),
    ]
    result = build_record_batch("orders", "shardId-000000000003", records)
    batch = result.batch
    assert batch.schema == RECORD_SCHEMA
    batch.validate(full=True)
    assert batch.to_pydict() == {
        "stream": ["orders", "orders"],
        "shard_id": ["shardId-000000000003"] * 2,
        "sequence_number": ["100", "101"],
        "sub_sequence_number": [0, 0],
        "partition_key": ["k1", "k2"],
        "explicit_hash_key": [None, "5"],
        "approximate_arrival_timestamp": [ARRIVAL, ARRIVAL],
        "data": [b"a", b""],
    }
    assert result.last_position == Position("101", 0)


def test_aggregates_expand_into_user_records() -> None:
    blob = _aggregate((b"u0", "a", None), (b"u1", "b", "77"), (b"u2", "a", None))
    later = ARRIVAL + timedelta(seconds=1)
    records = [_record(5, b"before"), _record(6, blob, "outer"), _record(7, b"after", stamp=later)]
    result = build_record_batch("s", "shard-1", records)
    columns = result.batch.to_pydict()
    assert columns["sequence_number"] == ["5", "6", "6", "6", "7"]
    assert columns["sub_sequence_number"] == [0, 0, 1, 2, 0]
    assert columns["partition_key"] == ["pk", "a", "b", "a", "pk"]
    assert columns["explicit_hash_key"] == [None, None, "77", None, None]
    assert columns["data"] == [b"before", b"u0", b"u1", b"u2", b"after"]
    assert columns["approximate_arrival_timestamp"] == [ARRIVAL] * 4 + [later]
    assert result.last_position == Position("7", 0)
    result.batch.validate(full=True)


def test_bad_aggregate_is_one_row_with_the_raw_blob() -> None:
    blob = _aggregate((b"u0", "a", None), (b"u1", "b", None))
    corrupted = blob[:-1] + bytes([blob[-1] ^ 0x55])
    columns = build_record_batch("s", "sh", [_record(9, corrupted, "outer")]).batch.to_pydict()
    assert columns["data"] == [corrupted]
    assert columns["partition_key"] == ["outer"]
    assert columns["sub_sequence_number"] == [0]


def test_empty_input_gives_an_empty_batch_of_the_schema() -> None:
    result = build_record_batch("s", "sh", [])
    assert result.batch.num_rows == 0
    assert result.batch.schema == RECORD_SCHEMA
    assert result.last_position is None


def test_empty_aggregate_contributes_no_rows() -> None:
    result = build_record_batch("s", "sh", [_record(1, b"x"), _record(2, _aggregate())])
    assert _rows([_record(1, b"x"), _record(2, _aggregate())]) == [("1", 0, b"x")]
    assert result.last_position == Position("1", 0)


# --- timestamps -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stamp",
    [
        ARRIVAL,
        ARRIVAL.astimezone(timezone(timedelta(hours=-7))),
        ARRIVAL.replace(tzinfo=None),  # naive: taken as UTC
        ARRIVAL_MS / 1000,  # epoch seconds, as the JSON wire format carries them
        ARRIVAL + timedelta(microseconds=999),  # truncated to the millisecond
    ],
    ids=["utc", "other-zone", "naive", "epoch-float", "sub-millisecond"],
)
def test_arrival_timestamp_forms(stamp: datetime | float) -> None:
    batch = build_record_batch("s", "sh", [_record(1, b"x", stamp=stamp)]).batch
    column = batch.column("approximate_arrival_timestamp")
    assert column.type == pa.timestamp("ms", tz="UTC")
    assert column.cast(pa.int64()).to_pylist() == [ARRIVAL_MS]


@given(st.integers(0, 4_102_444_800_000))  # up to 2100, in milliseconds
def test_epoch_float_milliseconds_are_exact(millis: int) -> None:
    batch = build_record_batch("s", "sh", [_record(1, b"x", stamp=millis / 1000)]).batch
    assert batch.column("approximate_arrival_timestamp").cast(pa.int64())[0].as_py() == millis


@given(
    st.lists(
        st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
        min_size=1,
        max_size=50,
    )
)
def test_every_record_keeps_its_own_exact_millisecond(stamps: list[datetime]) -> None:
    # Every stamp differs (a busy shard's): the column is converted in one pass, exactly.
    records = [_record(i, b"x", stamp=stamp) for i, stamp in enumerate(stamps)]
    batch = build_record_batch("s", "sh", records).batch
    values = batch.column("approximate_arrival_timestamp").cast(pa.int64()).to_pylist()
    epoch = datetime(1970, 1, 1)
    assert values == [(stamp - epoch) // timedelta(milliseconds=1) for stamp in stamps]


def test_mixed_timestamp_types_in_one_response() -> None:
    stamps: list[datetime | float] = [ARRIVAL, ARRIVAL_MS / 1000 + 1, ARRIVAL, ARRIVAL]
    records = [_record(i, b"x", stamp=stamp) for i, stamp in enumerate(stamps)]
    batch = build_record_batch("s", "sh", records).batch
    values = batch.column("approximate_arrival_timestamp").cast(pa.int64()).to_pylist()
    assert values == [ARRIVAL_MS, ARRIVAL_MS + 1000, ARRIVAL_MS, ARRIVAL_MS]


# --- resume filtering -----------------------------------------------------------------------


def _response() -> list[dict[str, Any]]:
    aggregate = _aggregate(*[(f"agg-{i}".encode(), f"k{i}", None) for i in range(4)])
    return [
        _record(8, b"plain-8"),
        _record(9, aggregate, "outer"),
        _record(10, b"plain-10"),
        _record(11, _aggregate((b"x0", "k", None), (b"x1", "k", None)), "outer"),
    ]


def test_resume_mid_aggregate_drops_the_committed_user_records() -> None:
    result = build_record_batch("s", "sh", _response(), after=("9", 1))
    assert _rows(_response(), after=("9", 1)) == [
        ("9", 2, b"agg-2"),
        ("9", 3, b"agg-3"),
        ("10", 0, b"plain-10"),
        ("11", 0, b"x0"),
        ("11", 1, b"x1"),
    ]
    assert result.batch.column("partition_key").to_pylist()[:2] == ["k2", "k3"]
    assert result.last_position == Position("11", 1)


def test_resume_at_the_end_of_an_aggregate_drops_it_whole() -> None:
    for sub in (3, 4, 1000):
        assert [row[:2] for row in _rows(_response(), after=("9", sub))] == [
            ("10", 0),
            ("11", 0),
            ("11", 1),
        ]


def test_resume_at_a_plain_record_drops_it() -> None:
    assert [row[:2] for row in _rows(_response(), after=("10", 0))] == [("11", 0), ("11", 1)]


def test_resume_with_sub_minus_one_keeps_that_sequence_number_whole() -> None:
    rows = _rows(_response(), after=("9", -1))
    assert [row[:2] for row in rows][:4] == [("9", 0), ("9", 1), ("9", 2), ("9", 3)]
    assert _rows(_response(), after=("8", -1))[0] == ("8", 0, b"plain-8")


def test_resume_before_or_after_the_response() -> None:
    assert len(_rows(_response(), after=("7", 5))) == 8
    result = build_record_batch("s", "sh", _response(), after=("11", 1))
    assert result.batch.num_rows == 0
    assert result.last_position is None
    assert _rows(_response(), after=("12", 0)) == []


def test_resume_compares_sequence_numbers_as_integers() -> None:
    # As strings "9" > "10"; as numbers the record at 10 is after the checkpoint at 9.
    records = [_record(9, b"nine"), _record(10, b"ten"), _record(100, b"hundred")]
    assert _rows(records, after=("9", 0)) == [("10", 0, b"ten"), ("100", 0, b"hundred")]
    long_a = "49590338271490256608559692538361571095921575989136588898"
    long_b = "49590338271490256608559692538361571095921575989136588899"
    assert _rows([_record(long_a, b"a"), _record(long_b, b"b")], after=(long_a, 0)) == [
        (long_b, 0, b"b")
    ]


@given(user_records(min_records=1, max_records=12, max_data=20), st.data())
def test_resume_anywhere_equals_dropping_a_prefix_of_rows(
    users: list[tuple[bytes, str, str | None]], data: st.DataObject
) -> None:
    # Split the user records over several Kinesis records, some aggregated, some plain.
    records = []
    index = 0
    sequence = 1000
    while index < len(users):
        take = data.draw(st.integers(1, len(users) - index))
        chunk = users[index : index + take]
        if take == 1 and data.draw(st.booleans()):
            records.append(_record(sequence, chunk[0][0], chunk[0][1]))
        else:
            records.append(_record(sequence, _aggregate(*chunk), "outer"))
        index += take
        sequence += data.draw(st.integers(1, 10**20))
    full = _rows(records)
    cut = data.draw(st.integers(0, len(full) - 1))
    sequence_number, sub, _ = full[cut]
    assert _rows(records, after=(sequence_number, sub)) == full[cut + 1 :]
    last = build_record_batch("s", "sh", records).last_position
    assert last == Position(full[-1][0], full[-1][1])
