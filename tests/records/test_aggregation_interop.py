"""Interoperability with ``aws-kinesis-agg``, the reference aggregation library from AWS Labs.

Both directions of deaggregation, byte-for-byte equality of the encodings, and a differential
fuzz of the decoder against protobuf's own parser (upb) on mutated payloads.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

# aws_kinesis_agg.aggregator is imported first: it puts config_pb2 on sys.path for messages_pb2.
import aws_kinesis_agg.aggregator as agg_aggregator
import aws_kinesis_agg.deaggregator as agg_deaggregator
import google.protobuf.message
import pytest
from aws_kinesis_agg import messages_pb2
from google.protobuf import unknown_fields
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_actors.records import (
    Aggregator,
    UserRecord,
    deaggregate,
    deaggregate_into,
)

from .strategies import UserRecordInput, user_records, wrap


def _theirs(records: list[UserRecordInput]) -> tuple[str, str | None, bytes]:
    """Encode with aws-kinesis-agg; returns its (partition key, explicit hash key, data)."""
    aggregator = agg_aggregator.RecordAggregator()
    for data, pk, ehk in records:
        assert aggregator.add_user_record(pk, data, ehk) is None  # never full here
    record = aggregator.clear_and_get()
    assert record is not None
    pk, ehk, blob = record.get_contents()
    return pk, ehk, blob


def _ours(records: list[UserRecordInput]) -> bytes:
    aggregator = Aggregator(2**20)
    for data, pk, ehk in records:
        assert aggregator.add(data, pk, ehk)
    return aggregator.build_container()


def _their_deaggregation(blob: bytes, partition_key: str) -> list[dict[str, Any]]:
    boto3_record = {
        "SequenceNumber": "49590338271490256608559692538361571095921575989136588898",
        "ApproximateArrivalTimestamp": datetime(2024, 1, 1, tzinfo=UTC),
        "Data": blob,
        "PartitionKey": partition_key,
    }
    return list(agg_deaggregator.iter_deaggregate_records([boto3_record], data_format="Boto3"))


@given(user_records(min_records=1))
def test_their_aggregate_deaggregated_by_us(records: list[UserRecordInput]) -> None:
    pk, _, blob = _theirs(records)
    assert deaggregate(blob, pk) == [
        UserRecord(key, ehk, data, i) for i, (data, key, ehk) in enumerate(records)
    ]


@given(user_records(min_records=1, ehk_mode="none") | user_records(min_records=1, ehk_mode="all"))
def test_our_aggregate_deaggregated_by_them(records: list[UserRecordInput]) -> None:
    # Their deaggregator gives a record without an explicit hash key the table's entry 0 when
    # the table is not empty, so mixed aggregates are checked at the protobuf level below.
    theirs = _their_deaggregation(_ours(records), "outer")
    assert len(theirs) == len(records)
    for i, ((data, pk, ehk), record) in enumerate(zip(records, theirs, strict=True)):
        fields = record["kinesis"]
        assert fields["subSequenceNumber"] == i
        assert fields["aggregated"] is True
        assert fields["partitionKey"] == pk
        assert fields["explicitHashKey"] == ehk
        assert base64.b64decode(fields["data"]) == data


@given(user_records())
def test_our_aggregate_parses_as_their_protobuf_message(records: list[UserRecordInput]) -> None:
    message = messages_pb2.AggregatedRecord()
    message.ParseFromString(_ours(records)[4:-16])
    pk_table = list(dict.fromkeys(pk for _, pk, _ in records))
    ehk_table = list(dict.fromkeys(ehk for _, _, ehk in records if ehk is not None))
    assert list(message.partition_key_table) == pk_table
    assert list(message.explicit_hash_key_table) == ehk_table
    assert len(message.records) == len(records)
    for (data, pk, ehk), record in zip(records, message.records, strict=True):
        assert record.IsInitialized()
        assert message.partition_key_table[record.partition_key_index] == pk
        if ehk is None:
            assert not record.HasField("explicit_hash_key_index")
        else:
            assert message.explicit_hash_key_table[record.explicit_hash_key_index] == ehk
        assert record.data == data
        assert len(record.tags) == 0


def _top_level_field_numbers(body: bytes) -> list[int]:
    """Field numbers of the top-level fields, all length-delimited with one-byte tags here."""
    numbers = []
    pos = 0
    while pos < len(body):
        tag = body[pos]
        length, shift, pos = 0, 0, pos + 1
        while True:
            byte = body[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        numbers.append(tag >> 3)
        pos += length
    return numbers


@given(user_records(min_records=1, ehk_mode="mixed"))
def test_their_encoder_is_deterministic_and_in_field_number_order(
    records: list[UserRecordInput],
) -> None:
    # The premise of the byte-for-byte comparison below.
    blob = _theirs(records)[2]
    assert _theirs(records)[2] == blob
    numbers = _top_level_field_numbers(blob[4:-16])
    assert numbers == sorted(numbers)
    assert numbers.count(3) == len(records)


@given(user_records(min_records=1, max_records=60))
def test_encoding_is_byte_for_byte_theirs(records: list[UserRecordInput]) -> None:
    # Their encoder is protobuf's serializer, which writes fields in field-number order; so
    # the same records in the same order must give the same bytes, MD5 included.
    pk, _, blob = _theirs(records)
    assert _ours(records) == blob
    assert pk == records[0][1]


def test_encoding_is_byte_for_byte_theirs_with_large_data_and_many_keys() -> None:
    records: list[UserRecordInput] = [
        (bytes([i % 251]) * (i * 97 % 2000), f"key-{i % 150}-é", None if i % 3 else str(i * 10**30))
        for i in range(400)
    ]
    assert _ours(records) == _theirs(records)[2]
    big = [(bytes(range(256)) * 3000, "big", None), (b"", "small", "0")]
    assert _ours(big) == _theirs(big)[2]


def test_encoding_is_byte_for_byte_theirs_past_128_keys() -> None:
    records: list[UserRecordInput] = [(bytes(i % 130), f"k{i}", None) for i in range(300)]
    assert _ours(records) == _theirs(records)[2]


def test_their_single_record_aggregate_is_one_user_record() -> None:
    pk, _, blob = _theirs([(b"only", "k", None)])
    assert deaggregate(blob, pk) == [UserRecord("k", None, b"only", 0)]


def test_their_deaggregator_and_ours_agree_on_non_aggregates() -> None:
    good = _ours([(b"a", "k", None), (b"b", "k", None)])
    for blob in [b"plain", good[:-1] + bytes([good[-1] ^ 0xFF]), good[:-3]]:
        theirs = _their_deaggregation(blob, "outer")
        assert len(theirs) == 1
        assert theirs[0]["kinesis"]["data"] == blob
        assert deaggregate(blob, "outer") == [UserRecord("outer", None, blob, 0)]


# --- differential fuzz of the decoder against upb -------------------------------------------


@st.composite
def mutated_payloads(draw: st.DrawFn) -> bytes:
    body = bytearray(_ours(draw(user_records(max_records=8, max_data=40)))[4:-16])
    for _ in range(draw(st.integers(0, 3))):
        operation = draw(st.sampled_from(["set", "delete", "insert", "truncate"]))
        at = draw(st.integers(0, len(body)))
        if operation == "set" and at < len(body):
            body[at] = draw(st.integers(0, 255))
        elif operation == "delete":
            del body[at : at + draw(st.integers(1, 4))]
        elif operation == "insert":
            body[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del body[at:]
    return bytes(body)


def _has_group(message: google.protobuf.message.Message) -> bool:
    return any(field.wire_type == 3 for field in unknown_fields.UnknownFieldSet(message))


def _why_we_refuse(message: Any) -> str | None:
    """Which of our deliberate strictnesses beyond upb's a payload upb accepted runs into."""
    if _has_group(message):
        return "group"
    for record in message.records:
        if not record.HasField("partition_key_index") or not record.HasField("data"):
            return "missing required field"
        if record.partition_key_index >= len(message.partition_key_table):
            return "partition key index out of range"
        if record.HasField("explicit_hash_key_index") and record.explicit_hash_key_index >= len(
            message.explicit_hash_key_table
        ):
            return "explicit hash key index out of range"
        if _has_group(record) or any(_has_group(tag) for tag in record.tags):
            return "group"
        if any(not tag.HasField("key") for tag in record.tags):
            return "tag without key"
    return None


def _as_text(value: str | bytes) -> str:
    # upb hands back bytes for a proto2 string that is not valid UTF-8.
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


@settings(max_examples=500)
@given(mutated_payloads())
def test_decoder_agrees_with_protobuf(body: bytes) -> None:
    pks: list[str] = []
    ehks: list[str | None] = []
    datas: list[bytes] = []
    count = deaggregate_into(wrap(body), pks, ehks, datas)
    message = messages_pb2.AggregatedRecord()
    try:
        message.ParseFromString(body)
    except google.protobuf.message.DecodeError:
        # What protobuf cannot parse, we do not decode either.
        assert count is None
        return
    if count is None:
        assert _why_we_refuse(message) is not None
        return
    assert count == len(message.records)
    for i, record in enumerate(message.records):
        assert pks[i] == _as_text(message.partition_key_table[record.partition_key_index])
        if record.HasField("explicit_hash_key_index"):
            expected = _as_text(message.explicit_hash_key_table[record.explicit_hash_key_index])
            assert ehks[i] == expected
        else:
            assert ehks[i] is None
        assert datas[i] == record.data


@pytest.mark.parametrize("max_size", [200, 1000, 51_200])
def test_their_cap_never_packs_more_than_ours(max_size: int) -> None:
    # Their size estimate counts a repeated partition key again for every record, so they
    # close aggregates early; ours is exact, so for the same cap we pack at least as many.
    their_aggregator = agg_aggregator.RecordAggregator(max_size)
    ours = Aggregator(max_size)
    their_count = 0
    while their_aggregator.add_user_record("same-key", b"x" * 20) is None:
        their_count += 1
    while ours.add(b"x" * 20, "same-key"):
        pass
    assert len(ours) >= their_count
    assert ours.container_size <= max_size
