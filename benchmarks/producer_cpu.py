"""Client CPU per record of the producer: unpaced, at a paced stream's capacity, with a new
key per record (beside boto3 and async-kinesis), and unpaced at many shards.

    .venv/bin/python -m benchmarks.producer_cpu [--rounds 5] [--rows a,b,...] [--json]

Every row runs in a fresh process with its own load target, rows in turn, ``--rounds`` times;
the table gives each row's median and range, and each row's ratio to the first, round by
round (the rounds pair rows run back to back, so a drift of the machine's speed during the
run moves both sides of a ratio alike). The clock (this process's CPU,
``time.process_time``) runs from the open producer's first put to the end of its flush.
Records are 100 bytes, aggregated, pushed with ``put_many`` of 500 (``put`` in the rows named
so); 1,000 keys spread evenly over the shards unless the row takes a new key per record.

- ``unpaced-N``: an N-shard target without limits, ``rate_limit`` lifted so that the
  producer's pacing never binds (the client alone);
- ``unpaced-1024`` runs the default queue, sized by the shards (81,920 records, 64 MiB at
  1,024), and eight times the records (as many a shard as ``unpaced-128`` would get);
  ``unpaced-1024-floor`` the queue every shard count had before it was sized (10,000
  records, 8 MiB: the floor), on the records of ``unpaced-16``. An aggregate holds the
  records of its half shard that arrived within a linger or a call's share of the queue,
  so with the floor at 1,024 shards it holds a sixty-fourth of what it holds at 16, and the
  client's CPU a record follows the number of aggregates;
- ``unpaced-1024-deep``: 1,024 shards as deep as 16: the queue limits 64 times the floor
  (as many records a shard as ``unpaced-16`` holds), 64 times the records, and a ``linger``
  of 2 s: what is left that grows with the shard count;
- ``unpaced-16-long``: ``unpaced-16`` with the records of ``unpaced-1024`` (eight times as
  many); ``unpaced-16-deep-queue`` the same with the queue 1,000 shards get (eight times
  the floor: 80,000 records, 64 MiB): what the queue's depth costs a record by itself, its
  aggregates no emptier; ``unpaced-16-long-again`` is ``unpaced-16-long`` once more, an
  A/A control: run beside it, their ratio round by round is what noise alone gives;
- ``capacity``: a 2-shard target emulating the service's write limits (1,000 records/s,
  1 MiB/s a shard) and ``ProducerConfig()`` (pacing at those limits): the producer at the
  stream's capacity, its puts waiting for room. Beside the CPU: the share of the target's
  capacity each steady shard-second (as the producer benchmark's scenario 2 counts it), the
  waits for room and the calls;
- ``unpaced-2-bursts``: ``unpaced-2`` with its records arriving as they leave at capacity,
  3,500 (a little under what a call carries there, a quantum of both shards' tokens: one
  call a burst, at the linger) then 0.2 s of
  idle (the quantum): the same work as ``unpaced-2``, done in bursts by a process that sleeps
  between them, without any pacing. What it costs over ``unpaced-2`` is what bursts cost on
  this machine (the caches and the scheduler), not the pacing's machinery; the ``capacity``
  row is best read against it;
- ``newkey``: a new partition key per record, unpaced, 4 shards; ``newkey-boto3``
  (``put_records`` of 500 with aws-kinesis-agg) and ``newkey-async-kinesis`` (its KPL
  aggregation, which takes no keys) on the same keys and target.

Run by hand (a few minutes), not by the suite.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio

from benchmarks._common import Clock, load, payloads
from benchmarks._rounds import in_turn, median_range, ratio_lines
from benchmarks.loadtarget import Limits, LoadTarget
from benchmarks.peers import UNPACED, PushSpec, partition_keys, push_async_kinesis, push_boto3
from benchmarks.producer_bench import _balanced_keys, _steady_shares
from kinesis_actors.producer import Producer, ProducerConfig

__all__ = ["ROWS", "main", "measure"]

RECORD_BYTES = 100
COUNT = 200_000
BATCH = 500
FLOOR_RECORDS, FLOOR_BYTES = 10_000, 8 * 1024 * 1024  # the default queue's floor (ProducerConfig)
BURST = 3_500  # records a burst (unpaced-2-bursts): under a call's worth, so one call each
BURST_IDLE = 0.2  # seconds of sleep after each: the pacing's quantum


@dataclass(frozen=True, slots=True)
class Row:
    """One row: the target (``shards``, emulated ``limits`` or none) and what pushes."""

    shards: int
    paced: bool = False
    unique_keys: bool = False
    peer: str = "project"  # or boto3, async-kinesis
    single: bool = False  # put per record instead of put_many
    depth: int | None = None  # the queue limits, the floor's times this (None: sized)
    records: int = 1  # the records pushed, COUNT times this
    linger: float | None = None  # ProducerConfig's default unless set
    bursts: bool = False  # BURST records, then BURST_IDLE seconds of sleep, and again


ROWS: dict[str, Row] = {
    "unpaced-2": Row(2),
    "capacity": Row(2, paced=True),
    "unpaced-2-put": Row(2, single=True),
    "unpaced-2-bursts": Row(2, bursts=True),
    "capacity-put": Row(2, paced=True, single=True),
    "unpaced-16": Row(16),
    "unpaced-1024": Row(1024, records=8),
    "unpaced-1024-floor": Row(1024, depth=1),
    "unpaced-1024-deep": Row(1024, depth=64, records=64, linger=2.0),
    "unpaced-16-long": Row(16, records=8),
    # The same row again: run beside unpaced-16-long, their pairwise ratio is the noise.
    "unpaced-16-long-again": Row(16, records=8),
    "unpaced-16-deep-queue": Row(16, depth=8, records=8),
    "newkey": Row(4, unique_keys=True),
    "newkey-boto3": Row(4, unique_keys=True, peer="boto3"),
    "newkey-async-kinesis": Row(4, unique_keys=True, peer="async-kinesis"),
}


async def _push(
    target: LoadTarget,
    config: ProducerConfig,
    keys: list[str],
    count: int,
    single: bool,
    bursts: bool = False,
) -> tuple[Clock, dict[str, Any]]:
    data = payloads(RECORD_BYTES)
    clock = Clock(target)
    async with (
        target.client() as client,
        Producer(client, target.stream_name, config) as producer,
    ):
        gc.collect()
        clock.start()
        if single:
            put = producer.put
            for index in range(count):
                await put(data[index % len(data)], keys[index % len(keys)])
        else:
            put_many = producer.put_many
            for start in range(0, count, BATCH):
                await put_many(
                    [
                        (data[index % len(data)], keys[index % len(keys)])
                        for index in range(start, min(count, start + BATCH))
                    ]
                )
                if bursts and (start + BATCH) % BURST == 0:
                    await anyio.sleep(BURST_IDLE)
        await producer.flush()
        clock.stop()
        return clock, producer.metrics.to_dict()


def _project(row: Row, count: int) -> dict[str, Any]:
    keys = (
        partition_keys(PushSpec(RECORD_BYTES, True, count=count, unique_keys=True))
        if row.unique_keys
        else _balanced_keys(row.shards)
    )
    config = ProducerConfig() if row.paced else ProducerConfig(rate_limit=UNPACED)
    if row.depth is not None:
        config = replace(
            config,
            queue_limit_records=FLOOR_RECORDS * row.depth,
            queue_limit_bytes=FLOOR_BYTES * row.depth,
        )
    if row.linger is not None:
        config = replace(config, linger=row.linger)
    with LoadTarget(shards=row.shards, tls=False) as warm:  # imports, caches, connections
        anyio.run(_push, warm, ProducerConfig(rate_limit=UNPACED), _balanced_keys(2), 20_000, False)
    limits = Limits() if row.paced else None
    with LoadTarget(shards=row.shards, tls=False, limits=limits) as target:
        clock, metrics = anyio.run(_push, target, config, keys, count, row.single, row.bursts)
        stats = target.stats()
    figures: dict[str, Any] = {
        "client_cpu_us_per_record": clock.cpu / count * 1e6,
        "target_cpu_us_per_record": clock.target_cpu / count * 1e6,
        "seconds": clock.wall,
        "records_per_aggregate": count / max(1, metrics["kinesis_records_sent"]),
        "backpressure_cycles": metrics["backpressure_cycles"],
        "calls": metrics["calls"],
        "kinesis_records": metrics["kinesis_records_sent"],
        "throttled": metrics["throttled"],
        "records_failed": metrics["records_failed"],
    }
    if row.paced:
        shares, _, _, steady = _steady_shares(stats["series"])
        figures |= {
            "share_mean": statistics.fmean(shares) if shares else 0.0,
            "share_min": min(shares, default=0.0),
            "steady_seconds": steady,
        }
    return figures


def _peer(row: Row, count: int) -> dict[str, Any]:
    push: Callable[[LoadTarget, PushSpec, Clock], dict[str, Any]] = (
        push_boto3 if row.peer == "boto3" else push_async_kinesis
    )
    with LoadTarget(shards=row.shards, tls=False) as target:
        push(target, PushSpec(RECORD_BYTES, True, count=count // 10), Clock(target))  # warm up
        gc.collect()
        clock = Clock(target)
        spec = PushSpec(RECORD_BYTES, True, count=count, unique_keys=row.unique_keys)
        extra = push(target, spec, clock)
    return {
        "client_cpu_us_per_record": clock.cpu / count * 1e6,
        "target_cpu_us_per_record": clock.target_cpu / count * 1e6,
        "seconds": clock.wall,
        "calls": extra.get("calls"),
        "records_failed": extra.get("failed"),
    }


def measure(name: str, count: int = COUNT) -> dict[str, Any]:
    """One row in this process."""
    row = ROWS[name]
    count *= row.records
    started = load()
    figures = _project(row, count) if row.peer == "project" else _peer(row, count)
    return {"row": name, "records": count, "loadavg_before": started} | figures


def report(results: dict[str, Any]) -> str:
    lines = [
        f"load average {results['loadavg_start']} at start, {results['loadavg_end']} at end",
        "row: client us/record median (range); target us/record; waits for room; calls; "
        "records an aggregate; share of capacity mean / min",
    ]
    for name, rows in results["runs"].items():
        parts = [
            median_range(rows, "client_cpu_us_per_record"),
            median_range(rows, "target_cpu_us_per_record"),
            median_range(rows, "backpressure_cycles"),
            median_range(rows, "calls"),
            median_range(rows, "records_per_aggregate"),
        ]
        if "share_mean" in rows[0]:
            parts.append(f"{median_range(rows, 'share_mean')} / {median_range(rows, 'share_min')}")
        lines.append(f"  {name}: " + "; ".join(parts))
    lines += ratio_lines(results["runs"], "client_cpu_us_per_record", "client us/record")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=COUNT, help="records a row")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: one row, JSON out
    parser.add_argument("--json", action="store_true", help="print every run as JSON")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.count)))
        return 0
    started = time.perf_counter()
    results = in_turn(
        "benchmarks.producer_cpu", args.rows.split(","), args.rounds, ["--count", str(args.count)]
    )
    results["seconds"] = time.perf_counter() - started
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
