"""The client against the real local Kinesis server (kinesis-mock), over HTTP/2."""

from __future__ import annotations

import dataclasses
import datetime as dt

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, errors

pytestmark = pytest.mark.anyio


async def _arn(client: KinesisClient, stream: str) -> str:
    summary = await client.call("DescribeStreamSummary", {"StreamName": stream})
    arn: str = summary["StreamDescriptionSummary"]["StreamARN"]
    return arn


async def _active_consumer(client: KinesisClient, stream: str, name: str) -> str:
    registered = await client.call(
        "RegisterStreamConsumer", {"StreamARN": await _arn(client, stream), "ConsumerName": name}
    )
    consumer_arn: str = registered["Consumer"]["ConsumerARN"]
    with anyio.fail_after(10):
        await client.wait_for_consumer(consumer_arn)
    return consumer_arn


async def test_stream_lifecycle(client: KinesisClient, stream_name: str) -> None:
    await client.create_stream(stream_name, 2)
    summary = await client.wait_for_stream(stream_name)
    assert summary["OpenShardCount"] == 2
    described = await client.call("DescribeStream", {"StreamName": stream_name})
    assert described["StreamDescription"]["StreamStatus"] == "ACTIVE"
    assert isinstance(described["StreamDescription"]["StreamCreationTimestamp"], dt.datetime)
    # The server is shared by the whole run, so the list is paged (100 names a page).
    names: list[str] = []
    params: dict[str, object] = {}
    while True:
        listed = await client.call("ListStreams", params)
        names.extend(listed["StreamNames"])
        if not listed["HasMoreStreams"]:
            break
        params = {"ExclusiveStartStreamName": listed["StreamNames"][-1]}
    assert stream_name in names
    await client.delete_stream(stream_name)
    with pytest.raises(errors.ResourceNotFoundError):
        await client.call("DescribeStreamSummary", {"StreamName": stream_name})


async def test_put_then_get_records_round_trip(client: KinesisClient, stream_name: str) -> None:
    await client.create_stream(stream_name, 1)
    single = await client.call(
        "PutRecord", {"StreamName": stream_name, "Data": b"\x00first", "PartitionKey": "a"}
    )
    batch = await client.call(
        "PutRecords",
        {
            "StreamName": stream_name,
            "Records": [{"Data": bytes([i]) * 10, "PartitionKey": f"k{i}"} for i in range(20)],
        },
    )
    assert batch["FailedRecordCount"] == 0
    assert len(batch["Records"]) == 20
    iterator = await client.call(
        "GetShardIterator",
        {
            "StreamName": stream_name,
            "ShardId": single["ShardId"],
            "ShardIteratorType": "TRIM_HORIZON",
        },
    )
    result = await client.call("GetRecords", {"ShardIterator": iterator["ShardIterator"]})
    records = result["Records"]
    assert [r["Data"] for r in records] == [b"\x00first"] + [bytes([i]) * 10 for i in range(20)]
    assert records[0]["SequenceNumber"] == single["SequenceNumber"]
    assert records[0]["ApproximateArrivalTimestamp"].tzinfo is dt.UTC
    assert result["NextShardIterator"]
    assert "MillisBehindLatest" in result
    # The same page with arrival times as epoch seconds (what the consumer's readers ask for).
    again = await client.call(
        "GetRecords", {"ShardIterator": iterator["ShardIterator"]}, epoch_timestamps=True
    )
    stamps = [r["ApproximateArrivalTimestamp"] for r in again["Records"]]
    assert [type(stamp) for stamp in stamps] == [float] * 21
    assert stamps == [r["ApproximateArrivalTimestamp"].timestamp() for r in records]
    assert [r["Data"] for r in again["Records"]] == [r["Data"] for r in records]


async def test_list_shards_paginates_with_a_small_page(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 5)
    seen: list[str] = []
    page = await client.call("ListShards", {"StreamName": stream_name, "MaxResults": 2})
    pages = 1
    while True:
        seen.extend(shard["ShardId"] for shard in page["Shards"])
        token = page.get("NextToken")
        if not token:
            break
        page = await client.call("ListShards", {"NextToken": token, "MaxResults": 2})
        pages += 1
    assert pages == 3
    assert seen == [f"shardId-{i:012d}" for i in range(5)]


async def test_consumer_registration_lifecycle(client: KinesisClient, stream_name: str) -> None:
    # A name no other stream of the run has: kinesis-mock finishes a deregistration by
    # removing the consumer of that name from the first stream it finds holding one, and
    # test_hostile_server.py leaves "reader" consumers on its streams (with that file run
    # first on the same server, this stream kept its consumer for good).
    name = f"reader-{stream_name}"
    await client.create_stream(stream_name, 1)
    arn = await _arn(client, stream_name)
    registered = await client.call(
        "RegisterStreamConsumer", {"StreamARN": arn, "ConsumerName": name}
    )
    consumer_arn = registered["Consumer"]["ConsumerARN"]
    with anyio.fail_after(10):
        described = await client.wait_for_consumer(consumer_arn)
    assert described["ConsumerName"] == name
    listed = await client.call("ListStreamConsumers", {"StreamARN": arn})
    assert [c["ConsumerName"] for c in listed["Consumers"]] == [name]
    await client.call("DeregisterStreamConsumer", {"ConsumerARN": consumer_arn})
    with anyio.fail_after(10):
        while True:
            listed = await client.call("ListStreamConsumers", {"StreamARN": arn})
            if not listed["Consumers"]:
                break
            await anyio.sleep(0.05)


async def test_subscribe_to_shard_streams_records_over_http2(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    arn = await _arn(client, stream_name)
    consumer = await client.call(
        "RegisterStreamConsumer", {"StreamARN": arn, "ConsumerName": "efo"}
    )
    consumer_arn = consumer["Consumer"]["ConsumerARN"]
    with anyio.fail_after(10):
        await client.wait_for_consumer(consumer_arn)
    for i in range(3):
        await client.call(
            "PutRecord", {"StreamName": stream_name, "Data": b"before-%d" % i, "PartitionKey": "k"}
        )
    received: list[bytes] = []
    with anyio.fail_after(30):
        async with client.subscribe_to_shard(
            consumer_arn, "shardId-000000000000", {"Type": "TRIM_HORIZON"}
        ) as subscription:
            assert subscription.http_version == "HTTP/2"
            async for event in subscription:
                received.extend(record["Data"] for record in event["Records"])
                assert event["ContinuationSequenceNumber"]
                if len(received) == 3:
                    # Records put while the subscription is open arrive on it too.
                    await client.call(
                        "PutRecords",
                        {
                            "StreamName": stream_name,
                            "Records": [
                                {"Data": b"after-%d" % i, "PartitionKey": "k"} for i in range(2)
                            ],
                        },
                    )
                if len(received) >= 5:
                    break
    assert received == [b"before-0", b"before-1", b"before-2", b"after-0", b"after-1"]
    assert client.statistics().subscriptions == 1


async def test_unknown_stream_is_a_typed_error(client: KinesisClient) -> None:
    with pytest.raises(errors.ResourceNotFoundError) as caught:
        await client.call("ListShards", {"StreamName": "no-such-stream"})
    assert caught.value.code == "ResourceNotFoundException"
    assert caught.value.operation == "ListShards"
    assert client.statistics().retries == 0  # a missing stream is not worth a retry


async def test_invalid_argument_is_a_typed_error(client: KinesisClient, stream_name: str) -> None:
    await client.create_stream(stream_name, 1)
    # Well-formed for the model, rejected by the service: InvalidArgumentException.
    with pytest.raises(errors.ValidationError) as caught:
        await client.call(
            "GetShardIterator",
            {
                "StreamName": stream_name,
                "ShardId": "shardId-000000000000",
                "ShardIteratorType": "AT_SEQUENCE_NUMBER",
                "StartingSequenceNumber": "not-a-number",
            },
        )
    assert caught.value.code == "InvalidArgumentException"
    # Malformed for the model: rejected before it leaves the process.
    attempts = client.statistics().attempts
    with pytest.raises(errors.ValidationError, match="ShardCount"):
        await client.call("CreateStream", {"StreamName": "x", "ShardCount": "two"})
    assert client.statistics().attempts == attempts


async def test_plain_http_endpoint_works_too(local_kinesis: LocalKinesis) -> None:
    async with local_kinesis.client(tls=False) as plain:
        result = await plain.call("ListStreams", {})
    assert "StreamNames" in result


async def test_a_closed_client_says_so(local_kinesis: LocalKinesis) -> None:
    kinesis = local_kinesis.client()
    with pytest.raises(RuntimeError, match="not open"):
        await kinesis.call("ListStreams", {})


async def test_a_subscription_carries_far_more_than_one_default_window(
    client: KinesisClient, stream_name: str
) -> None:
    """Regression: with the window raised by WINDOW_UPDATE only (httpcore's way), the local
    server stops every subscription after 49,152 bytes. The window goes in SETTINGS here."""
    await client.create_stream(stream_name, 1)
    consumer_arn = await _active_consumer(client, stream_name, "bulk")
    for batch in range(6):
        await client.call(
            "PutRecords",
            {
                "StreamName": stream_name,
                "Records": [
                    {"Data": bytes([batch]) * 1000, "PartitionKey": str(i)} for i in range(100)
                ],
            },
        )
    count = 0
    with anyio.fail_after(30):
        async with client.subscribe_to_shard(
            consumer_arn, "shardId-000000000000", {"Type": "TRIM_HORIZON"}
        ) as subscription:
            async for event in subscription:
                count += len(event["Records"])
                if count >= 600:
                    break
    assert count == 600
    assert subscription.bytes_received > 600_000  # twelve times the old stall point


async def test_closing_a_subscription_early_leaves_the_next_one_healthy(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 2)
    consumer_arn = await _active_consumer(client, stream_name, "early")
    await client.call(
        "PutRecords",
        {
            "StreamName": stream_name,
            "Records": [{"Data": b"x" * 500, "PartitionKey": str(i)} for i in range(200)],
        },
    )
    with anyio.fail_after(30):
        for shard in ("shardId-000000000000", "shardId-000000000001"):
            async with client.subscribe_to_shard(
                consumer_arn, shard, {"Type": "TRIM_HORIZON"}
            ) as subscription:
                async for event in subscription:
                    assert event["Records"]
                    break  # abandon the stream with data still in flight
    assert client.statistics().subscriptions == 2


async def test_large_responses_arrive_whole(client: KinesisClient, stream_name: str) -> None:
    await client.create_stream(stream_name, 1)
    for _ in range(4):
        await client.call(
            "PutRecords",
            {
                "StreamName": stream_name,
                "Records": [{"Data": b"y" * 200, "PartitionKey": str(i)} for i in range(500)],
            },
        )
    iterator = await client.call(
        "GetShardIterator",
        {
            "StreamName": stream_name,
            "ShardId": "shardId-000000000000",
            "ShardIteratorType": "TRIM_HORIZON",
        },
    )
    with anyio.fail_after(30):
        result = await client.call(
            "GetRecords", {"ShardIterator": iterator["ShardIterator"], "Limit": 2000}
        )
    assert len(result["Records"]) == 2000  # about 600 KB of JSON in one response


async def test_subscriptions_need_a_tls_endpoint(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with local_kinesis.client(tls=False) as plain:
        with pytest.raises(errors.ConfigError, match="https"):
            async with plain.subscribe_to_shard("arn", "shardId-000000000000", {"Type": "LATEST"}):
                pass


async def test_stats_is_a_frozen_snapshot_that_later_calls_do_not_change(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    before = client.statistics()
    await client.call("DescribeStreamSummary", {"StreamName": stream_name})
    after = client.statistics()
    assert after.calls == before.calls + 1
    assert after.attempts >= before.attempts + 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.calls = 0  # type: ignore[misc]
    await client.call("DescribeStreamSummary", {"StreamName": stream_name})
    assert after.calls == before.calls + 1  # a snapshot, not a view of the live counters
