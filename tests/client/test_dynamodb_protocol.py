"""The DynamoDB side of the shared foundations, sans-IO: the JSON 1.0 codec, typed errors,
replies checked before they are believed, retry defaults and signing for ``dynamodb``."""

from __future__ import annotations

import base64
import json
import zlib

import pytest
from botocore.credentials import Credentials

from kinesis_actors import errors
from kinesis_actors.client import (
    DYNAMODB_RETRY_SETTINGS,
    DynamoDBClient,
    RetryPolicy,
    RetrySettings,
)
from kinesis_actors.client._protocol import ProtocolCodec
from kinesis_actors.client._signing import Signer


@pytest.fixture(scope="module")
def codec() -> ProtocolCodec:
    return ProtocolCodec(service="dynamodb")


def _error(code: str, **extra: object) -> bytes:
    return json.dumps(
        {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "m", **extra}
    ).encode()


def test_requests_are_json_1_0_with_the_dynamodb_target(codec: ProtocolCodec) -> None:
    request = codec.encode(
        "UpdateItem",
        {
            "TableName": "leases",
            "Key": {"leaseKey": {"S": "shardId-000000000000"}},
            "UpdateExpression": "SET leaseCounter = leaseCounter + :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        },
    )
    assert request.headers["X-Amz-Target"] == "DynamoDB_20120810.UpdateItem"
    assert request.headers["Content-Type"] == "application/x-amz-json-1.0"
    assert json.loads(request.body)["Key"] == {"leaseKey": {"S": "shardId-000000000000"}}
    assert request.record_count is None


def test_binary_attributes_travel_as_base64_and_come_back_as_bytes(codec: ProtocolCodec) -> None:
    request = codec.encode("PutItem", {"TableName": "leases", "Item": {"b": {"B": b"\x00\x01"}}})
    assert json.loads(request.body)["Item"]["b"]["B"] == base64.b64encode(b"\x00\x01").decode()
    body = json.dumps({"Item": {"b": {"B": "AAE="}, "n": {"N": "7"}}}).encode()
    assert codec.decode("GetItem", 200, {}, body) == {
        "Item": {"b": {"B": b"\x00\x01"}, "n": {"N": "7"}}
    }


def test_bad_parameters_are_refused_before_any_io_naming_the_service(
    codec: ProtocolCodec,
) -> None:
    with pytest.raises(errors.ValidationError, match="TableName"):
        codec.encode("GetItem", {"Key": {"k": {"S": "x"}}})
    with pytest.raises(errors.ValidationError, match="unknown DynamoDB operation 'PutRecords'"):
        codec.encode("PutRecords", {})


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        ("ConditionalCheckFailedException", errors.ConditionalCheckFailedError),
        ("ProvisionedThroughputExceededException", errors.ThrottlingError),
        ("ThrottlingException", errors.ThrottlingError),
        ("RequestLimitExceeded", errors.ThrottlingError),
        ("ValidationException", errors.ValidationError),
        ("ResourceNotFoundException", errors.ResourceNotFoundError),
        ("ResourceInUseException", errors.ResourceInUseError),
        ("InternalServerError", errors.ServiceError),
    ],
)
def test_service_errors_are_typed(
    codec: ProtocolCodec, code: str, error_type: type[errors.KinesisError]
) -> None:
    with pytest.raises(error_type) as caught:
        codec.decode("UpdateItem", 500 if code == "InternalServerError" else 400, {}, _error(code))
    assert caught.value.code == code
    assert caught.value.operation == "UpdateItem"


def test_a_failed_condition_is_never_retried_and_throttling_is() -> None:
    policy = RetryPolicy(random=lambda: 1.0)
    failed = errors.ConditionalCheckFailedError("no", code="ConditionalCheckFailedException")
    assert policy.next_delay("UpdateItem", failed, 0, service="dynamodb") is None
    throttled = errors.ThrottlingError("slow", code="RequestLimitExceeded")
    assert policy.next_delay("UpdateItem", throttled, 0, service="dynamodb") == 0.025


def test_a_failed_condition_carries_the_item_when_the_service_sends_it(
    codec: ProtocolCodec,
) -> None:
    item = {"leaseKey": {"S": "shardId-1"}, "leaseCounter": {"N": "9"}, "b": {"B": "AAE="}}
    error = codec.decode_error(
        "PutItem", 400, {}, _error("ConditionalCheckFailedException", Item=item)
    )
    assert isinstance(error, errors.ConditionalCheckFailedError)
    assert error.item == {
        "leaseKey": {"S": "shardId-1"},
        "leaseCounter": {"N": "9"},
        "b": {"B": b"\x00\x01"},
    }
    assert error.retried is False
    bare = codec.decode_error("PutItem", 400, {}, _error("ConditionalCheckFailedException"))
    assert isinstance(bare, errors.ConditionalCheckFailedError)
    assert bare.item is None


def test_a_body_that_does_not_match_its_crc32_is_malformed(codec: ProtocolCodec) -> None:
    body = b'{"Items": [], "Count": 0, "ScannedCount": 0}'
    assert codec.decode("Scan", 200, {"x-amz-crc32": str(zlib.crc32(body))}, body)["Items"] == []
    with pytest.raises(errors.MalformedReplyError, match="x-amz-crc32"):
        codec.decode("Scan", 200, {"x-amz-crc32": str(zlib.crc32(body) ^ 1)}, body)
    # A damaged error reply is not believed either: it is retried, not read as its code.
    failed = _error("ConditionalCheckFailedException")
    with pytest.raises(errors.MalformedReplyError):
        codec.decode("PutItem", 400, {"x-amz-crc32": "1"}, failed)


@pytest.mark.parametrize(
    ("operation", "body", "problem"),
    [
        ("Scan", b'{"Count": 0}', "Items is missing"),
        ("Scan", b'{"Items": [{"leaseKey": "shard"}]}', r"Items\[0\] is not an item"),
        ("Scan", b'{"Items": [], "LastEvaluatedKey": []}', "LastEvaluatedKey is not an item"),
        ("GetItem", b'{"Item": {"k": {"S": "a", "N": "1"}}}', "Item is not an item"),
        ("DescribeTable", b'{"Table": {"TableName": "t"}}', "TableStatus is missing"),
        ("ListTables", b"{}", "TableNames is missing"),
        ("UpdateItem", b"", "the body is empty"),
    ],
)
def test_a_reply_missing_what_the_library_reads_is_malformed(
    codec: ProtocolCodec, operation: str, body: bytes, problem: str
) -> None:
    with pytest.raises(errors.MalformedReplyError, match=problem) as caught:
        codec.decode(operation, 200, {}, body)
    assert caught.value.operation == operation


def test_a_write_without_return_values_is_an_empty_object(codec: ProtocolCodec) -> None:
    assert codec.decode("UpdateItem", 200, {}, b"{}") == {}
    assert codec.decode("GetItem", 200, {}, b"{}") == {}


def test_item_operations_retry_quickly_and_table_operations_use_the_default() -> None:
    policy = RetryPolicy()
    assert policy.settings_for("UpdateItem", "dynamodb") is DYNAMODB_RETRY_SETTINGS["UpdateItem"]
    assert policy.settings_for("UpdateItem", "dynamodb").base == 0.025
    assert policy.settings_for("CreateTable", "dynamodb") == RetrySettings()
    # Kinesis's FLIP-128 defaults do not leak into DynamoDB, nor the other way round.
    assert policy.settings_for("UpdateItem") == RetrySettings()
    mine = RetrySettings(max_retries=1)
    assert RetryPolicy(overrides={"GetItem": mine}).settings_for("GetItem", "dynamodb") is mine


def test_requests_are_signed_for_dynamodb() -> None:
    signer = Signer(Credentials("AKIDEXAMPLE", "secret"), "eu-west-1", "dynamodb")
    headers = signer.sign("https://dynamodb.eu-west-1.amazonaws.com/", {}, b"{}")
    assert "/eu-west-1/dynamodb/aws4_request" in headers["Authorization"]
    assert repr(signer) == "Signer(service='dynamodb', region='eu-west-1')"


def test_bad_client_arguments_fail_before_any_io_naming_the_option() -> None:
    with pytest.raises(errors.ConfigError, match="endpoint_url"):
        DynamoDBClient(endpoint_url="localhost:8000")
    with pytest.raises(errors.ConfigError, match="region"):
        DynamoDBClient(region="")
    with pytest.raises(errors.ConfigError, match="credentials"):
        DynamoDBClient(credentials=("only-a-key",))  # type: ignore[arg-type]
    client = DynamoDBClient(region="eu-west-1", credentials=("AKID", "SECRET"))
    assert repr(client) == "DynamoDBClient(region='eu-west-1', endpoint_url=None)"
    assert "SECRET" not in repr(client)


@pytest.mark.anyio
async def test_a_client_not_opened_says_how_to_open_it(anyio_backend: str) -> None:
    with pytest.raises(RuntimeError, match=r"use 'async with DynamoDBClient\(\.\.\.\)'"):
        await DynamoDBClient(credentials=("a", "b")).call("ListTables", {})
