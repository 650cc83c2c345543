"""Deaggregation of untrusted input: what is not a valid aggregate is one plain record."""

from __future__ import annotations

import hashlib

import pytest

from kinesis_actors.records import (
    MAGIC,
    Aggregator,
    UserRecord,
    deaggregate,
    deaggregate_into,
    is_aggregated,
)

from .strategies import wrap


def _aggregate(records: list[tuple[bytes, str, str | None]]) -> bytes:
    aggregator = Aggregator()
    for data, pk, ehk in records:
        assert aggregator.add(data, pk, ehk)
    return aggregator.build_container()


# --- input that is not a valid aggregate ----------------------------------------------------


def _valid_blob() -> bytes:
    return _aggregate([(b"one", "a", None), (b"two", "b", "7")])


def _not_aggregated(blob: bytes) -> None:
    assert deaggregate(blob, "outer", "42") == [UserRecord("outer", "42", blob, 0)]
    partition_keys: list[str] = ["kept"]
    assert deaggregate_into(blob, partition_keys, [], []) is None
    assert partition_keys == ["kept"]


def test_plain_data_is_one_record() -> None:
    for blob in [b"", b"hello", MAGIC, MAGIC + bytes(15), b"\x00" * 100]:
        assert not is_aggregated(blob)
        _not_aggregated(blob)


def test_bad_md5_is_one_record() -> None:
    blob = _valid_blob()
    assert is_aggregated(blob)
    bad_digest = blob[:-1] + bytes([blob[-1] ^ 1])
    bad_body = blob[:6] + bytes([blob[6] ^ 1]) + blob[7:]
    bad_magic = b"\xf3\x89\x9a\xc3" + blob[4:]
    for blob_variant in [bad_digest, bad_body, bad_magic]:
        assert not is_aggregated(blob_variant)
        _not_aggregated(blob_variant)


def test_truncated_is_one_record() -> None:
    blob = _valid_blob()
    for cut in [1, 5, 16, len(blob) - 5, len(blob) - 4]:
        _not_aggregated(blob[:-cut])


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\x1a\x05\x08\x00", id="record-length-past-end"),
        pytest.param(b"\x0a\x01a\x1a\x02\x08\x00", id="record-without-data"),
        pytest.param(b"\x0a\x01a\x1a\x02\x1a\x00", id="record-without-pk-index"),
        pytest.param(b"\x0a\x01a\x1a\x04\x08\x01\x1a\x00", id="pk-index-out-of-range"),
        pytest.param(b"\x1a\x04\x08\x00\x1a\x00", id="empty-pk-table"),
        pytest.param(b"\x0a\x01a\x1a\x06\x08\x00\x10\x00\x1a\x00", id="ehk-index-no-table"),
        pytest.param(b"\x0a\x01a\x1a\x05\x08\x00\x1a\x05ab", id="data-past-record-end"),
        pytest.param(b"\x0a\x05ab", id="table-entry-past-end"),
        pytest.param(b"\x0a", id="tag-without-length"),
        pytest.param(b"\x08" + b"\xff" * 10 + b"\x01", id="varint-longer-than-10-bytes"),
        pytest.param(b"\x08\x80", id="varint-cut-short"),
        pytest.param(b"\x00\x00", id="field-number-zero"),
        pytest.param(b"\x80\x80\x80\x80\x10\x00", id="field-number-2**29"),
        pytest.param(b"\x0b\x0c", id="group-wire-type"),
        pytest.param(b"\x0e", id="wire-type-6"),
        pytest.param(b"\x0d\x00\x00", id="fixed32-cut-short"),
        pytest.param(b"\x0a\x01a\x1a\x06\x08\x00\x1a\x00\x22\x00", id="tag-without-key"),
        pytest.param(b"\x0a\x01a\x1a\x08\x08\x00\x1a\x00\x22\x02\x0a\x05", id="tag-key-cut"),
    ],
)
def test_malformed_protobuf_with_valid_md5_is_one_record(body: bytes) -> None:
    blob = wrap(body)
    assert is_aggregated(blob)
    _not_aggregated(blob)


def test_a_failure_after_good_records_appends_nothing() -> None:
    good = _aggregate([(b"x", "a", None)] * 3)[4:-16]
    blob = wrap(good + b"\x1a\x04\x08\x09\x1a\x00")  # a fourth record with pk index 9
    pks: list[str] = []
    ehks: list[str | None] = []
    datas: list[bytes] = []
    assert deaggregate_into(blob, pks, ehks, datas) is None
    assert (pks, ehks, datas) == ([], [], [])


# --- valid protobuf this encoder never writes -----------------------------------------------


def test_unknown_fields_are_skipped() -> None:
    body = (
        b"\x78\x05"  # field 15, varint
        + b"\x0a\x01a"
        + b"\x81\x01" + bytes(8)  # field 16, fixed64 (two-byte tag)
        + b"\x1a\x0d\x08\x00\x1a\x02hi\x2d" + bytes(4) + b"\x32\x00"  # fixed32, empty bytes
    )  # fmt: skip
    assert deaggregate(wrap(body), "outer") == [UserRecord("a", None, b"hi", 0)]


def test_largest_field_number_is_skipped_as_unknown() -> None:
    body = b"\xf8\xff\xff\xff\x0f\x00" + b"\x0a\x01a\x1a\x05\x08\x00\x1a\x01x"
    assert deaggregate(wrap(body), "outer") == [UserRecord("a", None, b"x", 0)]


def test_tags_are_accepted_and_ignored() -> None:
    tag = b"\x0a\x03env\x12\x04prod"
    record = b"\x08\x00\x1a\x01x\x22" + bytes([len(tag)]) + tag
    body = b"\x0a\x01a\x1a" + bytes([len(record)]) + record
    assert deaggregate(wrap(body), "outer") == [UserRecord("a", None, b"x", 0)]


def test_fields_in_any_order() -> None:
    # Records before the tables, and data before the index: protobuf allows both.
    body = b"\x1a\x07\x10\x00\x1a\x01x\x08\x01" + b"\x12\x017" + b"\x0a\x01a\x0a\x01b"
    assert deaggregate(wrap(body), "outer") == [UserRecord("b", "7", b"x", 0)]


def test_repeated_scalar_field_last_one_wins() -> None:
    body = b"\x0a\x01a\x0a\x01b\x1a\x07\x08\x00\x1a\x01x\x08\x01"
    assert deaggregate(wrap(body), "outer") == [UserRecord("b", None, b"x", 0)]


def test_invalid_utf8_in_a_key_is_replaced_as_the_kcl_does() -> None:
    body = b"\x0a\x02\xff\xfe\x1a\x05\x08\x00\x1a\x01x"
    assert deaggregate(wrap(body), "outer") == [UserRecord("\ufffd\ufffd", None, b"x", 0)]


def test_is_aggregated_checks_magic_and_md5_only() -> None:
    body = b"\x1a\x05"  # not parseable, yet the framing is right
    assert is_aggregated(MAGIC + body + hashlib.md5(body).digest())
    assert not is_aggregated(MAGIC + body + hashlib.md5(body + b"x").digest())
