"""An Enhanced Fan-Out Consumer over many shards: descriptors, memory and time to open.

    .venv/bin/python benchmarks/efo_scale_bench.py [--shards 128,1000] [--json]

Each row: the local Kinesis server (kinesis-local, its ``SHARD_LIMIT`` raised) with a fresh
stream of ``shards`` shards and one record put on each (by its starting hash key), then one
EFO Consumer from TRIM_HORIZON with the default configuration, in this process. Figures:

- ``open_s``: from ``Consumer(...)`` to the end of ``async with``'s entry (the consumer's
  registration included);
- ``subscribed_s``: from the same start until every shard has had a subscription;
- ``fds``: this process's open file descriptors then, and ``fds_before`` before the
  Consumer was made; ``connections``: the client's SubscribeToShard connections then
  (absent before the pool); ``rss_mb``: this process's resident memory then, and
  ``rss_before_mb``;
- ``all_read_s``: from the same start until a batch of every shard has been delivered
  (absent if not within ``READ_ALL_TIMEOUT``); at the end, ``shards_read``,
  ``shards_subscribed``, ``fds_end`` and ``rss_end_mb``.

With ``--load-target``, the same rows read from the benchmarks' load target (its own
process, HTTP/2 on its TLS port) instead of the local server, which at 1,000 subscriptions
is the bottleneck (docs/consumer.md, "Enhanced Fan-Out connections"); ``target_cpu_s`` is
its CPU.

With ``--streams-only``, the transport alone: one client opens a SubscribeToShard stream
on every shard at once, and ``streams_open_s``, ``fds``, ``rss_mb`` (and ``connections``)
are taken once every stream has its response headers.

Run by hand (a minute or more at 1,000 shards), not by the suite. Only the standard library
and ``kinesis_actors`` are imported, so the same file measures another checkout: put it first
on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import AsyncExitStack
from typing import Any

import anyio

from kinesis_actors import Consumer, ConsumerConfig, KinesisClient, LocalKinesis, StartingPosition

SHARDS = (128, 1000)
#: The client's configuration (``--per-connection``); None: the default.
_CONFIG: Any = None
READ_ALL_TIMEOUT = 120.0


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _put_one_per_shard(client: KinesisClient, stream: str) -> int:
    shards: list[dict[str, Any]] = []
    params: dict[str, Any] = {"StreamName": stream}
    while True:
        page = await client.call("ListShards", params)
        shards += page["Shards"]
        if not page.get("NextToken"):
            break
        params = {"NextToken": page["NextToken"]}
    for start in range(0, len(shards), 500):
        records = [
            {
                "Data": s["ShardId"].encode(),
                "PartitionKey": "k",
                "ExplicitHashKey": s["HashKeyRange"]["StartingHashKey"],
            }
            for s in shards[start : start + 500]
        ]
        await client.call("PutRecords", {"StreamName": stream, "Records": records})
    return len(shards)


async def _measure(kinesis: LocalKinesis, shards: int) -> dict[str, Any]:
    stream = f"efo-scale-{shards}"
    options = {"config": _CONFIG} if _CONFIG is not None else {}
    async with kinesis.client(**options) as client:
        await client.create_stream(stream, shards)
        return await _consume(client, stream, shards)


def _measure_on_load_target(shards: int) -> dict[str, Any]:
    """The same row against the benchmarks' load target (its own process, HTTP/2 on its TLS
    port), which serves many subscriptions faster than the local server."""
    from benchmarks.loadtarget import LoadTarget  # noqa: PLC0415 (only for --load-target)

    async def consume(target: LoadTarget) -> dict[str, Any]:
        async with target.client(tls=True, config=_CONFIG) as client:
            return await _consume(client, target.stream_name, shards)

    with LoadTarget(shards=shards, retain_records=4, tls=True) as target:
        row = anyio.run(consume, target)
        return row | {"target": "load target", "target_cpu_s": round(target.cpu_seconds(), 1)}


async def _consume(client: KinesisClient, stream: str, shards: int) -> dict[str, Any]:
    """One record put on each shard, then one EFO Consumer from TRIM_HORIZON: the row."""
    await _put_one_per_shard(client, stream)
    config = ConsumerConfig(mode="efo", start=StartingPosition.trim_horizon())
    row: dict[str, Any] = {"shards": shards, "fds_before": _fds()}
    row["rss_before_mb"] = round(_rss_mb(), 1)
    seen: set[str] = set()
    began = time.perf_counter()
    async with Consumer(client, stream, config) as consumer:
        row["open_s"] = round(time.perf_counter() - began, 2)

        def subscribed() -> int:
            shards = consumer.statistics().shards.values()
            return sum(1 for s in shards if s.subscriptions)

        async def watch() -> None:
            """Figures once every shard has a subscription open, then progress."""
            while subscribed() < shards:  # noqa: ASYNC110 (metrics have no event)
                # A snapshot of every shard is about 9 us a shard: kept to 2 % of a core.
                await anyio.sleep(max(0.05, shards / 2000))
            row["subscribed_s"] = round(time.perf_counter() - began, 2)
            row["fds"] = _fds()
            row["rss_mb"] = round(_rss_mb(), 1)
            statistics = getattr(client, "subscription_statistics", None)
            if statistics is not None:
                row["connections"] = statistics().connections
            while True:
                await anyio.sleep(10)
                print(
                    f"{time.perf_counter() - began:.0f} s: {len(seen)} shards read, {_fds()} fds",
                    file=sys.stderr,
                    flush=True,
                )

        with anyio.move_on_after(READ_ALL_TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                async for batch in consumer:
                    seen.add(batch.shard_id)
                    if len(seen) == shards:
                        row["all_read_s"] = round(time.perf_counter() - began, 2)
                        break
                tg.cancel_scope.cancel()
        row["shards_read"] = len(seen)
        row["shards_subscribed"] = subscribed()
        statistics = getattr(client, "subscription_statistics", None)
        if statistics is not None and "connections" not in row:  # read before watch looked
            row["connections"] = statistics().connections
        row["fds_end"], row["rss_end_mb"] = _fds(), round(_rss_mb(), 1)
    return row


async def _measure_streams(kinesis: LocalKinesis, shards: int) -> dict[str, Any]:
    """The transport alone: ``shards`` SubscribeToShard streams opened at once by one client
    (no Consumer), until every one has its response headers."""
    stream = f"efo-streams-{shards}"
    async with kinesis.client() as client, AsyncExitStack() as stack:
        await client.create_stream(stream, shards)
        summary = await client.call("DescribeStreamSummary", {"StreamName": stream})
        registered = await client.call(
            "RegisterStreamConsumer",
            {
                "StreamARN": summary["StreamDescriptionSummary"]["StreamARN"],
                "ConsumerName": "bench",
            },
        )
        arn = registered["Consumer"]["ConsumerARN"]
        await client.wait_for_consumer(arn)
        row: dict[str, Any] = {"shards": shards, "fds_before": _fds()}
        row["rss_before_mb"] = round(_rss_mb(), 1)
        began = time.perf_counter()

        async def one(i: int) -> None:
            await stack.enter_async_context(
                client.subscribe_to_shard(arn, f"shardId-{i:012d}", {"Type": "LATEST"})
            )

        with anyio.fail_after(READ_ALL_TIMEOUT):
            async with anyio.create_task_group() as tg:
                for i in range(shards):
                    tg.start_soon(one, i)
        row["streams_open_s"] = round(time.perf_counter() - began, 2)
        row["fds"], row["rss_mb"] = _fds(), round(_rss_mb(), 1)
        statistics = getattr(client, "subscription_statistics", None)
        if statistics is not None:
            row["connections"] = statistics().connections
    return row


def run(
    shards: tuple[int, ...] = SHARDS, streams_only: bool = False, load_target: bool = False
) -> list[dict[str, Any]]:
    if load_target:
        return [_measure_on_load_target(count) for count in shards]
    rows = []
    measure = _measure_streams if streams_only else _measure
    # Every row's stream stays open on the one server: the limit must hold them all.
    with LocalKinesis(operation_duration=0.0, shard_limit=sum(shards) + 10) as kinesis:
        for count in shards:
            rows.append(anyio.run(measure, kinesis, count))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", default=",".join(map(str, SHARDS)))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--streams-only", action="store_true", help="open the streams with the client alone"
    )
    parser.add_argument("--per-connection", type=int, help="subscriptions_per_connection")
    parser.add_argument(
        "--load-target",
        action="store_true",
        help="read from the benchmarks' load target instead of the local server",
    )
    args = parser.parse_args(argv)
    if args.per_connection is not None:
        from kinesis_actors import ClientConfig  # noqa: PLC0415

        global _CONFIG  # noqa: PLW0603 (a command-line option)
        _CONFIG = ClientConfig(subscriptions_per_connection=args.per_connection)
    rows = run(tuple(int(n) for n in args.shards.split(",")), args.streams_only, args.load_target)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
