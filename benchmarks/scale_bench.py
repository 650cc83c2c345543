"""A polling Consumer over many shards: how long it takes to open, to read every shard once,
and what it costs while there is nothing to read.

    .venv/bin/python benchmarks/scale_bench.py [--shards 16,128,512,1000] [--idle 10]
        [--records 256000] [--json]

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
- ``idle_reads_per_s``: GetRecords calls the target answered in that window, per second;
- ``rss_open_kib_per_shard`` / ``rss_read_kib_per_shard``: what this process's resident
  memory grew by from just before ``Consumer(...)`` to the end of the open, and to every
  shard read, per shard (``rss_before_mb``, ``rss_open_mb``, ``rss_read_mb`` are the
  totals; each row runs in a fresh process of its own, so no row reuses memory another
  freed);
- ``statistics_cpu_ms``: the CPU of one ``Consumer.statistics()`` once idle (median of five),
  a snapshot of every shard taken on the loop, as the metrics exporter's sampler does;
- ``close_s`` / ``close_cpu_s``: the end of that Consumer's ``async with``, every actor
  stopped;
- ``cpu_us_per_record``: the cost of a record, apart from a shard's. Once the first Consumer
  is closed, a second reads the one record of every shard from TRIM_HORIZON
  (``records_base_cpu_s``); then ``records`` more records (the same total at every shard
  count, 100 bytes each, spread evenly) are put, and a third reads them all with the first
  ones (``records_read_cpu_s``, ``records_read_s``, ``records_calls``), each from a
  collected heap. Both read a shard up to its tip and not again
  (``caught_up_millis_behind``), so they open alike; the third reads in pages of ``page``
  records (``max_records_per_call``), the same at every shard count, so every count makes
  the same calls per added record (one a page) and reads the same pages: the difference of
  their CPU, per added record, is what a record costs, a page's share of a call included.
  (With the service's own page of 10,000, 16 shards read pages of 10,000 and 1,000 shards
  pages of 256, and a 1,000-shard read was buffered whole during its open: see
  docs/consumer.md, "Many shards".) ``gross_cpu_us_per_record`` is the third's whole CPU per
  record it delivered, its opening included.

Run by hand (minutes at 1,000 shards), not by the suite; the test runs a tiny row.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import anyio
import pyarrow as pa

from benchmarks._common import fixed as _f
from benchmarks._common import load as _load
from benchmarks._common import machine, rss_kib
from benchmarks._common import text_table as _table
from benchmarks.loadtarget import LoadTarget
from kinesis_actors import Consumer, ConsumerConfig, KinesisClient, StartingPosition

__all__ = [
    "PAGE",
    "RECORDS",
    "SHARDS",
    "main",
    "measure",
    "put_one_per_shard",
    "put_per_shard",
    "report",
    "run",
]

SHARDS = (16, 128, 512, 1000)
IDLE_SECONDS = 10.0
#: The records of the per-record figure, in all, whatever the shard count: 4,096 a shard at
#: 1,000 shards (four pages), 256,000 at 16.
RECORDS = 4_096_000
#: Records a GetRecords call in the per-record read, at every shard count.
PAGE = 1024
RECORD_BYTES = 100
#: The longest a row may take to read every shard once before it is called a failure.
READ_ALL_TIMEOUT = 600.0


async def put_one_per_shard(client: KinesisClient, stream: str) -> int:
    """One record on every shard, by the shard's starting hash key; returns the shard count."""
    return await put_per_shard(client, stream)


async def put_per_shard(
    client: KinesisClient, stream: str, count: int = 1, size: int | None = None
) -> int:
    """``count`` records on every shard, by the shard's starting hash key, ``size`` bytes each
    (default: the shard's id); returns the shard count."""
    shards: list[dict[str, Any]] = []
    params: dict[str, Any] = {"StreamName": stream}
    while True:
        page = await client.call("ListShards", params)
        shards += page["Shards"]
        token = page.get("NextToken")
        if not token:
            break
        params = {"NextToken": token}
    entries = [
        {
            "Data": shard["ShardId"].encode().ljust(size or 0, b"."),
            "PartitionKey": "k",
            "ExplicitHashKey": shard["HashKeyRange"]["StartingHashKey"],
        }
        for shard in shards
    ] * count
    for start in range(0, len(entries), 500):
        records = entries[start : start + 500]
        await client.call("PutRecords", {"StreamName": stream, "Records": records})
    return len(shards)


def _get_records_calls(target: LoadTarget) -> int:
    return int(target.stats()["requests"].get("GetRecords", 0))


def _mb(kib: int) -> float:
    return round(kib / 1024, 1)


async def _measure(
    target: LoadTarget,
    idle: float,
    settle: float,
    config: ConsumerConfig,
    records: int,
    page: int,
) -> dict[str, Any]:
    async with target.client() as client:
        shards = await put_one_per_shard(client, target.stream_name)
        seen: set[str] = set()
        rss_before = rss_kib()
        began, began_cpu = time.perf_counter(), time.process_time()
        async with Consumer(client, target.stream_name, config) as consumer:
            opened = time.perf_counter() - began
            opened_cpu = time.process_time() - began_cpu
            rss_open = rss_kib()
            with anyio.fail_after(READ_ALL_TIMEOUT):
                async for batch in consumer:
                    seen.add(batch.shard_id)
                    consumer.commit(batch)
                    if len(seen) == shards:
                        break
            all_read = time.perf_counter() - began
            all_read_cpu = time.process_time() - began_cpu
            rss_read = rss_kib()
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
            statistics_cpu = statistics.median(_statistics_cpu(consumer) for _ in range(5))
            closing, closing_cpu = time.perf_counter(), time.process_time()
        closed = time.perf_counter() - closing
        closed_cpu = time.process_time() - closing_cpu
        row: dict[str, Any] = {
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
            "rss_before_mb": _mb(rss_before),
            "rss_open_mb": _mb(rss_open),
            "rss_read_mb": _mb(rss_read),
            "rss_open_kib_per_shard": (rss_open - rss_before) / shards,
            "rss_read_kib_per_shard": (rss_read - rss_before) / shards,
            "statistics_cpu_ms": statistics_cpu * 1e3,
            "close_s": closed,
            "close_cpu_s": closed_cpu,
        }
        # Closed, but alive while this frame holds it: every full collection of the record
        # reads walked its shards' objects too (about 100 a shard; the oldest generation
        # 205,000 objects at 1,000 shards, 139,000 without it). The CPU a record moved
        # within the rows' spread; the reads no longer pay for another Consumer.
        del consumer, batch
        if records:
            row |= await _measure_records(client, target, shards, records, config, page)
    return row


def _statistics_cpu(consumer: Consumer) -> float:
    """CPU seconds of one ``Consumer.statistics()``: a snapshot of every shard, taken on the
    loop (the metrics exporter's sampler takes one per collection)."""
    began = time.process_time()
    consumer.statistics()
    return time.process_time() - began


async def _read_all(
    client: KinesisClient, stream: str, config: ConsumerConfig, expected: int
) -> tuple[float, float]:
    """A fresh Consumer reads until ``expected`` records have been delivered: wall and CPU
    seconds from ``Consumer(...)``."""
    delivered = 0
    began, began_cpu = time.perf_counter(), time.process_time()
    async with Consumer(client, stream, config) as consumer:
        with anyio.fail_after(READ_ALL_TIMEOUT):
            async for batch in consumer:
                delivered += len(batch)
                consumer.commit(batch)
                if delivered >= expected:
                    break
        return time.perf_counter() - began, time.process_time() - began_cpu


async def _measure_records(
    client: KinesisClient,
    target: LoadTarget,
    shards: int,
    records: int,
    config: ConsumerConfig,
    page: int,
) -> dict[str, Any]:
    """The cost of a record, reads being equal: a Consumer reads the one record of every
    shard, ``records`` more are spread over the shards, and another reads them all. Both
    read a shard until its tip, then not again within the measurement (a read that reached
    the tip waits ``caught_up_read_interval``), so they make the same GetRecords calls (one
    a shard, while a shard holds at most ``max_records_per_call``) and no empty read: the
    difference of their CPU is the records'. Each read starts from a collected heap, so
    neither pays for a full collection that the other phases' garbage brings on (the puts
    of 256,000 records, the Consumer closed before it: at 1,000 shards that one alone is
    about 48,000 objects in cycles)."""
    stream = target.stream_name
    quiet = dataclasses.replace(
        config,
        caught_up_millis_behind=1,
        caught_up_read_interval=READ_ALL_TIMEOUT,
        max_records_per_call=page,
    )
    gc.collect()
    _, base_cpu = await _read_all(client, stream, quiet, shards)
    each = max(1, records // shards)
    await put_per_shard(client, stream, each, RECORD_BYTES)
    gc.collect()
    expected = shards * (each + 1)
    calls = await anyio.to_thread.run_sync(_get_records_calls, target)
    wall, cpu = await _read_all(client, stream, quiet, expected)
    calls = await anyio.to_thread.run_sync(_get_records_calls, target) - calls
    return {
        "records": each * shards,
        "records_page": page,
        "records_calls": calls,
        "records_read_s": wall,
        "records_read_cpu_s": cpu,
        "records_base_cpu_s": base_cpu,
        "cpu_us_per_record": (cpu - base_cpu) / (each * shards) * 1e6,
        "gross_cpu_us_per_record": cpu / expected * 1e6,
    }


def measure(
    shards: int,
    idle: float = IDLE_SECONDS,
    config: ConsumerConfig | None = None,
    settle: float | None = None,
    records: int = RECORDS,
    page: int = PAGE,
) -> dict[str, Any]:
    """One row: a fresh target of ``shards`` shards, one record each, one Consumer; the idle
    window starts ``settle`` seconds after every shard was read (default: twice the idle
    bound, by when every shard's backoff has reached it); then, unless ``records`` is 0, the
    per-record figure (``records`` in all, read by another Consumer in pages of ``page``)."""
    config = config or ConsumerConfig(start=StartingPosition.trim_horizon())
    load = _load()
    retain = 4 + records // shards
    with LoadTarget(shards=shards, retain_records=retain, tls=False) as target:
        if settle is None:
            rate, floor = config.idle_reads_per_second, config.idle_backoff_max
            settle = 2 * (floor if rate is None else max(floor, shards / rate))
        row = anyio.run(_measure, target, idle, settle, config, records, page)
    row["loadavg_before"] = load
    return row


def warm_up() -> None:
    """Pay the process's one-time costs before the first row: pyarrow imports pandas (when
    installed) at its first ``pa.array``, 2-5 s on a busy 2-core machine, which would
    otherwise land in the first row's open time."""
    pa.array([0])


def _fresh_row(
    shards: int, idle: float, records: int, settle: float | None, page: int
) -> dict[str, Any]:
    warm_up()
    return measure(shards, idle, records=records, settle=settle, page=page)


def run(
    shards: tuple[int, ...] = SHARDS,
    idle: float = IDLE_SECONDS,
    records: int = RECORDS,
    settle: float | None = None,
    page: int = PAGE,
) -> dict[str, Any]:
    """Every row, each in a fresh process (spawned, one after another): a row's memory
    figures and its heap start from nothing, whatever rows ran before it."""
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": machine(), "loadavg_start": _load(), "rows": []}
    context = multiprocessing.get_context("spawn")
    for count in shards:
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            row = pool.submit(_fresh_row, count, idle, records, settle, page)
            results["rows"].append(row.result())
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
        ("statistics() CPU ms", "statistics_cpu_ms", _f(2)),
        ("close s", "close_s", _f(2)),
        ("close CPU s", "close_cpu_s", _f(2)),
        ("RSS MB", "rss_read_mb", _f(1)),
        ("RSS KiB/shard open", "rss_open_kib_per_shard", _f(0)),
        ("RSS KiB/shard read", "rss_read_kib_per_shard", _f(0)),
        ("records", "records", _f(0)),
        ("records/call", "records_page", _f(0)),
        ("CPU us/record", "cpu_us_per_record", _f(2)),
        ("gross us/record", "gross_cpu_us_per_record", _f(2)),
    ]
    return "\n".join([head, _table(results["rows"], columns)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shards", default=",".join(map(str, SHARDS)), help="comma-separated")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="idle window, s")
    parser.add_argument(
        "--records",
        type=int,
        default=RECORDS,
        help="records in all for the per-record figure, 0: none (default %(default)s)",
    )
    parser.add_argument(
        "--page",
        type=int,
        default=PAGE,
        help="records a GetRecords call in the per-record read (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    counts = tuple(int(part) for part in args.shards.split(","))
    results = run(counts, args.idle, args.records, page=args.page)
    print(json.dumps(results, indent=2, default=str) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
