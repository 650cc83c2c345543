"""A polling Consumer over many shards: how long it takes to open, to read every shard once,
and what it costs while there is nothing to read.

    .venv/bin/python benchmarks/scale_bench.py [--shards 16,128,512,1000] [--idle 10] [--json]

Each row: a loopback load target (its own process, plain HTTP/1.1, no limits) with ``shards``
shards, one record put on each (by its starting hash key), then one polling Consumer from
TRIM_HORIZON with the default configuration. Figures:

- ``open_s``: from ``Consumer(...)`` to the end of ``async with``'s entry;
- ``all_read_s``: from the same start until a batch of every shard has been delivered;
- ``open_cpu_s`` / ``all_read_cpu_s``: this process's CPU time over the same spans (the wall
  times depend on what else the machine runs; these much less);
- ``idle_cpu_share``: this process's CPU time over ``idle`` seconds of wall time, starting
  ``settle`` seconds after every record was read, once every shard's idle backoff has reached
  its bound (no new records: every read is empty), a share of one core;
- ``idle_reads_per_s``: GetRecords calls the target answered in that window, per second.

Run by hand (minutes at 1,000 shards), not by the suite; the test runs a tiny row.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio
import pyarrow as pa

from benchmarks._common import fixed as _f
from benchmarks._common import load as _load
from benchmarks._common import machine
from benchmarks._common import text_table as _table
from benchmarks.loadtarget import LoadTarget
from kinesis_actors import Consumer, ConsumerConfig, KinesisClient, StartingPosition

__all__ = ["SHARDS", "main", "measure", "report", "run"]

SHARDS = (16, 128, 512, 1000)
IDLE_SECONDS = 10.0
#: The longest a row may take to read every shard once before it is called a failure.
READ_ALL_TIMEOUT = 600.0


async def put_one_per_shard(client: KinesisClient, stream: str) -> int:
    """One record on every shard, by the shard's starting hash key; returns the shard count."""
    shards: list[dict[str, Any]] = []
    params: dict[str, Any] = {"StreamName": stream}
    while True:
        page = await client.call("ListShards", params)
        shards += page["Shards"]
        token = page.get("NextToken")
        if not token:
            break
        params = {"NextToken": token}
    for start in range(0, len(shards), 500):
        records = [
            {
                "Data": shard["ShardId"].encode(),
                "PartitionKey": "k",
                "ExplicitHashKey": shard["HashKeyRange"]["StartingHashKey"],
            }
            for shard in shards[start : start + 500]
        ]
        await client.call("PutRecords", {"StreamName": stream, "Records": records})
    return len(shards)


def _get_records_calls(target: LoadTarget) -> int:
    return int(target.stats()["requests"].get("GetRecords", 0))


async def _measure(
    target: LoadTarget, idle: float, settle: float, config: ConsumerConfig
) -> dict[str, Any]:
    async with target.client() as client:
        shards = await put_one_per_shard(client, target.stream_name)
        seen: set[str] = set()
        began, began_cpu = time.perf_counter(), time.process_time()
        async with Consumer(client, target.stream_name, config) as consumer:
            opened = time.perf_counter() - began
            opened_cpu = time.process_time() - began_cpu
            with anyio.fail_after(READ_ALL_TIMEOUT):
                async for batch in consumer:
                    seen.add(batch.shard_id)
                    consumer.commit(batch)
                    if len(seen) == shards:
                        break
            all_read = time.perf_counter() - began
            all_read_cpu = time.process_time() - began_cpu
            with anyio.move_on_after(settle):  # the idle backoff reaches its bound
                async for batch in consumer:
                    consumer.commit(batch)
            calls = await anyio.to_thread.run_sync(_get_records_calls, target)
            wall, cpu = time.perf_counter(), time.process_time()
            target_cpu = target.cpu_seconds()
            with anyio.move_on_after(idle):
                async for batch in consumer:  # nothing comes: every read is empty
                    consumer.commit(batch)
            wall = time.perf_counter() - wall
            cpu = time.process_time() - cpu
            target_cpu = target.cpu_seconds() - target_cpu
            idle_calls = await anyio.to_thread.run_sync(_get_records_calls, target) - calls
    return {
        "shards": shards,
        "open_s": opened,
        "open_cpu_s": opened_cpu,
        "all_read_s": all_read,
        "all_read_cpu_s": all_read_cpu,
        "settle_s": settle,
        "idle_s": wall,
        "idle_cpu_share": cpu / wall,
        "idle_target_cpu_share": target_cpu / wall,
        "idle_reads_per_s": idle_calls / wall,
        "idle_cpu_us_per_read": cpu / idle_calls * 1e6 if idle_calls else None,
    }


def measure(
    shards: int,
    idle: float = IDLE_SECONDS,
    config: ConsumerConfig | None = None,
    settle: float | None = None,
) -> dict[str, Any]:
    """One row: a fresh target of ``shards`` shards, one record each, one Consumer; the idle
    window starts ``settle`` seconds after every shard was read (default: twice the idle
    bound, by when every shard's backoff has reached it)."""
    config = config or ConsumerConfig(start=StartingPosition.trim_horizon())
    load = _load()
    with LoadTarget(shards=shards, retain_records=4, tls=False) as target:
        if settle is None:
            rate, floor = config.idle_reads_per_second, config.idle_backoff_max
            settle = 2 * (floor if rate is None else max(floor, shards / rate))
        row = anyio.run(_measure, target, idle, settle, config)
    row["loadavg_before"] = load
    return row


def warm_up() -> None:
    """Pay the process's one-time costs before the first row: pyarrow imports pandas (when
    installed) at its first ``pa.array``, 2-5 s on a busy 2-core machine, which would
    otherwise land in the first row's open time."""
    pa.array([0])


def run(shards: tuple[int, ...] = SHARDS, idle: float = IDLE_SECONDS) -> dict[str, Any]:
    warm_up()
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": machine(), "loadavg_start": _load(), "rows": []}
    for count in shards:
        results["rows"].append(measure(count, idle))
    results["loadavg_end"] = _load()
    results["seconds"] = time.perf_counter() - started
    return results


def report(results: dict[str, Any]) -> str:
    head = (
        "polling Consumer, one record a shard, TRIM_HORIZON, default config; load average "
        f"{results['loadavg_start']} at start, {results['loadavg_end']} at end; "
        f"{results['seconds']:.0f} s in all"
    )
    columns = [
        ("shards", "shards", _f(0)),
        ("open s", "open_s", _f(2)),
        ("open CPU s", "open_cpu_s", _f(2)),
        ("all read s", "all_read_s", _f(2)),
        ("all read CPU s", "all_read_cpu_s", _f(2)),
        ("idle CPU (cores)", "idle_cpu_share", _f(3)),
        ("idle reads/s", "idle_reads_per_s", _f(0)),
        ("idle CPU us/read", "idle_cpu_us_per_read", _f(0)),
        ("target CPU (cores)", "idle_target_cpu_share", _f(3)),
    ]
    return "\n".join([head, _table(results["rows"], columns)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shards", default=",".join(map(str, SHARDS)), help="comma-separated")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="idle window, s")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    counts = tuple(int(part) for part in args.shards.split(","))
    results = run(counts, args.idle)
    print(json.dumps(results, indent=2, default=str) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
