"""Producer benchmarks against the loopback load target (its own process).

1. Throughput and CPU per record: 100 B and 10 KiB records, aggregation on and off, pushed
   through one Producer as fast as ``put`` allows (1,000 partition keys) into a 4-shard target
   without limits, then flushed. Client CPU is this process's, target CPU the target process's;
   their ratio shows whether the target could have been the bottleneck. Rows "unpaced" set
   ``rate_limit`` so high that the producer's own pacing (which assumes the service's 1,000
   records/s and 1 MiB/s per shard) does not bind; "default" rows use ``ProducerConfig()``.
2. Share of a throttled target's capacity: a 2-shard target emulating the service's write
   limits, the producer pushing flat out for a while; per shard-second accepted records and
   bytes as a share of 1,000 records/s / 1 MiB/s, throttles, failures and this process's RSS.
   Its keys are spread evenly over the shards (see ``_balanced_keys``), so every shard is
   offered more than it can take for the whole push.
3. Peers on scenario 1's target: boto3 ``put_records`` (500 per call), with and without
   ``aws_kinesis_agg`` aggregation.

Usage: ``.venv/bin/python benchmarks/producer_bench.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

import anyio

from benchmarks._common import VARIANTS
from benchmarks._common import fixed as _f
from benchmarks._common import load as _load
from benchmarks._common import payloads as _payloads
from benchmarks._common import percent as _pct
from benchmarks._common import rss_kib as _rss_kib
from benchmarks._common import text as _s
from benchmarks._common import text_table as _table
from benchmarks.loadtarget import MIB, Faults, Limits, LoadTarget
from kinesis_actors.producer import Producer, ProducerConfig

KEYS = 1000
UNPACED = 1000.0  # rate_limit that keeps the producer's pacer out of the way (no-limit target)
SHARD_RECORDS = 1000  # the emulated per-shard write limits
SHARD_BYTES = MIB


_KEY_NAMES = [f"pk-{index}" for index in range(KEYS)]


# -- scenario 1: throughput and CPU per record ------------------------------------------------


async def _push_count(target: LoadTarget, config: ProducerConfig, size: int, count: int) -> Any:
    payloads = _payloads(size)
    keys = _KEY_NAMES
    async with target.client() as client, Producer(client, target.stream_name, config) as producer:
        cpu, target_cpu, wall = time.process_time(), target.cpu_seconds(), time.perf_counter()
        put = producer.put
        for index in range(count):
            await put(payloads[index % VARIANTS], keys[index % KEYS])
        await producer.flush()
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        target_cpu = target.cpu_seconds() - target_cpu
        metrics = producer.metrics
    return wall, cpu, target_cpu, metrics


def _throughput_row(
    target: LoadTarget,
    name: str,
    config: ProducerConfig,
    size: int,
    count: int,
    backend: str = "asyncio",
) -> dict[str, Any]:
    load = _load()
    wall, cpu, target_cpu, metrics = anyio.run(
        _push_count, target, config, size, count, backend=backend
    )
    records = metrics.records_sent
    return {
        "name": name,
        "backend": backend,
        "record_bytes": size,
        "aggregation": config.aggregation,
        "rate_limit": config.rate_limit,
        "records": count,
        "seconds": wall,
        "records_per_s": records / wall,
        "mb_per_s": records * size / wall / 1e6,
        "client_cpu_us_per_record": cpu / count * 1e6,
        "target_cpu_us_per_record": target_cpu / count * 1e6,
        "target_to_client_cpu": target_cpu / cpu if cpu else float("inf"),
        "client_cpu_share": cpu / wall,
        "records_failed": metrics.records_failed,
        "throttled": metrics.throttled,
        "records_per_kinesis_record": metrics.records_per_kinesis_record,
        "records_per_call": metrics.records_per_call,
        "calls": metrics.calls,
        "loadavg_before": load,
    }


def _counts(quick: bool, smoke: bool) -> dict[int, int]:
    """Records per size: quick ~20k of 100 B and 3k of 10 KiB, full five times that."""
    scale = 0.05 if smoke else 1 if quick else 5
    return {100: int(20_000 * scale), 10_240: int(3_000 * scale)}


def bench_throughput(quick: bool, smoke: bool = False) -> list[dict[str, Any]]:
    counts = _counts(quick, smoke)
    rows = []
    with LoadTarget(shards=4, tls=False) as target:
        # Warm up: connections, caches, imports.
        anyio.run(_push_count, target, ProducerConfig(rate_limit=UNPACED), 100, counts[100] // 10)
        for size, count in counts.items():
            for aggregation in (True, False):
                config = ProducerConfig(aggregation=aggregation, rate_limit=UNPACED)
                label = f"{_size_label(size)} agg={'on' if aggregation else 'off'}"
                rows.append(_throughput_row(target, f"{label} unpaced", config, size, count))
        config = ProducerConfig(rate_limit=UNPACED)
        rows.append(
            _throughput_row(target, "100 B agg=on unpaced", config, 100, counts[100], "trio")
        )
        for aggregation in (True, False):
            config = ProducerConfig(aggregation=aggregation)
            label = f"100 B agg={'on' if aggregation else 'off'} default"
            rows.append(_throughput_row(target, label, config, 100, counts[100]))
    return rows


def _size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


# -- scenario 2: share of a throttled target's capacity ---------------------------------------


def _balanced_keys(shards: int, count: int = KEYS) -> list[str]:
    """``count`` partition keys, the same number on each of ``shards`` even shards, in turn.

    The pusher puts flat out and waits when the producer's bounded queue is full; the queue
    then fills with the backlog of the shard that gets the most records, and puts are admitted
    only as fast as that shard drains. With 1,000 keys hashed at random a shard's share of the
    records follows its share of the keys: over 4 shards, 251 / 230 / 222 / 297. With three
    shards at capacity the one of 222 keys was offered 4 x 222 / 1,000 = 89 % of its capacity
    and less once its own backlog ran out (84-88 % measured, each second its records were put),
    which the capacity figures counted as the producer's under-delivery. With as many keys on
    each shard every shard keeps a backlog (about 2,000 records each, measured) all along.
    Each shard covers an equal slice of the MD5 hash range, as the load target splits it.
    """
    each = -(-count // shards)
    buckets: list[list[str]] = [[] for _ in range(shards)]
    index = 0
    while min(len(bucket) for bucket in buckets) < each:
        key = f"pk-{index}"
        index += 1
        shard = int.from_bytes(hashlib.md5(key.encode()).digest(), "big") * shards >> 128
        if len(buckets[shard]) < each:
            buckets[shard].append(key)
    return [buckets[turn % shards][turn // shards] for turn in range(each * shards)][:count]


async def _push_for(
    target: LoadTarget, config: ProducerConfig, size: int, seconds: float, shards: int
) -> dict[str, Any]:
    payloads = _payloads(size)
    keys = _balanced_keys(shards)
    rss: list[tuple[float, int]] = []
    started = time.perf_counter()

    async def sample() -> None:
        while True:
            rss.append((round(time.perf_counter() - started, 2), _rss_kib()))
            await anyio.sleep(0.5)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        async with (
            target.client() as client,
            Producer(client, target.stream_name, config) as producer,
        ):
            put = producer.put
            deadline = anyio.current_time() + seconds
            index = 0
            while anyio.current_time() < deadline:
                for _ in range(64):
                    await put(payloads[index % VARIANTS], keys[index % len(keys)])
                    index += 1
            pushed = time.perf_counter() - started
            await producer.flush()
            flushed = time.perf_counter() - started
            metrics = producer.metrics
        rss.append((round(time.perf_counter() - started, 2), _rss_kib()))
        tg.cancel_scope.cancel()
    return {"metrics": metrics, "rss": rss, "push_seconds": pushed, "total_seconds": flushed}


def _steady_shares(
    series: dict[str, list[list[int]]],
) -> tuple[list[float], list[float], list[float], int]:
    """Per shard-second shares of capacity over each shard's steady state.

    A shard's steady state runs from two seconds after its first accepted record (the bucket's
    initial burst) to two seconds before its last (the partial last second and the flush's
    tail; shards finish their tails at different times). The share of a shard-second is the
    larger of its record and byte shares: whichever limit binds. Returns (shares, record
    shares, byte shares, longest steady span in seconds).
    """
    shares, record_shares, byte_shares = [], [], []
    longest = 0
    for shard in sorted(series):
        rows = {row[0]: row for row in series[shard]}
        active = sorted(second for second, row in rows.items() if row[1])
        if not active:
            continue
        steady = range(active[0] + 2, active[-1] - 1)
        longest = max(longest, len(steady))
        for second in steady:
            row = rows.get(second, [second, 0, 0, 0, 0])
            record_share, byte_share = row[1] / SHARD_RECORDS, row[2] / SHARD_BYTES
            record_shares.append(record_share)
            byte_shares.append(byte_share)
            shares.append(max(record_share, byte_share))
    return shares, record_shares, byte_shares, longest


def _capacity_row(
    name: str,
    config: ProducerConfig,
    size: int,
    seconds: float,
    shards: int = 2,
    rtt: float = 0.0,
) -> dict[str, Any]:
    load = _load()
    faults = Faults(delay_seconds=rtt, operations=("PutRecords",)) if rtt else None
    with LoadTarget(shards=shards, tls=False, limits=Limits(), faults=faults) as target:
        cpu, target_cpu = time.process_time(), target.cpu_seconds()
        outcome = anyio.run(_push_for, target, config, size, seconds, shards)
        cpu, target_cpu = time.process_time() - cpu, target.cpu_seconds() - target_cpu
        stats = target.stats()
    metrics = outcome["metrics"]
    series: dict[str, list[list[int]]] = stats["series"]
    shares, record_shares, byte_shares, steady_seconds = _steady_shares(series)
    rss = outcome["rss"]
    mean = statistics.fmean(shares) if shares else 0.0
    throttled_target = sum(row[3] for rows in series.values() for row in rows)
    return {
        "name": name,
        "record_bytes": size,
        "aggregation": config.aggregation,
        "rate_limit": config.rate_limit,
        "linger": config.linger,
        "preserve_order": config.preserve_order,
        "max_in_flight_calls": config.max_in_flight_calls,
        "shards": shards,
        "put_records_delay": rtt,
        "push_seconds": outcome["push_seconds"],
        "total_seconds": outcome["total_seconds"],
        "steady_seconds": steady_seconds,
        "share_mean": mean,
        "share_min": min(shares, default=0.0),
        "share_max": max(shares, default=0.0),
        "share_cv": statistics.pstdev(shares) / mean if mean else 0.0,
        "records_share_mean": statistics.fmean(record_shares) if record_shares else 0.0,
        "bytes_share_mean": statistics.fmean(byte_shares) if byte_shares else 0.0,
        "records_sent": metrics.records_sent,
        "records_failed": metrics.records_failed,
        "throttled": metrics.throttled,
        "throttled_at_target": throttled_target,
        "retries": metrics.retries,
        "records_per_kinesis_record": metrics.records_per_kinesis_record,
        "records_per_call": metrics.records_per_call,
        "calls": metrics.calls,
        "client_cpu_share": cpu / outcome["total_seconds"],
        "client_cpu_us_per_record": cpu / metrics.records_sent * 1e6,
        "target_cpu_us_per_record": target_cpu / metrics.records_sent * 1e6,
        "peak_outstanding_records": metrics.peak_outstanding_records,
        "backpressure_cycles": metrics.backpressure_cycles,
        "rss_kib_first": rss[0][1],
        "rss_kib_last": rss[-1][1],
        "rss_kib_max": max(value for _, value in rss),
        "rss_kib_samples": rss,
        "series": {shard: [row[:4] for row in rows] for shard, rows in series.items()},
        "loadavg_before": load,
        "loadavg_after": _load(),
    }


def bench_capacity(
    quick: bool, variations: bool = True, smoke: bool = False
) -> list[dict[str, Any]]:
    seconds = 3.0 if smoke else 8.0 if quick else 30.0
    short = 8.0 if quick else 12.0
    base = ProducerConfig()
    rows = [
        _capacity_row("1 KiB agg=on default", base, 1024, seconds),
        _capacity_row("100 B agg=off default", replace(base, aggregation=False), 100, seconds),
    ]
    if variations:
        for name, config, size in (
            ("1 KiB agg=on rate_limit=1.0", replace(base, rate_limit=1.0), 1024),
            (
                "100 B agg=off rate_limit=1.0",
                replace(base, aggregation=False, rate_limit=1.0),
                100,
            ),
            (
                "100 B agg=off preserve_order=off",
                replace(base, aggregation=False, preserve_order=False),
                100,
            ),
        ):
            rows.append(_capacity_row(name, config, size, short))
        rows.append(_capacity_row("1 KiB agg=on default, 30 ms delay", base, 1024, short, rtt=0.03))
    return rows


# -- scenario 3: peers -------------------------------------------------------------------------


def _boto3_push(target: LoadTarget, size: int, count: int, aggregate: bool) -> dict[str, Any]:
    import boto3  # noqa: PLC0415 - optional peer

    client = boto3.client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url=target.endpoint_url,
        aws_access_key_id="load-target",
        aws_secret_access_key="load-target",
    )
    payloads = _payloads(size)
    keys = _KEY_NAMES
    client.put_records(StreamName=target.stream_name, Records=[{"Data": b"x", "PartitionKey": "w"}])
    cpu, target_cpu, wall = time.process_time(), target.cpu_seconds(), time.perf_counter()
    sent_records = failed = calls = 0

    def send(batch: list[dict[str, Any]]) -> None:
        nonlocal failed, calls
        while batch:
            answer = client.put_records(StreamName=target.stream_name, Records=batch)
            calls += 1
            batch = [
                entry
                for entry, result in zip(batch, answer["Records"], strict=True)
                if result.get("ErrorCode")
            ]
            failed += len(batch)

    if aggregate:
        from aws_kinesis_agg.aggregator import RecordAggregator  # noqa: PLC0415

        aggregator = RecordAggregator()
        batch: list[dict[str, Any]] = []
        batch_bytes = 0

        def add(record: Any) -> None:
            nonlocal batch, batch_bytes
            key, explicit, data = record.get_contents()
            entry = {"Data": data, "PartitionKey": key}
            if explicit is not None:
                entry["ExplicitHashKey"] = explicit
            if len(batch) == 500 or batch_bytes + len(data) > 5 * MIB:
                send(batch)
                batch, batch_bytes = [], 0
            batch.append(entry)
            batch_bytes += len(data) + len(key)

        for index in range(count):
            full = aggregator.add_user_record(keys[index % KEYS], payloads[index % VARIANTS])
            if full is not None:
                add(full)
        rest = aggregator.clear_and_get()
        if rest is not None:
            add(rest)
        if batch:
            send(batch)
    else:
        for start in range(0, count, 500):
            send(
                [
                    {"Data": payloads[index % VARIANTS], "PartitionKey": keys[index % KEYS]}
                    for index in range(start, min(count, start + 500))
                ]
            )
    sent_records = count
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    target_cpu = target.cpu_seconds() - target_cpu
    return {
        "name": f"boto3 {_size_label(size)} agg={'on' if aggregate else 'off'}",
        "backend": "sync",
        "record_bytes": size,
        "aggregation": aggregate,
        "records": count,
        "seconds": wall,
        "records_per_s": sent_records / wall,
        "mb_per_s": sent_records * size / wall / 1e6,
        "client_cpu_us_per_record": cpu / count * 1e6,
        "target_cpu_us_per_record": target_cpu / count * 1e6,
        "target_to_client_cpu": target_cpu / cpu if cpu else float("inf"),
        "client_cpu_share": cpu / wall,
        "calls": calls,
        "retried_entries": failed,
        "loadavg_after": _load(),
    }


def bench_peers(quick: bool, smoke: bool = False) -> dict[str, Any]:
    counts = _counts(quick, smoke)
    rows: list[dict[str, Any]] = []
    with LoadTarget(shards=4, tls=False) as target:
        for size, count in counts.items():
            for aggregate in (True, False):
                rows.append(_boto3_push(target, size, count, aggregate))
    missing = [
        name for name in ("aiokpl", "kinesis") if importlib.util.find_spec(name) is None
    ]  # async-kinesis installs the module ``kinesis``
    return {"rows": rows, "not_installed": missing}


# -- driver ------------------------------------------------------------------------------------


def run(
    quick: bool = False, *, peers: bool = True, variations: bool = True, smoke: bool = False
) -> dict[str, Any]:
    """Run every scenario and return the figures.

    ``smoke`` shrinks everything to a few seconds (for tests; its figures mean nothing) and
    skips the capacity variations.
    """
    started = time.perf_counter()
    results: dict[str, Any] = {"quick": quick, "loadavg_start": _load(), "cpus": os.cpu_count()}
    results["throughput"] = bench_throughput(quick, smoke)
    results["capacity"] = bench_capacity(quick, variations and not smoke, smoke)
    if peers:
        results["peers"] = bench_peers(quick, smoke)
    results["loadavg_end"] = _load()
    results["seconds"] = time.perf_counter() - started
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        f"machine: {results['cpus']} CPUs, load average {results['loadavg_start']} at start, "
        f"{results['loadavg_end']} at end; {results['seconds']:.0f} s in all",
        "1. throughput into a 4-shard target without limits (HTTP/1.1, 1,000 keys)",
    ]
    throughput_columns = [
        ("config", "name", _s),
        ("loop", "backend", _s),
        ("records", "records", _f(0)),
        ("rec/s", "records_per_s", _f(0)),
        ("MB/s", "mb_per_s", _f(1)),
        ("client us/rec", "client_cpu_us_per_record", _f(1)),
        ("target us/rec", "target_cpu_us_per_record", _f(1)),
        ("target/client", "target_to_client_cpu", _f(2)),
        ("rec/KinesisRec", "records_per_kinesis_record", _f(1)),
        ("rec/call", "records_per_call", _f(0)),
        ("failed", "records_failed", _s),
    ]
    lines.append(_table(results["throughput"], throughput_columns))
    lines.append(
        "2. share of a 2-shard target's emulated capacity (1,000 rec/s, 1 MiB/s per shard), "
        "steady-state shard-seconds"
    )
    capacity = [
        dict(
            row,
            rss=f"{row['rss_kib_first'] / 1024:.0f}/{row['rss_kib_last'] / 1024:.0f}/"
            f"{row['rss_kib_max'] / 1024:.0f}",
        )
        for row in results["capacity"]
    ]
    lines.append(
        _table(
            capacity,
            [
                ("config", "name", _s),
                ("s", "steady_seconds", _s),
                ("share", "share_mean", _pct),
                ("min", "share_min", _pct),
                ("max", "share_max", _pct),
                ("cv", "share_cv", _f(3)),
                ("rec share", "records_share_mean", _pct),
                ("byte share", "bytes_share_mean", _pct),
                ("throttled", "throttled", _s),
                ("failed", "records_failed", _s),
                ("rec/KRec", "records_per_kinesis_record", _f(1)),
                ("rec/call", "records_per_call", _f(1)),
                ("client us/rec", "client_cpu_us_per_record", _f(1)),
                ("RSS MiB first/last/max", "rss", _s),
            ],
        )
    )
    peers = results.get("peers")
    if peers:
        lines.append("3. peers on scenario 1's target")
        lines.append(_table(peers["rows"], throughput_columns[:8]))
        if peers["not_installed"]:
            lines.append(f"  not installed (not benchmarked): {', '.join(peers['not_installed'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer records, shorter runs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--no-peers", action="store_true", help="skip the boto3 peers")
    parser.add_argument(
        "--no-variations", action="store_true", help="skip the capacity config variations"
    )
    args = parser.parse_args(argv)
    results = run(quick=args.quick, peers=not args.no_peers, variations=not args.no_variations)
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
