"""A hostile server, through the fault proxy: every operation the library calls.

For each, one garbled 200 (every kind of :data:`tests.faults.GARBLED_BODIES`) is retried and
the call returns the server's real answer; the same reply forever ends in a
MalformedReplyError naming the operation after exactly the policy's attempts (a fast policy
here; the default bounds are in docs/architecture.md, "Retries", and checked in test_retry).
SubscribeToShard's events are not HTTP/1.1 replies the proxy can alter: test_records feeds
them garbled.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import pytest

from kinesis_actors import ClientConfig, KinesisClient, LocalKinesis, errors
from kinesis_actors.client import DEFAULT_RETRY_SETTINGS, RetryPolicy, RetrySettings
from tests.faults import GARBLED_BODIES, Fault, FaultProxy, Request, Rewrite, garbled

pytestmark = pytest.mark.anyio

FAST = RetrySettings(max_retries=3, base=0.001, max=0.005)
#: A garbled reply forever fails within this, with FAST retries (generous: a loaded machine).
BOUND = 5.0


def fast_client(proxy: FaultProxy, local_kinesis: LocalKinesis) -> KinesisClient:
    overrides = dict.fromkeys(DEFAULT_RETRY_SETTINGS, FAST)
    return KinesisClient(
        region=local_kinesis.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ClientConfig(retry=RetryPolicy(overrides=overrides, default=FAST)),
    )


class Inject:
    """The proxy's decision: ``fault`` for the next ``times`` requests of ``target`` (-1:
    for ever), every other request forwarded untouched."""

    def __init__(self) -> None:
        self.target = ""
        self.fault: Fault = None
        self.times = 0

    def __call__(self, request: Request) -> Fault:
        if request.target != self.target or self.times == 0:
            return None
        self.times -= 1
        return self.fault

    def set(self, target: str, fault: Fault, times: int) -> None:
        self.target, self.fault, self.times = target, fault, times


@dataclass
class World:
    kinesis: KinesisClient
    stream: str
    stream_arn: str
    consumer_arn: str
    round: int = 0


async def _world(kinesis: KinesisClient, stream: str) -> World:
    await kinesis.create_stream(stream, 1)
    await kinesis.call(
        "PutRecords",
        {
            "StreamName": stream,
            "Records": [{"Data": b"r%d" % i, "PartitionKey": "k"} for i in range(3)],
        },
    )
    summary = await kinesis.call("DescribeStreamSummary", {"StreamName": stream})
    arn = summary["StreamDescriptionSummary"]["StreamARN"]
    registered = await kinesis.call(
        "RegisterStreamConsumer", {"StreamARN": arn, "ConsumerName": "reader"}
    )
    consumer_arn = registered["Consumer"]["ConsumerARN"]
    with anyio.fail_after(10):
        await kinesis.wait_for_consumer(consumer_arn)
    return World(kinesis, stream, arn, consumer_arn)


async def _iterator(world: World) -> str:
    result = await world.kinesis.call(
        "GetShardIterator",
        {
            "StreamName": world.stream,
            "ShardId": "shardId-000000000000",
            "ShardIteratorType": "TRIM_HORIZON",
        },
    )
    iterator: str = result["ShardIterator"]
    return iterator


async def list_shards(world: World) -> None:
    result = await world.kinesis.call("ListShards", {"StreamName": world.stream})
    assert [shard["ShardId"] for shard in result["Shards"]] == ["shardId-000000000000"]


async def get_shard_iterator(world: World) -> None:
    assert await _iterator(world)


async def get_records(world: World) -> None:
    iterator = await _iterator(world)
    result = await world.kinesis.call("GetRecords", {"ShardIterator": iterator})
    assert [record["Data"] for record in result["Records"]] == [b"r0", b"r1", b"r2"]
    assert result["NextShardIterator"]


async def describe_stream_summary(world: World) -> None:
    result = await world.kinesis.call("DescribeStreamSummary", {"StreamName": world.stream})
    assert result["StreamDescriptionSummary"]["StreamARN"] == world.stream_arn


async def describe_stream_consumer(world: World) -> None:
    result = await world.kinesis.call("DescribeStreamConsumer", {"ConsumerARN": world.consumer_arn})
    assert result["ConsumerDescription"]["ConsumerName"] == "reader"


async def register_stream_consumer(world: World) -> None:
    world.round += 1
    name = f"new-{world.round}"
    result = await world.kinesis.call(
        "RegisterStreamConsumer", {"StreamARN": world.stream_arn, "ConsumerName": name}
    )
    assert result["Consumer"]["ConsumerName"] == name


async def deregister_stream_consumer(world: World) -> None:
    world.round += 1
    name = f"old-{world.round}"
    kinesis = world.kinesis
    by_name = {"StreamARN": world.stream_arn, "ConsumerName": name}
    registered = await kinesis.call("RegisterStreamConsumer", by_name)
    with anyio.fail_after(10):
        await kinesis.wait_for_consumer(registered["Consumer"]["ConsumerARN"])
    assert await kinesis.call("DeregisterStreamConsumer", by_name) == {}
    try:
        described = await kinesis.call("DescribeStreamConsumer", by_name)
    except errors.ResourceNotFoundError:
        return
    assert described["ConsumerDescription"]["ConsumerStatus"] == "DELETING"


async def list_stream_consumers(world: World) -> None:
    result = await world.kinesis.call("ListStreamConsumers", {"StreamARN": world.stream_arn})
    assert "reader" in [consumer["ConsumerName"] for consumer in result["Consumers"]]


async def put_records(world: World) -> None:
    kinesis = world.kinesis
    request = kinesis.codec.encode_put_records(world.stream, [(b"p", "k", None)] * 2)
    result = await kinesis.send(request)
    assert [entry["ShardId"] for entry in result["Records"]] == ["shardId-000000000000"] * 2


Scenario = Callable[[World], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {
    "ListShards": list_shards,
    "GetShardIterator": get_shard_iterator,
    "GetRecords": get_records,
    "DescribeStreamSummary": describe_stream_summary,
    "DescribeStreamConsumer": describe_stream_consumer,
    "RegisterStreamConsumer": register_stream_consumer,
    "DeregisterStreamConsumer": deregister_stream_consumer,
    "ListStreamConsumers": list_stream_consumers,
    "PutRecords": put_records,
}


def _kinds(operation: str) -> list[str]:
    # An empty body is DeregisterStreamConsumer's real answer (it has no output): believed.
    return [
        k for k in GARBLED_BODIES if not (operation == "DeregisterStreamConsumer" and k == "empty")
    ]


@pytest.mark.parametrize("operation", sorted(SCENARIOS))
async def test_a_garbled_reply_is_retried_and_the_same_reply_forever_is_typed(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str, operation: str
) -> None:
    inject = Inject()
    proxy.decide = inject
    scenario = SCENARIOS[operation]
    async with fast_client(proxy, local_kinesis) as kinesis:
        world = await _world(kinesis, stream_name)
        for kind in _kinds(operation):
            # Once: retried, and the call returns the server's real answer.
            malformed, retries = (
                kinesis.statistics().malformed_replies,
                kinesis.statistics().retries,
            )
            inject.set(operation, garbled(kind), 1)
            await scenario(world)
            assert inject.times == 0, kind  # the fault was met
            assert kinesis.statistics().malformed_replies == malformed + 1, kind
            assert kinesis.statistics().retries == retries + 1, kind

            # For ever: a typed error naming the operation, after every attempt, bounded.
            requests = proxy.stats.by_target.get(operation, 0)
            inject.set(operation, garbled(kind), -1)
            started = time.monotonic()
            with pytest.raises(errors.MalformedReplyError) as caught:
                await scenario(world)
            elapsed = time.monotonic() - started
            inject.set("", None, 0)
            assert caught.value.operation == operation, kind
            assert str(caught.value).startswith(f"{operation}: HTTP 200 with a malformed"), kind
            assert proxy.stats.by_target[operation] - requests == FAST.max_retries + 1, kind
            assert elapsed < BOUND, kind


def _drop_field(name: str) -> Callable[[bytes], bytes]:
    def transform(body: bytes) -> bytes:
        document = json.loads(body)
        document.pop(name, None)
        return json.dumps(document).encode()

    return transform


@pytest.mark.parametrize(
    ("operation", "field"),
    [
        ("GetRecords", "NextShardIterator"),  # the false end of an open shard
        ("GetRecords", "Records"),
        ("ListShards", "Shards"),
        ("GetShardIterator", "ShardIterator"),
        ("DescribeStreamSummary", "StreamDescriptionSummary"),
        ("PutRecords", "Records"),
    ],
)
async def test_a_reply_missing_a_used_field_is_retried_then_typed(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str, operation: str, field: str
) -> None:
    inject = Inject()
    proxy.decide = inject
    async with fast_client(proxy, local_kinesis) as kinesis:
        world = await _world(kinesis, stream_name)
        inject.set(operation, Rewrite(_drop_field(field)), 1)
        await SCENARIOS[operation](world)
        assert inject.times == 0
        inject.set(operation, Rewrite(_drop_field(field)), -1)
        with pytest.raises(errors.MalformedReplyError, match=f"{field} is missing") as caught:
            await SCENARIOS[operation](world)
    assert caught.value.operation == operation
