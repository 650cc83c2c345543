"""The suite's scenarios; each returns a JSON-ready dict and runs every peer on one target.

1. ``producer_throughput``: 100 B and 10 KiB records, aggregation on and off, unpaced, into a
   4-shard target without limits; records/s and client CPU µs/record, target CPU beside it.
2. ``producer_capacity``: each producer paced as it ships, 100 B records without aggregation,
   flat out into a 2-shard target emulating the service's write limits: the share of the
   emulated capacity each second, and RSS over time (sustained backpressure: memory).
3. ``consumer_throughput``: decode throughput from a 4-shard synthetic target (endless
   100 B records, plain and as KPL aggregates of 10), polling and EFO.
4. ``latency``: put -> batch delivered, p50/p99, this project's EFO and polling consumers
   (``consumer_bench.bench_latency``).
5. ``consumer_memory``: an 8-shard EFO consumer whose loop stops taking batches while the
   synthetic target keeps every shard full; RSS must stay flat, bounded by shards x prefetch.

Throughput rows carry ``vs_project`` ratios (peer / this project, same config) and whether
the target's CPU stayed below the client's: if it did not, the target may have been the
bottleneck and the row says nothing about the client.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from benchmarks import consumer_bench
from benchmarks._common import Clock, RssSampler, cpu_figures, load, rss_kib, size_label
from benchmarks.loadtarget import MIB, Limits, LoadTarget, Synthetic
from benchmarks.peers import (
    CONSUMERS,
    PRODUCERS,
    PROJECT,
    ConsumerPeer,
    ConsumeSpec,
    ProducerPeer,
    PushSpec,
    Unsupported,
)
from kinesis_actors import Consumer, ConsumerConfig, StartingPosition

__all__ = [
    "SCALES",
    "Scale",
    "consumer_memory",
    "consumer_throughput",
    "latency",
    "producer_capacity",
    "producer_throughput",
]

SHARD_RECORDS, SHARD_BYTES = 1000, MIB  # the emulated per-shard write limits
AGG_RECORDS = 10


@dataclass(frozen=True, slots=True)
class Scale:
    """How much each scenario does: ``smoke`` (tests), ``quick`` (CI) or ``full`` (publish)."""

    name: str
    small: int  # 100 B records per producer row
    large: int  # 10 KiB records per producer row
    capacity_seconds: float
    consume: int  # user records per consumer row
    stall_seconds: float
    repeats: int = 1  # runs per throughput row, peers interleaved; the median run is reported


SCALES = {
    "smoke": Scale("smoke", 2_000, 200, 1.5, 20_000, 1.5),
    "quick": Scale("quick", 10_000, 1_000, 5.0, 40_000, 4.0),
    # Single runs on this VM varied by up to 1.7x (the same code, 12.4 and 21.5 µs/record):
    # publishing runs take the median of three.
    "full": Scale("full", 100_000, 10_000, 30.0, 1_000_000, 30.0, repeats=3),
}

Runner = Callable[[LoadTarget, Any, Clock], dict[str, Any]]


def run_row(name: str, runner: Runner, target: LoadTarget, spec: Any, size: int) -> dict[str, Any]:
    """One peer, one row. A peer that cannot run it yields a row saying why; this project
    failing is a bug and raises.

    Every row starts from the same collector state (a full collection, before its clock
    starts): otherwise a full collection falls in whichever row pushes the collector past
    its threshold, charging one row for what the rows before it left (measured: one such
    collection added 1.1-2.0 µs a record to a 100,000-record row, in 2 of 10 runs).
    """
    gc.collect()
    clock = Clock(target)
    started = time.perf_counter()
    try:
        extra = runner(target, spec, clock)
    except Unsupported as exc:
        return {"peer": name, "status": "unsupported", "reason": str(exc)}
    except Exception as exc:
        if name == PROJECT:
            raise
        reason = f"{type(exc).__name__}: {exc}"[:300]
        return {"peer": name, "status": "failed", "reason": reason}
    if not extra["records"]:
        # A row that moved nothing has no figures (its CPU per record would be the whole
        # run's): seen once, async-kinesis's consumer reading nothing in a smoke row.
        reason = f"moved no record in {time.perf_counter() - started:.1f} s"
        if name == PROJECT:
            raise RuntimeError(f"{name} {reason}")
        return {"peer": name, "status": "failed", "reason": reason}
    row = {"peer": name, "status": "ok", **cpu_figures(extra["records"], size, clock)}
    row.update(extra)
    row["elapsed_s"] = time.perf_counter() - started
    return row


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One peer's repeated runs of a row as one row: the run with the median rate, plus every
    run's rate in ``runs_records_per_s``. A run that did not succeed is reported instead (a
    peer that fails once is not shown by its lucky runs)."""
    failed = [run for run in runs if run["status"] != "ok"]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=lambda run: run["records_per_s"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["runs_records_per_s"] = [run["records_per_s"] for run in runs]
    return row


def _repeated(
    scale: Scale,
    peers: list[Any],
    run: Callable[[Any], dict[str, Any]],
    progress: Callable[[str], None],
    what: str,
) -> list[dict[str, Any]]:
    """``run(peer)`` ``scale.repeats`` times per peer, peers interleaved so that drift in the
    machine's speed falls on every peer alike; one median row per peer, in ``peers`` order."""
    runs: dict[str, list[dict[str, Any]]] = {peer.name: [] for peer in peers}
    for repeat in range(scale.repeats):
        for peer in peers:
            suffix = f" (run {repeat + 1}/{scale.repeats})" if scale.repeats > 1 else ""
            progress(f"{what}, {peer.name}{suffix}")
            runs[peer.name].append(run(peer))
    return [median_row(runs[peer.name]) for peer in peers]


def _ratios(rows: list[dict[str, Any]]) -> None:
    """Add ``vs_project`` (rate) and ``cpu_vs_project`` (µs/record) to the peers' ok rows."""
    project = {row["config"]: row for row in rows if row["peer"] == PROJECT}
    for row in rows:
        base = project.get(row["config"])
        if row["status"] != "ok" or base is None or base["status"] != "ok":
            continue
        row["vs_project"] = row["records_per_s"] / base["records_per_s"]
        row["cpu_vs_project"] = (
            row["client_cpu_us_per_record"] / base["client_cpu_us_per_record"]
            if base["client_cpu_us_per_record"]
            else None
        )


# -- 1. producer throughput --------------------------------------------------------------------


def producer_throughput(
    scale: Scale, peers: list[ProducerPeer] = PRODUCERS, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with LoadTarget(shards=4, tls=False) as target:
        for peer in peers:  # warm up: imports, connection pools, caches
            run_row(peer.name, peer.push, target, PushSpec(100, True, count=scale.small // 10), 100)
        # (size, count, aggregation, a new key per record): the last row is the UUID keys'
        # workload, where no key repeats (the others cycle through 1,000 keys).
        configs = [
            (size, count, aggregation, False)
            for size, count in ((100, scale.small), (10_240, scale.large))
            for aggregation in (True, False)
        ]
        configs.insert(1, (100, scale.small, True, True))
        for size, count, aggregation, unique in configs:
            config = f"{size_label(size)} agg={'on' if aggregation else 'off'}"
            config += " new key per record" if unique else ""
            spec = PushSpec(size, aggregation, count=count, unique_keys=unique)

            def push(peer: ProducerPeer, spec: PushSpec = spec, size: int = size) -> Any:
                return run_row(peer.name, peer.push, target, spec, size)

            for median in _repeated(scale, peers, push, progress, f"producer throughput: {config}"):
                row = {"config": config, "record_bytes": size, "aggregation": aggregation}
                rows.append(row | median)
    _ratios(rows)
    return {"shards": 4, "limits": None, "rows": rows}


# -- 2. producer share of capacity and RSS under backpressure ----------------------------------


def _share_timeline(series: dict[str, list[list[int]]], shards: int) -> list[list[float]]:
    """[second since the first accepted record, share of the stream's emulated capacity]."""
    totals: dict[int, list[int]] = {}
    for rows in series.values():
        for second, records, size, *_ in rows:
            total = totals.setdefault(second, [0, 0])
            total[0] += records
            total[1] += size
    active = sorted(second for second, (records, _) in totals.items() if records)
    if not active:
        return []
    return [
        [
            float(second - active[0]),
            max(
                totals.get(second, [0, 0])[0] / (SHARD_RECORDS * shards),
                totals.get(second, [0, 0])[1] / (SHARD_BYTES * shards),
            ),
        ]
        for second in range(active[0], active[-1] + 1)
    ]


def producer_capacity(
    scale: Scale, peers: list[ProducerPeer] = PRODUCERS, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    shards, size = 2, 100
    for peer in peers:
        progress(f"producer capacity: {peer.name}")
        with LoadTarget(shards=shards, tls=False, limits=Limits()) as target:
            spec = PushSpec(size, False, seconds=scale.capacity_seconds, paced=True)
            with RssSampler() as rss:
                row = run_row(peer.name, peer.push, target, spec, size)
            stats = target.stats()
        if row["status"] == "ok":
            timeline = _share_timeline(stats["series"], shards)
            steady = [share for _, share in timeline[2:-2]] or [s for _, s in timeline]
            row |= {
                "share_timeline": timeline,
                "share_mean": statistics.fmean(steady) if steady else 0.0,
                "throttled_at_target": stats["totals"]["throttled"],
                "rss_kib": rss.samples,
                "rss_kib_first": rss.samples[0][1],
                "rss_kib_max": max(value for _, value in rss.samples),
                "rss_kib_last": rss.samples[-1][1],
            }
        rows.append(row)
    return {
        "shards": shards,
        "record_bytes": size,
        "aggregation": False,
        "seconds": scale.capacity_seconds,
        "limits": {"records_per_s": SHARD_RECORDS, "bytes_per_s": SHARD_BYTES},
        "rows": rows,
    }


# -- 3. consumer decode throughput -------------------------------------------------------------


def consumer_throughput(
    scale: Scale, peers: list[ConsumerPeer] = CONSUMERS, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    variants = [
        ("plain", Synthetic(record_size=100, records_per_event=1000), 10_000),
        (
            f"agg x{AGG_RECORDS}",
            Synthetic(
                record_size=100,
                records_per_call=10_000 // AGG_RECORDS,
                records_per_event=1000 // AGG_RECORDS,
                payloads=consumer_bench._aggregates(),
            ),
            10_000 // AGG_RECORDS,
        ),
    ]
    for label, synthetic, limit in variants:
        with LoadTarget(shards=4, synthetic=synthetic, tls=True) as target:
            aggregated = label != "plain"
            for peer in peers:  # warm up: imports, TLS, the first registration
                warm = ConsumeSpec(1000, "polling", aggregated, limit)
                run_row(peer.name, peer.consume, target, warm, 100)
            for mode in ("polling", "efo"):
                config = f"{label} {mode}"
                spec = ConsumeSpec(scale.consume, mode, aggregated, limit)

                def consume(peer: ConsumerPeer, spec: ConsumeSpec = spec) -> Any:
                    return run_row(peer.name, peer.consume, target, spec, 100)

                for median in _repeated(
                    scale, peers, consume, progress, f"consumer throughput: {config}"
                ):
                    row = {"config": config, "mode": mode, "aggregated": aggregated}
                    rows.append(row | median)
    _ratios(rows)
    return {"shards": 4, "record_bytes": 100, "rows": rows}


# -- 4. latency --------------------------------------------------------------------------------


def latency(scale: Scale, progress: Callable[[str], None] = print) -> dict[str, Any]:
    progress("latency: put -> batch delivered")
    result = consumer_bench.bench_latency(scale.name != "full", smoke=scale.name == "smoke")
    result["peer"] = PROJECT
    result["peers_not_measured"] = (
        "peers are compared on throughput and CPU; latency is this project's read modes only"
    )
    return result


# -- 5. memory of a stalled EFO consumer -------------------------------------------------------


async def _stall(target: LoadTarget, config: ConsumerConfig, scale: Scale) -> dict[str, Any]:
    sampler = RssSampler(interval=0.1)
    phases: dict[str, float] = {}
    before = after = records = resumed_at = stall_max = rss_at_stall = 0
    async with target.client(tls=True) as client:
        with sampler:
            async with Consumer(client, target.stream_name, config) as consumer:
                warm_until = time.perf_counter() + min(2.0, scale.stall_seconds)
                async for batch in consumer:
                    records += len(batch)
                    consumer.commit(batch)
                    if "stall" not in phases and time.perf_counter() >= warm_until:
                        # Stop taking batches: the handler is stuck, the shards stay full.
                        phases["stall"] = sampler.samples[-1][0]
                        before = target.stats()["totals"]["events"]
                        rss_at_stall = rss_kib()
                        await anyio.sleep(scale.stall_seconds)
                        after = target.stats()["totals"]["events"]
                        phases["resume"] = sampler.samples[-1][0]
                        stall_max = max(
                            value
                            for at, value in sampler.samples
                            if phases["stall"] <= at <= phases["resume"]
                        )
                        resumed_at = records
                    elif "resume" in phases and records - resumed_at >= 8 * len(batch):
                        break
    return {
        "records": records,
        "stall_at_s": phases["stall"],
        "resume_at_s": phases["resume"],
        "events_during_stall": after - before,
        "rss_kib_at_stall": rss_at_stall,
        "rss_kib_max_during_stall": stall_max,
        "rss_kib": sampler.samples,
    }


def consumer_memory(scale: Scale, progress: Callable[[str], None] = print) -> dict[str, Any]:
    progress("consumer memory: 8-shard EFO consumer, stalled downstream")
    shards, record_size, per_event = 8, 1024, 500
    synthetic = Synthetic(record_size=record_size, records_per_event=per_event)
    config = ConsumerConfig(start=StartingPosition.trim_horizon(), mode="efo", registration="lazy")
    load_before = load()
    with LoadTarget(shards=shards, synthetic=synthetic, tls=True) as target:
        outcome = anyio.run(_stall, target, config, scale)
    event_kib = record_size * per_event / 1024
    # Each shard holds ``prefetch`` decoded batches plus what its HTTP/2 stream window lets the
    # target send ahead; twice the batches' payload bounds the decoded form generously.
    bound_kib = shards * config.prefetch_batches * event_kib * 2
    growth = outcome["rss_kib_max_during_stall"] - outcome["rss_kib_at_stall"]
    outcome |= {
        "peer": PROJECT,
        "shards": shards,
        "prefetch_batches": config.prefetch_batches,
        "event_kib": event_kib,
        "stall_seconds": scale.stall_seconds,
        "bound_kib": bound_kib,
        "rss_growth_kib": growth,
        "flat": growth <= bound_kib,
        "loadavg_before": load_before,
    }
    return outcome
