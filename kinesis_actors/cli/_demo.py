"""``kinesis-actors demo``: the product end to end on the embedded local Kinesis.

This is the foundation's demo: it creates a stream, writes a keyed workload with PutRecords,
reads every shard back over Enhanced Fan-Out (SubscribeToShard on HTTP/2) and checks that
every record arrived exactly once, in order per key.
"""

from __future__ import annotations

import time
from functools import partial

import anyio

from ..client import KinesisClient
from ..local import LocalKinesis

_BATCH = 500


async def _write(client: KinesisClient, stream: str, records: int) -> dict[str, list[int]]:
    sent: dict[str, list[int]] = {}
    for start in range(0, records, _BATCH):
        batch = []
        for i in range(start, min(start + _BATCH, records)):
            key = f"user-{i % 50}"
            sent.setdefault(key, []).append(i)
            batch.append({"Data": f"{key}:{i}".encode(), "PartitionKey": key})
        result = await client.call("PutRecords", {"StreamName": stream, "Records": batch})
        if result["FailedRecordCount"]:
            raise RuntimeError(f"{result['FailedRecordCount']} records failed")
    return sent


async def _read_shard(
    client: KinesisClient,
    *,
    consumer_arn: str,
    shard_id: str,
    received: dict[str, list[int]],
    expected: int,
    done: anyio.Event,
) -> None:
    async with client.subscribe_to_shard(
        consumer_arn, shard_id, {"Type": "TRIM_HORIZON"}
    ) as subscription:
        async for event in subscription:
            for record in event["Records"]:
                key, index = record["Data"].decode().split(":")
                received.setdefault(key, []).append(int(index))
            if sum(map(len, received.values())) >= expected:
                done.set()
            if done.is_set():
                return


async def run_demo(records: int, shards: int) -> int:
    print("starting the embedded local Kinesis ...", flush=True)
    async with LocalKinesis() as server, server.client(tls=True) as client:
        stream = "demo"
        await client.create_stream(stream, shards)
        summary = await client.wait_for_stream(stream)
        started = time.perf_counter()
        sent = await _write(client, stream, records)
        write_seconds = time.perf_counter() - started
        registered = await client.call(
            "RegisterStreamConsumer",
            {"StreamARN": summary["StreamARN"], "ConsumerName": "demo-reader"},
        )
        consumer_arn = registered["Consumer"]["ConsumerARN"]
        await client.wait_for_consumer(consumer_arn)
        shard_ids = [
            s["ShardId"]
            for s in (await client.call("ListShards", {"StreamName": stream}))["Shards"]
        ]
        received: dict[str, list[int]] = {}
        done = anyio.Event()
        started = time.perf_counter()
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for shard_id in shard_ids:
                    group.start_soon(
                        partial(
                            _read_shard,
                            client,
                            consumer_arn=consumer_arn,
                            shard_id=shard_id,
                            received=received,
                            expected=records,
                            done=done,
                        )
                    )
        read_seconds = time.perf_counter() - started
        await client.call("DeregisterStreamConsumer", {"ConsumerARN": consumer_arn})
    ok = received == sent
    print(
        f"wrote {records} records over {shards} shards in {write_seconds:.2f} s "
        f"({records / write_seconds:,.0f} records/s, PutRecords)\n"
        f"read them back over HTTP/2 fan-out in {read_seconds:.2f} s "
        f"({records / read_seconds:,.0f} records/s)\n"
        f"every record exactly once, in order per key: {'yes' if ok else 'NO'}"
    )
    return 0 if ok else 1
