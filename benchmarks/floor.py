"""The floor under the producer: this library's own parts in a bare loop, none of its safeties.

The loop predicts each record's shard (:class:`~kinesis_actors.records.ShardMap`, a dict per
key), packs each shard's records into KPL aggregates (:class:`~kinesis_actors.records.Aggregator`),
encodes PutRecords with the client's codec and sends it through the signed HTTP client, one
call at a time. It has no bounded queue, no result per record, no ordering, retries, pacing
or time-to-live, no actors: what ``Producer.put_many`` costs above it is the price of those.

Run ``python -m benchmarks.floor [records] [rounds]``: the floor, ``put_many`` and boto3
(with aws-kinesis-agg) rows, interleaved against one load target, as client CPU per
100-byte record with aggregation, and each row's ratio to boto3 (medians of the rounds).
Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import gc
import statistics
import sys
from collections.abc import Callable
from typing import Any

import anyio

from benchmarks import peers
from benchmarks._common import KEYS, Clock, payloads
from benchmarks.loadtarget import LoadTarget
from kinesis_actors.records import DEFAULT_AGGREGATION_MAX_BYTES, Aggregator, ShardMap

__all__ = ["main", "push_floor"]

_CALL_AGGREGATES = 12  # about what the producer's calls carry in this row (~600 KB)


def push_floor(target: LoadTarget, spec: peers.PushSpec, clock: Clock) -> dict[str, Any]:
    """``spec.count`` records through the bare loop (aggregation on, 1,000 keys)."""
    if spec.count is None or not spec.aggregation:
        raise ValueError("the floor is a counted row with aggregation")
    count = spec.count

    async def run() -> dict[str, Any]:
        data, keys = payloads(spec.record_bytes), KEYS
        calls = 0
        async with target.client() as client:
            reply = await client.call("ListShards", {"StreamName": target.stream_name})
            shard_map = ShardMap.from_shards(reply["Shards"])
            encode = client.codec.encode_put_records
            waiting: dict[str, list[tuple[bytes, str]]] = {r.shard_id: [] for r in shard_map}
            lane_of: dict[str, list[tuple[bytes, str]]] = {}
            aggregates: list[tuple[bytes, str, str | None]] = []

            async def pack(lane: list[tuple[bytes, str]], least: int) -> None:
                nonlocal aggregates, calls
                while len(lane) > least:
                    aggregator = Aggregator(DEFAULT_AGGREGATION_MAX_BYTES)
                    taken = 0
                    for record, key in lane:
                        if not aggregator.add(record, key):
                            break
                        taken += 1
                    del lane[:taken]
                    built = aggregator.build()
                    aggregates.append((built.data, built.partition_key, built.explicit_hash_key))
                    if len(aggregates) == _CALL_AGGREGATES:
                        await client.send(encode(target.stream_name, aggregates))
                        aggregates, calls = [], calls + 1

            clock.start()
            for start in range(0, count, peers.PUT_MANY):
                stop = min(count, start + peers.PUT_MANY)
                for index in range(start, stop):
                    key = keys[index % len(keys)]
                    lane = lane_of.get(key)
                    if lane is None:
                        shard_id = shard_map.shard_for(key)
                        assert shard_id is not None
                        lane = lane_of[key] = waiting[shard_id]
                    lane.append((data[index % len(data)], key))
                for lane in waiting.values():
                    await pack(lane, 465)  # an aggregate's worth of 100-byte records
                await anyio.lowlevel.checkpoint()
            for lane in waiting.values():
                await pack(lane, 0)
            if aggregates:
                await client.send(encode(target.stream_name, aggregates))
                calls += 1
            clock.stop()
        return {"records": count, "failed": 0, "calls": calls, "throttled": 0}

    return anyio.run(run)


def main(argv: list[str]) -> None:
    count = int(argv[0]) if argv else 200_000
    rounds = int(argv[1]) if len(argv) > 1 else 5
    rows: dict[str, Callable[[LoadTarget, peers.PushSpec, Clock], dict[str, Any]]] = {
        "floor (bare loop)": push_floor,
        peers.PROJECT_BATCH: peers.push_project_batch,
        "boto3": peers.push_boto3,
    }
    cpu: dict[str, list[float]] = {name: [] for name in rows}
    spec = peers.PushSpec(100, aggregation=True, count=count)
    with LoadTarget(shards=4, tls=False) as target:
        for _ in range(rounds):
            for name, push in rows.items():
                gc.collect()
                clock = Clock(target)
                push(target, spec, clock)
                cpu[name].append(clock.cpu / count * 1e6)
    boto3 = statistics.median(cpu["boto3"])
    for name, figures in cpu.items():
        median = statistics.median(figures)
        each = " ".join(f"{figure:.2f}" for figure in figures)
        print(f"{name:28s} {median:5.2f} us/record  {median / boto3:4.2f}x boto3  ({each})")


if __name__ == "__main__":
    main(sys.argv[1:])
