"""Client CPU per record of a polling Consumer at 16 and 1,000 shards, with an A/A control
beside it.

    .venv/bin/python -m benchmarks.consumer_cpu [--rounds 3] [--rows a,b,...] [--records N]
        [--json]

Every row runs in a fresh process with its own load target (plain HTTP/1.1, no limits),
rows in turn, ``--rounds`` times; the table gives each row's median and range, and each
row's ratio to the first, round by round (rows run back to back, so a drift of the
machine's speed moves both sides of a ratio alike). ``shards-16-again`` is ``shards-16``
once more: its ratio is what noise alone gives.

A row puts ``records / 2`` records of 100 bytes, spread evenly over its shards by their
starting hash keys, and three Consumers read them from TRIM_HORIZON, each until every record
was delivered, each from a collected heap, in the same pages at every count
(``max_records_per_call`` 1,024) and within the service's read budget (five calls a second a
shard, which a 16-shard read waits on between its pages and a 1,000-shard one, four pages
a shard, does not):

- the *first* read, which pays what the process's first Consumer pays once (code run for
  the first time, caches filled), and whose figures are kept but not used;
- the *base* read, the same records again;
- then ``records / 2`` more are put, and the *full* read takes all of them.

``cpu_us_per_record`` is ``(full - base) / (records / 2)``: what another record costs once
a consumer of that many shards is open. Both are a whole Consumer (open, every shard read
to its tip, close), so what a read costs a shard whatever its records cancels out of the
difference; ``shard_ms`` is that cost, ``base`` less its records at ``cpu_us_per_record``,
per shard: the open and the close, and at 1,000 shards the memory of every shard's first
``prefetch_batches`` batches, which the kernel zeroes page by page when a Consumer takes it
(the allocator returns it between Consumers, so every one pays it: the first read costs
what the base read does). ``gc_us_per_record`` and ``sys_us_per_record`` are the same
difference for the collector's time (``gc.callbacks``) and the kernel's (``getrusage``):
parts of ``cpu_us_per_record``. At 1,000 shards the defaults read 2,048 records a shard
(two pages) in the base read and 4,096 (four) in the full one; at 16 shards 128,000 and
256,000.

Run by hand (10-20 minutes with the defaults), not by the suite.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from typing import Any

import anyio

from benchmarks._common import load
from benchmarks._rounds import in_turn, median_range, ratio_lines
from benchmarks.loadtarget import LoadTarget
from benchmarks.scale_bench import PAGE, RECORD_BYTES, put_per_shard, warm_up
from kinesis_actors import Consumer, ConsumerConfig, KinesisClient, StartingPosition

__all__ = ["RECORDS", "ROWS", "main", "measure", "report"]

#: A row's shard count, by name.
ROWS = {"shards-16": 16, "shards-1000": 1000, "shards-16-again": 16}
RECORDS = 4_096_000
#: The longest one read may take before the row is called a failure.
READ_TIMEOUT = 600.0


class _Collector:
    """The collector's time, summed from ``gc.callbacks`` (installed while in use)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.process_time()
        else:
            self.seconds += time.process_time() - self._began

    def __enter__(self) -> _Collector:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


def _clocks() -> tuple[float, float]:
    """This process's CPU seconds and the kernel's part of them."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime


async def _read(client: KinesisClient, stream: str, config: ConsumerConfig, expected: int) -> Any:
    """A fresh Consumer reads until ``expected`` records were delivered: its CPU seconds, the
    kernel's part and the collector's."""
    gc.collect()
    delivered = 0
    with _Collector() as collector:
        cpu, kernel = _clocks()
        async with Consumer(client, stream, config) as consumer:
            with anyio.fail_after(READ_TIMEOUT):
                async for batch in consumer:
                    delivered += len(batch)
                    consumer.commit(batch)
                    if delivered >= expected:
                        break
        after, kernel_after = _clocks()
    return after - cpu, kernel_after - kernel, collector.seconds


async def _measure(target: LoadTarget, shards: int, records: int) -> dict[str, Any]:
    config = ConsumerConfig(
        start=StartingPosition.trim_horizon(),
        max_records_per_call=PAGE,
        # A shard read to its tip is not read again within the row: no empty reads.
        caught_up_millis_behind=1,
        caught_up_read_interval=READ_TIMEOUT,
    )
    half = max(1, records // 2 // shards)
    added = half * shards
    async with target.client() as client:
        stream = target.stream_name
        await put_per_shard(client, stream, half, RECORD_BYTES)
        first = await _read(client, stream, config, added)
        base = await _read(client, stream, config, added)
        await put_per_shard(client, stream, half, RECORD_BYTES)
        full = await _read(client, stream, config, 2 * added)
    return {
        "shards": shards,
        "records": 2 * added,
        "first_read_cpu_s": first[0],
        "base_read_cpu_s": base[0],
        "full_read_cpu_s": full[0],
        "sys_us_per_record": (full[1] - base[1]) / added * 1e6,
        "gc_us_per_record": (full[2] - base[2]) / added * 1e6,
    } | _per_shard(shards, added, base[0], full[0])


def _per_shard(shards: int, added: int, base: float, full: float) -> dict[str, float]:
    """The per-record and the per-shard parts of two reads, ``full`` having ``added`` records
    more than ``base`` (which has as many): CPU seconds in, microseconds and milliseconds out."""
    per_record = (full - base) / added
    return {
        "cpu_us_per_record": per_record * 1e6,
        "shard_ms": (base - per_record * added) / shards * 1e3,
    }


def measure(name: str, records: int = RECORDS) -> dict[str, Any]:
    """One row in this process."""
    shards = ROWS[name]
    warm_up()
    started = load()
    with LoadTarget(shards=shards, retain_records=records // shards + 4, tls=False) as target:
        figures = anyio.run(_measure, target, shards, records)
    return {"row": name, "loadavg_before": started} | figures


def report(results: dict[str, Any]) -> str:
    lines = [
        f"load average {results['loadavg_start']} at start, {results['loadavg_end']} at end",
        "row: us/record median (range); of it the kernel's; of it the collector's; "
        "a shard's cost to a read, ms",
    ]
    for name, rows in results["runs"].items():
        parts = [
            median_range(rows, key)
            for key in (
                "cpu_us_per_record",
                "sys_us_per_record",
                "gc_us_per_record",
                "shard_ms",
            )
        ]
        lines.append(f"  {name}: " + "; ".join(parts))
    lines += ratio_lines(results["runs"], "cpu_us_per_record", "us/record")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=RECORDS, help="records a row, in all")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: one row, JSON out
    parser.add_argument("--json", action="store_true", help="print every run as JSON")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.records)))
        return 0
    started = time.perf_counter()
    results = in_turn(
        "benchmarks.consumer_cpu",
        args.rows.split(","),
        args.rounds,
        ["--records", str(args.records)],
    )
    results["seconds"] = time.perf_counter() - started
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
