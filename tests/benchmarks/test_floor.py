"""The floor diagnostic writes what it says: every record once, on the shard its key predicts.

Its figures mean something only if its loop does the producer's work minus the safeties; a
loop that dropped or misplaced records would make the floor look cheaper than it is.
"""

from __future__ import annotations

from collections import Counter

import anyio

from benchmarks._common import KEYS, Clock, payloads
from benchmarks.floor import push_floor
from benchmarks.loadtarget import LoadTarget
from benchmarks.peers import PushSpec
from kinesis_actors.records import ShardMap, deaggregate


async def _read_back(target: LoadTarget) -> tuple[Counter[tuple[str, str, bytes]], ShardMap]:
    """Every user record in the stream, as ``(shard, partition key, data)``, and the shards."""
    found: Counter[tuple[str, str, bytes]] = Counter()
    async with target.client() as client:
        shard_map = ShardMap.from_shards(
            (await client.call("ListShards", {"StreamName": "bench"}))["Shards"]
        )
        for shard_id in target.shard_ids():
            iterator = (
                await client.call(
                    "GetShardIterator",
                    {
                        "StreamName": "bench",
                        "ShardId": shard_id,
                        "ShardIteratorType": "TRIM_HORIZON",
                    },
                )
            )["ShardIterator"]
            while True:
                answer = await client.call("GetRecords", {"ShardIterator": iterator})
                for record in answer["Records"]:
                    for user in deaggregate(record["Data"], record["PartitionKey"]):
                        found[shard_id, user.partition_key, user.data] += 1
                iterator = answer["NextShardIterator"]
                if not answer["Records"]:
                    break
    return found, shard_map


def test_the_floor_writes_every_record_once_where_its_key_predicts() -> None:
    count = 2_345  # not a multiple of put_many's 500, nor of an aggregate
    with LoadTarget(shards=4, retain_records=1_000, tls=False, isolation="thread") as target:
        result = push_floor(target, PushSpec(100, aggregation=True, count=count), Clock(target))
        found, shard_map = anyio.run(_read_back, target)
    assert result["records"] == count and result["calls"] >= 1
    data = payloads(100)
    expected = Counter((KEYS[index % len(KEYS)], data[index % len(data)]) for index in range(count))
    assert Counter({(key, body): n for (_, key, body), n in found.items()}) == expected
    assert len({shard for shard, _, _ in found}) == 4
    for shard_id, key, _ in found:
        assert shard_map.shard_for(key) == shard_id
