"""Bad input gets a typed error at put (or at open), and nothing else is affected."""

from __future__ import annotations

from typing import Any

import anyio
import botocore.exceptions
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.sync import SyncProducer
from tests.boto import boto3_kinesis

pytestmark = pytest.mark.anyio

ONE_MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("data", "key", "hash_key", "error", "match"),
    [
        (b"", "k", None, errors.ValidationError, "empty"),
        ("text", "k", None, errors.ValidationError, "bytes"),
        (None, "k", None, errors.ValidationError, "bytes"),
        (b"x" * ONE_MIB, "k", None, errors.RecordTooLargeError, "limit"),
        (b"x", "", None, errors.ValidationError, "partition key"),
        (b"x", "k" * 257, None, errors.ValidationError, "partition key"),
        (b"x", "\ud800", None, errors.ValidationError, "surrogate"),
        (b"x", 7, None, errors.ValidationError, "partition_key"),
        (b"x", "k", "abc", errors.ValidationError, "explicit hash key"),
        (b"x", "k", "-1", errors.ValidationError, "explicit hash key"),
        (b"x", "k", "01", errors.ValidationError, "explicit hash key"),
        (b"x", "k", str(2**128), errors.ValidationError, "explicit hash key"),
        (b"x", "k", 5, errors.ValidationError, "explicit_hash_key"),
    ],
    ids=[
        "empty-data",
        "str-data",
        "none-data",
        "oversized",
        "empty-key",
        "257-char-key",
        "lone-surrogate-key",
        "int-key",
        "letters-hash-key",
        "negative-hash-key",
        "leading-zero-hash-key",
        "hash-key-above-2**128",
        "int-hash-key",
    ],
)
async def test_bad_records_raise_typed_errors_and_leave_the_producer_working(
    client: KinesisClient,
    stream_name: str,
    data: Any,
    key: Any,
    hash_key: Any,
    error: type[Exception],
    match: str,
) -> None:
    await client.create_stream(stream_name, 1)
    async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
        with pytest.raises(error, match=match):
            await producer.put(data, key, hash_key)
        assert producer.metrics.records_put == 0
        assert producer.metrics.outstanding_records == 0
        good = await producer.put(b"fine", "k")
        await producer.flush()
    assert good.result().shard_id


async def test_the_size_limit_counts_the_partition_key_and_allows_the_maximum(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
        with pytest.raises(errors.RecordTooLargeError, match=stream_name):
            await producer.put(b"x" * (ONE_MIB - 1), "kk")
        biggest = await producer.put(b"x" * (ONE_MIB - 2), "kk")
    assert biggest.result().sub_sequence_number == 0


async def test_explicit_hash_keys_route_records(client: KinesisClient, stream_name: str) -> None:
    await client.create_stream(stream_name, 2)
    async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
        shard_map = producer.shard_map
        assert shard_map is not None
        low = await producer.put(b"low", "same", "0")
        high = await producer.put(b"high", "same", str(2**128 - 1))
    assert low.result().shard_id == shard_map.shard_for_hash_key(0)
    assert high.result().shard_id == shard_map.shard_for_hash_key(2**128 - 1)
    assert low.result().shard_id != high.result().shard_id


async def test_an_unknown_stream_fails_at_open(client: KinesisClient) -> None:
    with pytest.raises(errors.ResourceNotFoundError):
        async with Producer(client, "no-such-stream"):
            pass


def test_bad_arguments_fail_before_any_network_call() -> None:
    client = KinesisClient("us-east-1", "http://127.0.0.1:1", credentials=("a", "b"))
    with pytest.raises(errors.ConfigError, match="stream"):
        Producer(client, "")
    with pytest.raises(errors.ConfigError, match="ProducerConfig"):
        Producer(client, "s", config={"linger": 1})  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError, match="stream_info must be a StreamInfo"):
        Producer(client, "s", stream_info={"max_record_bytes": 1})  # type: ignore[arg-type]


async def test_put_before_open_is_refused(client: KinesisClient) -> None:
    producer = Producer(client, "s")
    with pytest.raises(errors.ProducerClosedError, match="async with"):
        await producer.put(b"x", "k")


async def test_item_15_a_partition_key_the_service_refuses_is_refused_at_put_first(
    client: KinesisClient, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """129 emoji are 258 UTF-16 code units: the service refuses them (checked here against the
    local server with boto3), so put refuses them first, instead of failing the producer."""
    await client.create_stream(stream_name, 1)
    too_long, longest = "😀" * 129, "😀" * 128

    def service_answers(key: str) -> str:
        kinesis = boto3_kinesis(local_kinesis)
        try:
            kinesis.put_record(StreamName=stream_name, Data=b"x", PartitionKey=key)
        except botocore.exceptions.ClientError as exc:
            return str(exc.response["Error"]["Code"])
        return "accepted"

    assert await anyio.to_thread.run_sync(service_answers, longest) == "accepted"
    assert "Exception" in await anyio.to_thread.run_sync(service_answers, too_long)
    async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
        with pytest.raises(errors.ValidationError, match=r"UTF-16 code units.*got 258"):
            await producer.put(b"x", too_long)
        assert producer.metrics.records_put == 0
        good = await producer.put(b"x", longest)
    assert good.result().shard_id


@pytest.mark.parametrize(
    "name",
    ["bad name!", "s" * 200, "ü", "", 7],
    ids=["space", "200-chars", "non-ascii", "empty", "int"],
)
def test_item_16_stream_names_are_checked_before_any_call(name: object) -> None:
    """'bad name!', a long name or 'ü' reached the server first; the service's rule is 1-128
    characters of [a-zA-Z0-9_.-]. No server here: a call would fail differently."""
    client = KinesisClient("us-east-1", "http://127.0.0.1:1", credentials=("a", "b"))
    with pytest.raises(errors.ConfigError, match="stream must be a stream name of 1 to 128"):
        Producer(client, name)  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError, match="stream must be a stream name of 1 to 128"):
        SyncProducer(name, endpoint_url="http://127.0.0.1:1", credentials=("a", "b"))  # type: ignore[arg-type]
    Producer(client, "s" * 128)  # the longest name is fine


@pytest.mark.parametrize(
    ("stream", "says"),
    [
        ("arn:aws:kinesis:us-east-1:12345:stream/s", "stream: not a Kinesis stream ARN"),
        ("arn:aws:s3:::bucket", "stream: the ARN of another service"),
        (
            "arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c:1700000000",
            "stream: the ARN of a stream's consumer",
        ),
        ("arn:aws:kinesis:eu-west-1:123456789012:stream/s", "in region eu-west-1, but the client"),
    ],
    ids=["malformed", "other-service", "consumer", "other-region"],
)
def test_issue_17_stream_arns_are_checked_before_any_call(stream: str, says: str) -> None:
    """No server listens on port 1: any call would fail with a TransportError instead."""
    client = KinesisClient("us-east-1", "http://127.0.0.1:1", credentials=("a", "b"))
    with pytest.raises(errors.ConfigError, match=says):
        Producer(client, stream)
    with pytest.raises(errors.ConfigError, match=says):
        SyncProducer(stream, endpoint_url="http://127.0.0.1:1", credentials=("a", "b"))
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/s"
    assert Producer(client, arn).stream == arn  # a good ARN is taken as given
