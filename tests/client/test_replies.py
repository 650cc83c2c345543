"""Replies are checked before they are believed, sans-IO: the codec alone."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kinesis_actors import errors
from kinesis_actors.client._protocol import ProtocolCodec
from tests.client._samples import CLOSED_SHARD_END, REPLIES, body
from tests.faults import GARBLED_BODIES

#: The operations checked through ``ProtocolCodec.decode`` (SubscribeToShard: test_records).
OPERATIONS = sorted(REPLIES)


@pytest.fixture(scope="module")
def codec() -> ProtocolCodec:
    return ProtocolCodec()


def _botocore(codec: ProtocolCodec, operation: str, raw: bytes) -> dict[str, Any]:
    output = codec.operation_model(operation).output_shape
    parsed: dict[str, Any] = codec._parser.parse(
        {"status_code": 200, "headers": {}, "body": raw}, output
    )
    parsed.pop("ResponseMetadata", None)
    return parsed


@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_local_server_s_replies_are_believed_as_botocore_reads_them(
    codec: ProtocolCodec, operation: str
) -> None:
    raw = body(REPLIES[operation])
    decoded = codec.decode(operation, 200, {}, raw, record_count=1)
    expected = _botocore(codec, operation, raw)
    if operation == "PutRecords":  # json.loads keeps the nulls botocore drops (by design)
        decoded = {k: v for k, v in decoded.items() if k != "Records"}
        expected = {k: v for k, v in expected.items() if k != "Records"}
    assert decoded == expected
    assert decoded  # never {}


@pytest.mark.parametrize("kind", sorted(GARBLED_BODIES))
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_garbled_2xx_is_a_malformed_reply_naming_the_operation(
    codec: ProtocolCodec, operation: str, kind: str
) -> None:
    with pytest.raises(errors.MalformedReplyError) as caught:
        codec.decode(operation, 200, {}, GARBLED_BODIES[kind], record_count=1)
    error = caught.value
    assert error.operation == operation
    assert str(error).startswith(f"{operation}: HTTP 200 with a malformed reply: ")
    assert isinstance(error, errors.ServiceError)  # retried like a 5xx


def _drop(*path: str | int) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        *parents, last = path
        target: Any = document
        for step in parents:
            target = target[step]
        del target[last]

    return mutate


def _set(value: object, *path: str | int) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        *parents, last = path
        target: Any = document
        for step in parents:
            target = target[step]
        target[last] = value

    return mutate


@pytest.mark.parametrize(
    ("operation", "mutate", "problem"),
    [
        ("ListShards", _drop("Shards"), "Shards is missing"),
        ("ListShards", _set({}, "Shards"), "Shards is not a list"),
        ("ListShards", _drop("Shards", 1, "ShardId"), r"Shards\[1\].ShardId is missing"),
        ("ListShards", _set(7, "Shards", 0, "ShardId"), r"Shards\[0\].ShardId is not a string"),
        (
            "ListShards",
            _drop("Shards", 0, "HashKeyRange", "EndingHashKey"),
            r"Shards\[0\].HashKeyRange.EndingHashKey is missing",
        ),
        ("ListShards", _set(3, "NextToken"), "NextToken is not a string"),
        (
            "ListShards",
            _set(["x"], "Shards", 1, "ParentShardId"),
            r"Shards\[1\].ParentShardId is not a string",
        ),
        ("GetShardIterator", _drop("ShardIterator"), "ShardIterator is missing"),
        ("GetShardIterator", _set(None, "ShardIterator"), "ShardIterator is missing"),
        (
            "DescribeStreamSummary",
            _drop("StreamDescriptionSummary", "StreamARN"),
            "StreamDescriptionSummary.StreamARN is missing",
        ),
        (
            "DescribeStreamSummary",
            _set(True, "StreamDescriptionSummary", "OpenShardCount"),
            "OpenShardCount is not an integer",
        ),
        (
            "DescribeStreamSummary",
            _set([], "StreamDescriptionSummary", "StreamCreationTimestamp"),
            "StreamCreationTimestamp is not a timestamp",
        ),
        (
            "DescribeStreamConsumer",
            _drop("ConsumerDescription", "ConsumerStatus"),
            "ConsumerDescription.ConsumerStatus is missing",
        ),
        ("RegisterStreamConsumer", _set("x", "Consumer"), "Consumer is not an object"),
        (
            "ListStreamConsumers",
            _drop("Consumers", 0, "ConsumerARN"),
            r"Consumers\[0\].ConsumerARN is missing",
        ),
        ("GetRecords", _drop("Records"), "Records is missing"),
        ("GetRecords", _set({}, "Records"), "Records is not a list"),
        ("GetRecords", _drop("MillisBehindLatest"), "MillisBehindLatest is missing"),
        ("GetRecords", _set("0", "MillisBehindLatest"), "MillisBehindLatest is not an integer"),
        ("GetRecords", _set(5, "NextShardIterator"), "NextShardIterator is not a string"),
        ("PutRecords", _drop("Records"), "Records is missing"),
        ("PutRecords", _set({}, "Records"), "Records is not a list"),
    ],
)
def test_a_used_field_missing_or_mistyped_is_malformed(
    codec: ProtocolCodec, operation: str, mutate: Callable[[dict[str, Any]], None], problem: str
) -> None:
    document = copy.deepcopy(REPLIES[operation])
    mutate(document)
    with pytest.raises(errors.MalformedReplyError, match=problem) as caught:
        codec.decode(operation, 200, {}, body(document), record_count=1)
    assert caught.value.operation == operation


def test_a_missing_next_iterator_is_no_end_of_shard_without_children(
    codec: ProtocolCodec,
) -> None:
    document = copy.deepcopy(REPLIES["GetRecords"])
    del document["NextShardIterator"]
    with pytest.raises(errors.MalformedReplyError, match="NextShardIterator is missing"):
        codec.decode("GetRecords", 200, {}, body(document))
    document["ChildShards"] = []
    with pytest.raises(errors.MalformedReplyError, match="ChildShards is empty"):
        codec.decode("GetRecords", 200, {}, body(document))


def test_a_closed_shard_s_last_reply_is_believed(codec: ProtocolCodec) -> None:
    decoded = codec.decode("GetRecords", 200, {}, body(CLOSED_SHARD_END))
    assert "NextShardIterator" not in decoded
    assert [child["ShardId"] for child in decoded["ChildShards"]] == ["shardId-000000000001"]
    assert decoded == _botocore(codec, "GetRecords", body(CLOSED_SHARD_END))


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (_drop("Records"), "Records is missing"),
        (_drop("MillisBehindLatest"), "MillisBehindLatest is missing"),
        (_set([{"ShardId": "x"}], "ChildShards"), r"ChildShards\[0\].ParentShards is missing"),
    ],
)
def test_an_end_of_shard_must_be_otherwise_well_formed(
    codec: ProtocolCodec, mutate: Callable[[dict[str, Any]], None], problem: str
) -> None:
    document = copy.deepcopy(CLOSED_SHARD_END)
    mutate(document)
    with pytest.raises(errors.MalformedReplyError, match=problem):
        codec.decode("GetRecords", 200, {}, body(document))


@pytest.mark.parametrize(
    ("records", "count", "problem"),
    [
        ([{"SequenceNumber": "1", "ShardId": "shardId-0"}], 2, "1 entries for the 2 records"),
        ([{"SequenceNumber": "1", "ShardId": "s"}] * 3, 2, "3 entries for the 2 records"),
        ([{"ShardId": "shardId-0"}], 1, r"Records\[0\] has neither"),
        ([{"SequenceNumber": "1", "ErrorCode": None}], 1, r"Records\[0\] has neither"),
        ([{"ErrorCode": 500}], 1, r"Records\[0\].ErrorCode is not a string"),
        (["ok"], 1, r"Records\[0\] is not an object"),
    ],
)
def test_a_put_records_reply_that_does_not_match_the_request_is_malformed(
    codec: ProtocolCodec, records: list[object], count: int, problem: str
) -> None:
    raw = body({"FailedRecordCount": 0, "Records": records})
    with pytest.raises(errors.MalformedReplyError, match=problem):
        codec.decode("PutRecords", 200, {}, raw, record_count=count)


def test_put_records_entries_may_fail_one_by_one(codec: ProtocolCodec) -> None:
    records = [
        {"SequenceNumber": "1", "ShardId": "shardId-000000000000"},
        {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow down"},
    ]
    raw = body({"FailedRecordCount": 1, "Records": records})
    assert codec.decode("PutRecords", 200, {}, raw, record_count=2)["Records"] == records


def test_the_request_carries_its_record_count(codec: ProtocolCodec) -> None:
    fast = codec.encode_put_records("s", [(b"a", "k", None), (b"b", "k", None)])
    slow = codec.encode(
        "PutRecords", {"StreamName": "s", "Records": [{"Data": b"a", "PartitionKey": "k"}] * 3}
    )
    assert (fast.record_count, slow.record_count) == (2, 3)
    assert codec.encode("ListStreams", {}).record_count is None


@pytest.mark.parametrize("operation", ["DeregisterStreamConsumer", "CreateStream"])
def test_an_operation_without_output_believes_an_empty_body_and_nothing_else(
    codec: ProtocolCodec, operation: str
) -> None:
    # The empty body is these operations' real answer (the local server's and the service's).
    assert codec.decode(operation, 200, {}, b"") == {}
    assert codec.decode(operation, 200, {}, b"{}") == {}
    for kind in ("truncated", "html", "not-an-object"):
        with pytest.raises(errors.MalformedReplyError) as caught:
            codec.decode(operation, 200, {}, GARBLED_BODIES[kind])
        assert caught.value.operation == operation


def test_other_operations_need_the_model_s_required_members(codec: ProtocolCodec) -> None:
    assert codec.decode("ListStreams", 200, {}, b'{"StreamNames": [], "HasMoreStreams": false}')
    with pytest.raises(errors.MalformedReplyError, match="StreamNames is missing"):
        codec.decode("ListStreams", 200, {}, b'{"HasMoreStreams": false}')
    with pytest.raises(errors.MalformedReplyError, match="empty"):
        codec.decode("ListStreams", 200, {}, b"")


def test_a_body_of_whitespace_is_empty(codec: ProtocolCodec) -> None:
    with pytest.raises(errors.MalformedReplyError, match="the body is empty"):
        codec.decode("GetRecords", 200, {}, b" \r\n")
    assert codec.decode("DeregisterStreamConsumer", 200, {}, b"\n") == {}
