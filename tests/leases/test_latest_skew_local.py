"""A skewed clock on the first ``LATEST`` reader: the pin it leaves for its heir is the
service's time, not its own, so an heir that takes over before the first checkpoint reads
every record written since the first reader started - a fast clock used to skip them."""

from __future__ import annotations

import time

import anyio
import pytest

from kinesis_actors import DynamoDBClient, KinesisClient
from kinesis_actors.consumer._group import saved_from_lease
from kinesis_actors.leases import LATEST, LeaseAcquired

from .helpers import PATIENCE, coordinator, events_until

pytestmark = pytest.mark.anyio


async def read_all(
    client: KinesisClient, stream: str, shard: str, params: dict[str, object]
) -> list[bytes]:
    """Every record from the position ``params`` to the shard's tip."""
    reply = await client.call(
        "GetShardIterator", {"StreamName": stream, "ShardId": shard, **params}
    )
    iterator = reply["ShardIterator"]
    found: list[bytes] = []
    while True:
        page = await client.call("GetRecords", {"ShardIterator": iterator})
        found.extend(record["Data"] for record in page["Records"])
        iterator = page["NextShardIterator"]
        if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
            return found


@pytest.mark.parametrize("skew", [30.0, -30.0], ids=["fast", "slow"])
async def test_a_skewed_clock_on_the_first_latest_reader_loses_no_record(
    dynamodb: DynamoDBClient,
    client: KinesisClient,
    stream_name: str,
    lease_table_name: str,
    monkeypatch: pytest.MonkeyPatch,
    skew: float,
) -> None:
    with anyio.fail_after(PATIENCE):
        await client.create_stream(stream_name, 1)
    shard = "shardId-000000000000"
    await client.call(
        "PutRecords",
        {"StreamName": stream_name, "Records": [{"Data": b"before", "PartitionKey": "k"}]},
    )
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew)  # this host's wall clock
    options = {"initial_position": LATEST}
    async with coordinator(
        dynamodb, client, lease_table_name, stream_name, "first", **options
    ) as first:
        (event,) = await events_until(first, lambda seen: len(seen) == 1)
        assert isinstance(event, LeaseAcquired) and event.latest_pinned_at is None
        # The first reader starts at the tip, reads a little, and is lost before its first
        # checkpoint (it leaves without releasing).
        await client.call(
            "GetShardIterator",
            {"StreamName": stream_name, "ShardId": shard, "ShardIteratorType": "LATEST"},
        )
        written = [f"after-{i}".encode() for i in range(20)]
        for data in written:
            await client.call(
                "PutRecords",
                {"StreamName": stream_name, "Records": [{"Data": data, "PartitionKey": "k"}]},
            )
    monkeypatch.setattr(time, "time", real)
    async with coordinator(
        dynamodb, client, lease_table_name, stream_name, "heir", **options
    ) as heir:
        (event,) = await events_until(heir, lambda seen: len(seen) == 1)
    assert isinstance(event, LeaseAcquired) and event.latest_pinned_at is not None
    saved = saved_from_lease(
        event.checkpoint, event.sub_sequence, event.parents, event.latest_pinned_at
    )
    assert saved.start is not None
    read = await read_all(client, stream_name, shard, saved.start.iterator_params())
    assert [data for data in read if data in written] == written  # none skipped, in order
