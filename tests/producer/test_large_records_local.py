"""Records up to 10 MiB, on a stream whose ``MaxRecordSizeInKiB`` was raised to 10240.

The local server implements UpdateMaxRecordSize and stores such records, so these run end to
end: the producer takes the limit from DescribeStreamSummary, sends the record alone in its
call (above the default call size of 5 MiB, within PutRecords' 10 MiB), and both consumers
(GetRecords and SubscribeToShard) hand it back whole. A record past the stream's limit fails
at ``put`` with RecordTooLargeError, before any call.
"""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors import (
    Consumer,
    ConsumerConfig,
    KinesisClient,
    LocalKinesis,
    Producer,
    StartingPosition,
    errors,
)

pytestmark = [pytest.mark.anyio, pytest.mark.local_kinesis]

MIB = 1024 * 1024
# Near the largest record of a 10 MiB stream (data and partition key count toward the
# limit). The local server answers GetRecords with HTTP 500 for a record within about 60 bytes
# of 10 MiB (boto3 meets the same), so the largest here stays 128 bytes under; the producer's
# own check is tested at the exact limit below.
SIZES = (5 * MIB, 10 * MIB - 128)


async def allow_ten_mib(client: KinesisClient, stream: str) -> None:
    await client.create_stream(stream, 1)
    summary = await client.call("DescribeStreamSummary", {"StreamName": stream})
    arn = summary["StreamDescriptionSummary"]["StreamARN"]
    await client.call("UpdateMaxRecordSize", {"StreamARN": arn, "MaxRecordSizeInKiB": 10240})


async def put_large(client: KinesisClient, stream: str) -> None:
    async with Producer(client, stream) as producer:
        for index, size in enumerate(SIZES):
            handle = await producer.put(bytes([index]) * size, f"k{index}")
            result = await handle  # one at a time: each is alone in its call
            assert result.shard_id == "shardId-000000000000"
        with pytest.raises(errors.RecordTooLargeError, match="10485760-byte limit"):
            await producer.put(b"x" * (10 * MIB), "k")  # with its key, one byte too many
        assert producer.metrics.records_sent == len(SIZES)


async def read_sizes(client: KinesisClient, stream: str, config: ConsumerConfig) -> list[int]:
    sizes: list[int] = []
    with anyio.fail_after(60):
        async with Consumer(client, stream, config) as records:
            async for batch in records:
                for item in batch.arrow.column("data").to_pylist():
                    assert item == bytes([len(sizes)]) * len(item)  # the index it was put at
                    sizes.append(len(item))
                if len(sizes) >= len(SIZES):
                    break
    return sizes


async def test_a_10_mib_stream_carries_5_and_10_mib_records_through_get_records(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with local_kinesis.client(tls=False) as client:
        await allow_ten_mib(client, stream_name)
        await put_large(client, stream_name)
        config = ConsumerConfig(start=StartingPosition.trim_horizon())
        assert await read_sizes(client, stream_name, config) == list(SIZES)


async def test_a_10_mib_stream_carries_5_and_10_mib_records_through_a_subscription(
    client: KinesisClient, stream_name: str
) -> None:
    await allow_ten_mib(client, stream_name)
    await put_large(client, stream_name)
    config = ConsumerConfig(
        mode="efo", consumer_name="large", start=StartingPosition.trim_horizon()
    )
    assert await read_sizes(client, stream_name, config) == list(SIZES)


async def test_a_record_over_the_default_1_mib_fails_at_put_before_any_call(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 1)
        async with Producer(client, stream_name) as producer:
            with pytest.raises(errors.RecordTooLargeError, match="1048576-byte limit"):
                await producer.put(b"x" * MIB, "k")
            assert producer.metrics.records_sent == 0
