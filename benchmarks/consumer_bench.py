"""Consumer benchmarks against the loopback load target (its own process, TLS + HTTP/2).

1. Decode throughput: a 4-shard synthetic target serving endless 100 B records (plain, and
   KPL aggregates of 10 user records each); one Consumer reads a fixed number of user
   records (``async for`` + ``commit``) in polling and in EFO mode. Client CPU is this
   process's, target CPU the target process's. The clocks start before the Consumer opens
   (opening costs a few loopback calls), so prefetched batches are counted fairly. Polling
   "default" keeps the service's per-shard read budget (5 calls/s, 2 MiB/s), which caps
   100 B records near 21k records/s per shard; "unbudgeted" lifts the byte budget (calls
   stay at 5/s, the most the config allows).
2. End-to-end latency put -> batch delivered: a 2-shard target retaining what is put; one
   writer puts a record every ``INTERVAL`` seconds (its data is the sequence number and
   ``time.perf_counter()``) while an EFO consumer and two polling consumers (tuned idle
   backoff, and the defaults) read the same stream at once, all from TRIM_HORIZON, opened
   before the first put. Latency = perf_counter when the batch is yielded - the put's stamp.

Usage: ``.venv/bin/python benchmarks/consumer_bench.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import struct
import sys
import time
from dataclasses import asdict, replace
from typing import Any

import anyio

from benchmarks._common import fixed as _f
from benchmarks._common import load as _load
from benchmarks._common import percent as _pct
from benchmarks._common import text as _s
from benchmarks._common import text_table as _table
from benchmarks.loadtarget import LoadTarget, Synthetic
from kinesis_actors import Consumer, ConsumerConfig, ConsumerStatistics, StartingPosition
from kinesis_actors.records import Aggregator

SHARDS = 4
RECORD_BYTES = 100
VARIANTS = 16
AGG_RECORDS = 10  # user records per KPL aggregate in the aggregated rows
UNBUDGETED = 1e12  # max_bytes_per_second that never binds
INTERVAL = 0.01  # seconds between puts in the latency scenario
LATENCY_SHARDS = 2
_STAMP = struct.Struct("!Qd")
_PAD = b"x" * (RECORD_BYTES - _STAMP.size)


def _aggregates() -> tuple[bytes, ...]:
    rng = random.Random(RECORD_BYTES)
    out = []
    for variant in range(VARIANTS):
        aggregator = Aggregator()
        for index in range(AGG_RECORDS):
            assert aggregator.add(rng.randbytes(RECORD_BYTES), f"pk-{variant}-{index}")
        out.append(aggregator.build_container())
    return tuple(out)


# -- scenario 1: decode throughput ------------------------------------------------------------


async def _consume_count(target: LoadTarget, config: ConsumerConfig, count: int) -> dict[str, Any]:
    load = _load()
    async with target.client(tls=True) as client:
        cpu, target_cpu, wall = time.process_time(), target.cpu_seconds(), time.perf_counter()
        records = batches = 0
        async with Consumer(client, target.stream_name, config) as consumer:
            opened = time.perf_counter() - wall
            async for batch in consumer:
                records += len(batch)
                batches += 1
                consumer.commit(batch)
                if records >= count:
                    break
            wall = time.perf_counter() - wall
            cpu = time.process_time() - cpu
            target_cpu = target.cpu_seconds() - target_cpu
            snapshot = consumer.statistics()
    shards = snapshot.shards.values()
    reads = sum(shard.reads for shard in shards)
    events = sum(shard.events for shard in shards)
    return {
        "records": records,
        "batches": batches,
        "seconds": wall,
        "open_seconds": opened,
        "records_per_s": records / wall,
        "mb_per_s": records * RECORD_BYTES / wall / 1e6,
        "events_per_s": events / wall if config.mode == "efo" else None,
        "reads": reads,
        "user_records_per_read": sum(s.user_records for s in shards) / reads if reads else 0.0,
        "client_cpu_us_per_record": cpu / records * 1e6,
        "target_cpu_us_per_record": target_cpu / records * 1e6,
        "client_cpu_share": cpu / wall,
        "target_cpu_share": target_cpu / wall,
        "throttles": sum(shard.throttles for shard in shards),
        "transient_errors": sum(shard.transient_errors for shard in shards),
        "restarts": sum(shard.restarts for shard in shards),
        "loadavg_before": load,
    }


def _throughput_configs() -> list[tuple[str, ConsumerConfig]]:
    base = ConsumerConfig(start=StartingPosition.trim_horizon())
    return [
        ("polling default", base),
        ("polling unbudgeted", replace(base, max_bytes_per_second=UNBUDGETED)),
        ("efo", replace(base, mode="efo", registration="lazy")),
    ]


def bench_throughput(quick: bool, smoke: bool = False) -> list[dict[str, Any]]:
    count = 3_000 if smoke else 100_000 if quick else 1_000_000
    rows: list[dict[str, Any]] = []
    variants = [
        ("plain", Synthetic(record_size=RECORD_BYTES, records_per_event=1000), None),
        (
            f"agg x{AGG_RECORDS}",
            Synthetic(
                record_size=RECORD_BYTES,
                records_per_call=10_000 // AGG_RECORDS,
                records_per_event=1000 // AGG_RECORDS,
                payloads=_aggregates(),
            ),
            10_000 // AGG_RECORDS,
        ),
    ]
    for label, synthetic, limit in variants:
        with LoadTarget(shards=SHARDS, synthetic=synthetic, tls=True) as target:
            # Warm up: imports, TLS, the first registration.
            anyio.run(_consume_count, target, _throughput_configs()[2][1], 1000)
            for name, base in _throughput_configs():
                if label != "plain" and name == "polling default":
                    continue
                config = base if limit is None else replace(base, max_records_per_call=limit)
                row = {"name": f"{label} {name}", "mode": config.mode}
                row |= anyio.run(_consume_count, target, config, count)
                rows.append(row)
    return rows


# -- scenario 2: end-to-end latency -----------------------------------------------------------


def _latency_configs() -> dict[str, ConsumerConfig]:
    base = ConsumerConfig(start=StartingPosition.trim_horizon())
    return {
        "efo": replace(base, mode="efo", registration="lazy"),
        "polling idle 0.05-0.2": replace(base, idle_backoff_initial=0.05, idle_backoff_max=0.2),
        "polling defaults": base,
    }


async def _latency(target: LoadTarget, samples: int) -> dict[str, Any]:
    configs = _latency_configs()
    delivered: dict[str, dict[int, float]] = {name: {} for name in configs}
    batches: dict[str, int] = dict.fromkeys(configs, 0)
    snapshots: dict[str, ConsumerStatistics] = {}
    opened: dict[str, anyio.Event] = {name: anyio.Event() for name in configs}
    complete = anyio.Event()

    async def consume(name: str, config: ConsumerConfig) -> None:
        got = delivered[name]
        async with (
            target.client(tls=True) as client,
            Consumer(client, target.stream_name, config) as consumer,
        ):
            opened[name].set()
            try:
                async for batch in consumer:
                    now = time.perf_counter()
                    batches[name] += 1
                    for data in batch.arrow.column(7).to_pylist():
                        seq, sent = _STAMP.unpack_from(data)
                        got[seq] = now - sent
                    consumer.commit(batch)
                    if all(len(d) >= samples for d in delivered.values()):
                        complete.set()
            finally:
                snapshots[name] = consumer.statistics()

    put_seconds: list[float] = []
    async with target.client(tls=True) as client, anyio.create_task_group() as tg:
        for name, config in configs.items():
            tg.start_soon(consume, name, config)
        for event in opened.values():
            await event.wait()
        await anyio.sleep(1.0)  # subscriptions and first (empty) reads settle
        next_put = time.perf_counter()
        for seq in range(samples):
            started = time.perf_counter()
            data = _STAMP.pack(seq, started) + _PAD
            await client.call(
                "PutRecord",
                {"StreamName": target.stream_name, "Data": data, "PartitionKey": f"k{seq}"},
            )
            put_seconds.append(time.perf_counter() - started)
            next_put += INTERVAL
            await anyio.sleep(max(0.0, next_put - time.perf_counter()))
        with anyio.move_on_after(10.0):
            await complete.wait()
        tg.cancel_scope.cancel()
    return {"delivered": delivered, "batches": batches, "snapshots": snapshots, "put": put_seconds}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_latency(quick: bool, smoke: bool = False) -> dict[str, Any]:
    samples = 30 if smoke else 200 if quick else 1000
    load = _load()
    with LoadTarget(shards=LATENCY_SHARDS, retain_records=100_000, tls=True) as target:
        outcome = anyio.run(_latency, target, samples)
    rows = []
    for name, config in _latency_configs().items():
        latencies = [v * 1e3 for v in outcome["delivered"][name].values()]
        taken = outcome["snapshots"].get(name)
        shards = [] if taken is None else list(taken.shards.values())
        reads = sum(shard.reads for shard in shards)
        rows.append(
            {
                "name": name,
                "mode": config.mode,
                "idle_backoff_initial": config.idle_backoff_initial,
                "idle_backoff_max": config.idle_backoff_max,
                "max_calls_per_second": config.max_calls_per_second,
                "samples": len(latencies),
                "missing": samples - len(latencies),
                "p50_ms": _quantile(latencies, 0.5) if latencies else None,
                "p90_ms": _quantile(latencies, 0.9) if latencies else None,
                "p99_ms": _quantile(latencies, 0.99) if latencies else None,
                "max_ms": max(latencies, default=None),
                "mean_ms": statistics.fmean(latencies) if latencies else None,
                "batches": outcome["batches"][name],
                "records_per_batch": len(latencies) / outcome["batches"][name]
                if outcome["batches"][name]
                else 0.0,
                "reads": reads,
                "empty_reads": sum(shard.empty_reads for shard in shards),
            }
        )
    puts = [v * 1e3 for v in outcome["put"]]
    return {
        "shards": LATENCY_SHARDS,
        "interval_s": INTERVAL,
        "samples": samples,
        "put_ms_p50": _quantile(puts, 0.5),
        "put_ms_p99": _quantile(puts, 0.99),
        "rows": rows,
        "loadavg_before": load,
        "loadavg_after": _load(),
    }


# -- driver ------------------------------------------------------------------------------------


def run(quick: bool = False, *, smoke: bool = False) -> dict[str, Any]:
    """Run both scenarios and return the figures (``smoke``: tiny, figures meaningless)."""
    started = time.perf_counter()
    results: dict[str, Any] = {"quick": quick, "loadavg_start": _load(), "cpus": os.cpu_count()}
    results["throughput"] = bench_throughput(quick, smoke)
    results["latency"] = bench_latency(quick, smoke)
    results["consumer_defaults"] = {
        k: v for k, v in asdict(ConsumerConfig()).items() if k != "start"
    }
    results["loadavg_end"] = _load()
    results["seconds"] = time.perf_counter() - started
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        f"machine: {results['cpus']} CPUs, load average {results['loadavg_start']} at start, "
        f"{results['loadavg_end']} at end; {results['seconds']:.0f} s in all",
        f"1. decode throughput, {SHARDS}-shard synthetic target ({RECORD_BYTES} B records, "
        "TLS/HTTP2, no limits)",
        _table(
            results["throughput"],
            [
                ("config", "name", _s),
                ("records", "records", _f(0)),
                ("s", "seconds", _f(2)),
                ("rec/s", "records_per_s", _f(0)),
                ("MB/s", "mb_per_s", _f(1)),
                ("events/s", "events_per_s", _f(0)),
                ("rec/read", "user_records_per_read", _f(0)),
                ("client us/rec", "client_cpu_us_per_record", _f(2)),
                ("target us/rec", "target_cpu_us_per_record", _f(2)),
                ("client CPU", "client_cpu_share", _pct),
                ("target CPU", "target_cpu_share", _pct),
                ("throttles", "throttles", _s),
                ("errors", "transient_errors", _s),
            ],
        ),
    ]
    latency = results["latency"]
    lines.append(
        f"2. latency put -> batch delivered, {latency['shards']}-shard target, one put every "
        f"{latency['interval_s'] * 1e3:.0f} ms, {latency['samples']} records; PutRecord "
        f"p50 {latency['put_ms_p50']:.2f} ms, p99 {latency['put_ms_p99']:.2f} ms"
    )
    lines.append(
        _table(
            latency["rows"],
            [
                ("config", "name", _s),
                ("idle backoff s", "idle_backoff_initial", _s),
                ("max", "idle_backoff_max", _s),
                ("samples", "samples", _s),
                ("missing", "missing", _s),
                ("p50 ms", "p50_ms", _f(1)),
                ("p90 ms", "p90_ms", _f(1)),
                ("p99 ms", "p99_ms", _f(1)),
                ("max ms", "max_ms", _f(1)),
                ("rec/batch", "records_per_batch", _f(1)),
                ("reads", "reads", _s),
                ("empty", "empty_reads", _s),
            ],
        )
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer records and samples")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    print(json.dumps(results, indent=2, default=str) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
