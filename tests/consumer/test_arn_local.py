"""Streams by ARN, against the local server: produced and consumed by ARN, every
record once; positions written by name resume by ARN and back; bad input fails before a call.

The local server's stream ARNs are ``arn:aws:kinesis:<client region>:000000000000:stream/<n>``
(read from DescribeStreamSummary, never assumed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.consumer import (
    Consumer,
    ConsumerConfig,
    StartingPosition,
    register_consumers,
)
from tests.faults import FaultProxy, Request

from .helpers import Row, assert_in_shard_order, rows

pytestmark = pytest.mark.anyio

#: The operations that name the stream, and so must carry StreamARN for a stream given by ARN.
STREAM_CALLS = {"DescribeStreamSummary", "ListShards", "GetShardIterator", "PutRecords"}


async def create_with_arn(client: KinesisClient, name: str, shards: int = 2) -> str:
    await client.create_stream(name, shards)
    reply = await client.call("DescribeStreamSummary", {"StreamName": name})
    arn: str = reply["StreamDescriptionSummary"]["StreamARN"]
    assert arn.endswith(f":stream/{name}") and ":kinesis:" in arn
    return arn


async def produce(client: KinesisClient, stream: str, numbers: Iterable[int]) -> None:
    """Put the numbers; the long linger keeps each shard's records in one KPL aggregate (the
    exit flushes them at once)."""
    async with Producer(client, stream, ProducerConfig(linger=5.0)) as producer:
        for n in numbers:
            await producer.put(b"%d" % n, f"key-{n % 7}")


def config(mode: str, **options: Any) -> ConsumerConfig:
    return ConsumerConfig(
        mode=mode,  # type: ignore[arg-type]
        start=StartingPosition.trim_horizon(),
        shard_discovery_interval=0.5,
        **options,
    )


async def read(
    client: KinesisClient, stream: str, settings: ConsumerConfig, count: int
) -> tuple[list[Row], set[str], dict[str, Any]]:
    """``count`` records (committed), the batches' stream names, and the positions after."""
    names: set[str] = set()
    seen: list[Row] = []
    with anyio.fail_after(60):
        async with Consumer(client, stream, settings) as consumer:
            async for batch in consumer:
                names.add(batch.stream)
                seen.extend(rows(batch))
                consumer.commit(batch)
                if len(seen) >= count:
                    break
            positions = consumer.positions()
    assert_in_shard_order(seen)
    return seen, names, positions


def numbers(seen: list[Row]) -> list[int]:
    return sorted(int(row.data) for row in seen)


async def test_produced_and_consumed_by_arn_every_call_names_the_stream_by_arn(
    local_kinesis: LocalKinesis, client: KinesisClient, stream_name: str
) -> None:
    arn = await create_with_arn(client, stream_name)
    requests: list[Request] = []

    def record(request: Request) -> None:
        requests.append(request)

    with FaultProxy(local_kinesis.plain_port, record) as proxy:
        async with KinesisClient(
            region=local_kinesis.region,
            endpoint_url=proxy.endpoint_url,
            credentials=local_kinesis.credentials,
        ) as plain:
            await produce(plain, arn, range(120))
            seen, names, positions = await read(plain, arn, config("polling"), 120)
    assert numbers(seen) == list(range(120))  # every record, once
    assert names == {stream_name}  # batches (and the RECORD_SCHEMA column) carry the name
    assert list(positions["streams"]) == [stream_name]
    assert positions["identity"][stream_name]["arn"] == arn
    stream_calls = [r for r in requests if r.target in STREAM_CALLS]
    assert {r.target for r in stream_calls} == STREAM_CALLS
    for request in stream_calls:
        body = request.json()
        assert body.get("StreamARN") == arn and "StreamName" not in body, request.target
    get_records = [r.json() for r in requests if r.target == "GetRecords"]
    assert get_records and all(body.get("StreamARN") == arn for body in get_records)


@pytest.mark.parametrize("mode", ["polling", "efo"])
@pytest.mark.parametrize("first", ["name", "arn"])
async def test_positions_written_in_one_form_resume_in_the_other_without_repeat_or_skip(
    client: KinesisClient, stream_name: str, mode: str, first: str
) -> None:
    arn = await create_with_arn(client, stream_name)
    forms = {"name": stream_name, "arn": arn}
    then = forms["arn" if first == "name" else "name"]
    await produce(client, forms[first], range(100))
    # Commit part of the first batch and stop: a position inside a KPL aggregate (the producer
    # aggregates by default), the other shard not started.
    with anyio.fail_after(60):
        async with Consumer(client, forms[first], config(mode)) as consumer:
            batch = await consumer.__anext__()
            part = batch.slice(0, len(batch) // 2)
            consumer.commit(part)
            positions = consumer.positions()
    seen = rows(part)
    assert batch.stream == stream_name and 0 < len(seen) < len(batch)
    committed = positions["streams"][stream_name][batch.shard_id]
    assert committed["sub_sequence_number"] > 0  # inside an aggregate
    assert list(positions["streams"]) == [stream_name]  # one key, whichever form
    assert positions["identity"][stream_name]["arn"] == arn

    await produce(client, then, range(100, 140))
    rest = 140 - len(seen)
    resumed, names, after = await read(client, then, config(mode, positions=positions), rest)
    # A repeat shows as a number twice, a skip as one missing (or as a read that never ends).
    assert sorted(numbers(seen) + numbers(resumed)) == list(range(140))
    assert names == {stream_name}
    assert list(after["streams"]) == [stream_name]
    assert after["identity"] == positions["identity"]


async def test_eager_registration_by_arn_is_keyed_by_name_and_accepted_under_either_key(
    client: KinesisClient, stream_name: str
) -> None:
    arn = await create_with_arn(client, stream_name, shards=1)
    await produce(client, arn, range(10))
    with anyio.fail_after(30):
        registered = await register_consumers(client, arn, "arn-app")
    assert list(registered) == [stream_name]
    assert registered[stream_name].startswith(f"{arn}/consumer/arn-app:")
    for keyed in (registered, {arn: registered[stream_name]}):
        settings = config("efo", registration="eager", consumer_arns=keyed)
        seen, _, _ = await read(client, arn, settings, 10)
        assert numbers(seen) == list(range(10))


async def test_a_document_of_another_accounts_stream_of_that_name_is_refused(
    client: KinesisClient, stream_name: str
) -> None:
    arn = await create_with_arn(client, stream_name, shards=1)
    await produce(client, stream_name, range(3))
    _, _, positions = await read(client, stream_name, config("polling"), 3)
    other = arn.replace(":000000000000:", ":111122223333:")
    positions["identity"][stream_name]["arn"] = other
    with anyio.fail_after(30), pytest.raises(errors.PositionsMismatchError, match="111122223333"):
        async with Consumer(client, arn, config("polling", positions=positions)):
            pass


BAD_STREAMS = [
    ("arn:aws:kinesis:us-east-1:12345:stream/s", "streams: not a Kinesis stream ARN"),
    ("arn:aws:sqs:us-east-1:123456789012:q", "streams: the ARN of another service"),
    (
        "arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c:1700000000",
        "streams: the ARN of a stream's consumer",
    ),
    ("arn:aws:kinesis:eu-west-1:123456789012:stream/s", "is in region eu-west-1, but the client"),
    (["s", "arn:aws:kinesis:us-east-1:123456789012:stream/s"], "must not repeat a stream"),
]


@pytest.mark.parametrize(("streams", "says"), BAD_STREAMS)
async def test_bad_streams_fail_before_any_call(
    local_kinesis: LocalKinesis, streams: Any, says: str
) -> None:
    with FaultProxy(local_kinesis.plain_port) as proxy:
        async with KinesisClient(
            region="us-east-1",
            endpoint_url=proxy.endpoint_url,
            credentials=local_kinesis.credentials,
        ) as plain:
            with pytest.raises(errors.ConfigError, match=says):
                Consumer(plain, streams, config("polling"))
            single = streams if isinstance(streams, str) else None
            if single is not None:
                with pytest.raises(errors.ConfigError, match=says.replace("streams", "stream")):
                    Producer(plain, single)
        assert proxy.stats.requests == 0
