"""The protocol codec and the event-stream decoder, sans-IO."""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_actors import errors
from kinesis_actors.client import _protocol
from kinesis_actors.client._eventstream import SubscribeToShardDecoder
from kinesis_actors.client._protocol import JSON_ONLY_OUTPUTS, ProtocolCodec


@pytest.fixture(scope="module")
def codec() -> ProtocolCodec:
    return ProtocolCodec()


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """Encode one event-stream message (string headers only), as the service frames them."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += struct.pack("!B", len(raw_name)) + raw_name
        encoded += b"\x07" + struct.pack("!H", len(raw_value)) + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack("!I", zlib.crc32(message))


CHILD = {
    "ShardId": "shardId-000000000001",
    "ParentShards": ["shardId-000000000000"],
    "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "1"},
}


def event(
    records: list[dict[str, object]],
    continuation: str | None,
    children: list[dict[str, object]] | None = None,
) -> bytes:
    body = {
        "Records": records,
        "ContinuationSequenceNumber": continuation,
        "MillisBehindLatest": 5,
        "ChildShards": children,
    }
    return frame(
        {
            ":message-type": "event",
            ":event-type": "SubscribeToShardEvent",
            ":content-type": "application/json",
        },
        json.dumps(body).encode(),
    )


INITIAL = frame({":message-type": "event", ":event-type": "initial-response"}, b"{}")
RECORD = {
    "SequenceNumber": "1",
    "ApproximateArrivalTimestamp": 1_700_000_000.25,
    "Data": "aGVsbG8=",
    "PartitionKey": "k",
}


def test_encode_produces_the_json_target_and_base64_blobs(codec: ProtocolCodec) -> None:
    request = codec.encode("PutRecord", {"StreamName": "s", "Data": b"hello", "PartitionKey": "k"})
    assert request.headers["X-Amz-Target"] == "Kinesis_20131202.PutRecord"
    assert request.headers["Content-Type"] == "application/x-amz-json-1.1"
    assert json.loads(request.body)["Data"] == "aGVsbG8="


def test_invalid_parameters_are_rejected_before_any_io(codec: ProtocolCodec) -> None:
    with pytest.raises(errors.ValidationError, match="PartitionKey"):
        codec.encode("PutRecord", {"StreamName": "s", "Data": b"x", "PartitionKey": ""})
    with pytest.raises(errors.ValidationError, match="StreamName"):
        codec.encode("PutRecord", {"Data": b"x", "PartitionKey": "k", "Bogus": 1})
    with pytest.raises(errors.ValidationError, match="unknown Kinesis operation"):
        codec.encode("MakeCoffee", {})


def test_results_use_boto3_shapes_with_utc_timestamps(codec: ProtocolCodec) -> None:
    body = json.dumps(
        {"Records": [RECORD], "MillisBehindLatest": 0, "NextShardIterator": "it"}
    ).encode()
    result = codec.decode("GetRecords", 200, {}, body)
    record = result["Records"][0]
    assert record["Data"] == b"hello"
    assert record["ApproximateArrivalTimestamp"] == dt.datetime(
        2023, 11, 14, 22, 13, 20, 250000, tzinfo=dt.UTC
    )


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ResourceNotFoundException", 400, errors.ResourceNotFoundError),
        ("com.amazonaws.kinesis.v20131202#ResourceInUseException", 400, errors.ResourceInUseError),
        ("ProvisionedThroughputExceededException", 400, errors.ThrottlingError),
        ("LimitExceededException", 400, errors.ThrottlingError),
        ("ExpiredIteratorException", 400, errors.ExpiredIteratorError),
        ("InvalidArgumentException", 400, errors.ValidationError),
        ("AccessDeniedException", 400, errors.AccessDeniedError),
        ("KMSDisabledException", 400, errors.KMSError),
        ("InternalFailureException", 500, errors.ServiceError),
        ("SomethingNew", 503, errors.ServiceError),
        ("SomethingNew", 400, errors.KinesisError),
    ],
)
def test_error_codes_map_to_typed_errors(
    codec: ProtocolCodec, code: str, status: int, expected: type[errors.KinesisError]
) -> None:
    body = json.dumps({"__type": code, "message": "it went wrong"}).encode()
    error = codec.decode_error("ListShards", status, {}, body)
    assert type(error) is expected
    assert error.code == code.rsplit("#", 1)[-1]
    assert error.operation == "ListShards"
    assert "it went wrong" in str(error)


def test_a_5xx_without_a_json_body_is_a_service_error(codec: ProtocolCodec) -> None:
    error = codec.decode_error("ListShards", 502, {}, b"<html>bad gateway</html>")
    assert isinstance(error, errors.ServiceError)
    assert "bad gateway" in error.message


@pytest.mark.parametrize("initial_response", [True, False], ids=["aws", "local-server"])
def test_event_stream_with_or_without_initial_response(
    codec: ProtocolCodec, initial_response: bool
) -> None:
    stream = (INITIAL if initial_response else b"") + event([RECORD], "1") + event([], "1")
    decoder = SubscribeToShardDecoder(codec)
    events = []
    for i in range(0, len(stream), 7):  # arbitrary chunking: frames span reads
        events.extend(decoder.feed(stream[i : i + 7]))
    assert len(events) == 2
    assert decoder.initial_response_seen is initial_response
    assert events[0]["Records"][0]["Data"] == b"hello"
    assert events[0]["ContinuationSequenceNumber"] == "1"
    assert events[0]["MillisBehindLatest"] == 5
    assert events[1]["Records"] == []


def test_a_null_continuation_is_preserved_for_the_caller(codec: ProtocolCodec) -> None:
    decoder = SubscribeToShardDecoder(codec)
    [last] = decoder.feed(event([], None, [CHILD]))
    assert last.get("ContinuationSequenceNumber") is None
    assert last["ChildShards"] == [CHILD]


def test_a_null_continuation_without_children_is_no_proof_of_the_end(
    codec: ProtocolCodec,
) -> None:
    decoder = SubscribeToShardDecoder(codec)
    with pytest.raises(errors.MalformedReplyError, match="ContinuationSequenceNumber is missing"):
        decoder.feed(event([], None))


def test_exception_events_raise_typed_errors(codec: ProtocolCodec) -> None:
    decoder = SubscribeToShardDecoder(codec)
    exception = frame(
        {
            ":message-type": "exception",
            ":exception-type": "ResourceInUseException",
            ":content-type": "application/json",
        },
        json.dumps({"message": "another subscription is active"}).encode(),
    )
    with pytest.raises(errors.ResourceInUseError, match="another subscription"):
        decoder.feed(event([RECORD], "1") + exception)


def test_error_messages_raise_typed_errors(codec: ProtocolCodec) -> None:
    decoder = SubscribeToShardDecoder(codec)
    error = frame(
        {
            ":message-type": "error",
            ":error-code": "InternalFailureException",
            ":error-message": "boom",
        },
        b"",
    )
    with pytest.raises(errors.ServiceError, match="boom"):
        decoder.feed(error)


def _botocore_parse(codec: ProtocolCodec, operation: str, body: bytes) -> dict[str, object]:
    model = codec.operation_model(operation)
    parsed: dict[str, object] = codec._parser.parse(
        {"status_code": 200, "headers": {}, "body": body}, model.output_shape
    )
    parsed.pop("ResponseMetadata", None)
    return parsed


def _plain_json_members(shape: object) -> bool:
    """Whether a shape holds only strings, integers, booleans, lists and structures of them."""
    type_name = getattr(shape, "type_name", "")
    if type_name == "structure":
        return all(_plain_json_members(member) for member in shape.members.values())  # type: ignore[attr-defined]
    if type_name == "list":
        return _plain_json_members(shape.member)  # type: ignore[attr-defined]
    return type_name in ("string", "integer", "long", "boolean")


@pytest.mark.parametrize("operation", sorted(JSON_ONLY_OUTPUTS))
def test_json_only_outputs_really_are_plain_json(codec: ProtocolCodec, operation: str) -> None:
    # The fast path decodes these with json.loads: no blob, timestamp or float may appear.
    assert _plain_json_members(codec.operation_model(operation).output_shape)


def test_the_put_records_fast_decode_equals_botocore_s(codec: ProtocolCodec) -> None:
    body = json.dumps(
        {
            "FailedRecordCount": 1,
            "EncryptionType": "KMS",
            "Records": [
                {"SequenceNumber": "4960" + "1" * 52, "ShardId": "shardId-000000000001"},
                {
                    "ErrorCode": "ProvisionedThroughputExceededException",
                    "ErrorMessage": "Rate exceeded for shard shardId-000000000001",
                },
            ],
        }
    ).encode()
    assert codec.decode("PutRecords", 200, {}, body) == _botocore_parse(codec, "PutRecords", body)


def test_the_put_records_fast_encode_equals_botocore_s(codec: ProtocolCodec) -> None:
    records: list[tuple[bytes, str, str | None]] = [
        (b"\x00\xffbinary", "key-é", None),
        (b"x" * 300, "k", str(2**128 - 1)),
        (b"y", "k" * 256, "0"),
    ]
    fast = codec.encode_put_records("my-stream", records)
    slow = codec.encode(
        "PutRecords",
        {
            "StreamName": "my-stream",
            "Records": [
                {"Data": data, "PartitionKey": key}
                | ({} if hash_key is None else {"ExplicitHashKey": hash_key})
                for data, key, hash_key in records
            ],
        },
    )
    assert fast.operation == slow.operation == "PutRecords"
    assert dict(fast.headers) == dict(slow.headers)
    assert json.loads(fast.body) == json.loads(slow.body)


_keys = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)
_hash_keys = st.none() | st.integers(0, 2**128 - 1).map(str)


@given(
    st.lists(st.tuples(st.binary(min_size=1, max_size=200), _keys, _hash_keys), max_size=8),
    st.sampled_from(["s", "arn:aws:kinesis:us-east-1:123456789012:stream/s"]),
)
def test_the_put_records_fast_encode_is_json_dumps_byte_for_byte(
    records: list[tuple[bytes, str, str | None]], stream: str
) -> None:
    codec = _protocol.ProtocolCodec()
    document = dict(_protocol.stream_params(stream))
    document["Records"] = [
        {"Data": base64.b64encode(data).decode("ascii"), "PartitionKey": key}
        | ({} if hash_key is None else {"ExplicitHashKey": hash_key})
        for data, key, hash_key in records
    ]
    fast = codec.encode_put_records(stream, iter(records))  # any iterable, read once
    assert fast.body == json.dumps(document, separators=(",", ":")).encode("utf-8")
    assert fast.record_count == len(records)


@given(st.text(st.characters(exclude_categories=["Cs"])))
def test_a_key_s_json_string_is_json_dumps_s(text: str) -> None:
    assert _protocol._json_string(text) == json.dumps(text).encode("ascii")
    assert _protocol._json_string(text) == json.dumps(text).encode("ascii")  # kept, the same


def test_the_kept_json_strings_are_bounded() -> None:
    for index in range(_protocol.JSON_STRINGS_LIMIT + 10):
        _protocol._json_string(f"key-{index}")
    assert len(_protocol._json_strings) <= _protocol.JSON_STRINGS_LIMIT


@pytest.mark.parametrize("body", [b"", b"<html>proxy error</html>", b"[1, 2]", b"null"])
def test_a_put_records_success_without_a_json_object_is_a_retryable_service_error(
    codec: ProtocolCodec, body: bytes
) -> None:
    with pytest.raises(errors.MalformedReplyError, match=r"empty|not a JSON object"):
        codec.decode("PutRecords", 200, {}, body)
