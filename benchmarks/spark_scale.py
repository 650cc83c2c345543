"""The Spark source over many shards: what a micro-batch costs per shard, and an idle query.

    .venv/bin/python -m benchmarks.spark_scale [--shards 16,128,512,1000] [--idle 10]
        [--rows N] [--json]

Each row: a loopback load target (its own process, plain HTTP/1.1, no limits) with ``shards``
shards and 3 records put on each (by its starting hash key; with ``--rows``, ``N / shards``
each, so every row reads about the same records), one local Spark session
(``local[2]``, Python workers reused), default source options. Figures:

- ``available_now_s``: a ``Trigger.AvailableNow`` query into ``noop``, from its start to its
  end (it must read every record: ``rows`` is checked);
- ``tasks_per_batch``: the Spark tasks of each of its micro-batches. The grouping is a pure
  function of a micro-batch's offsets and the options, so it is recomputed here from the
  query's offset log with the source's own ``partitions``;
- ``worker_cpu_s`` / ``worker_cpu_ms_per_task`` / ``worker_cpu_us_per_row``: the Python
  workers' CPU over the query (``/proc``), per task and per row read;
- ``runner_net_ms_per_shard``: the source runner's CPU over the query (the driver side: the
  planner's two plans, a busy one and the final one, and Spark's offset exchange), less a
  16-shard warm-up query's (the runner is a new process per query: its start-up), per shard;
- ``planner_ms_per_shard``: the planner alone in this process (no Spark), AvailableNow from
  the start: CPU per shard of the busy first trigger and of the final one, and the busy
  trigger's wall time;
- ``idle_runner_share`` / ``idle_jvm_share``: a query with the default trigger resumed from
  the AvailableNow query's checkpoint, so nothing is new: the source runner's and the JVM's
  CPU over ``idle`` seconds (after ``settle``), a share of one core.

**Per row, marginal** (``--marginal R1,R2``): ``worker_cpu_us_per_row`` above divides the
workers' CPU, per-task and per-shard costs included, by the rows, so it falls as rows grow
whatever a row costs. Here each shard count reads about ``R1`` and then ``R2`` records in all
(``R / shards`` a shard), on fresh targets, with ``arrivalWindowPerTrigger`` of an hour so
each read is one micro-batch of the same tasks (the grouping depends on the shards that
moved, not on their rows): the difference of the workers' CPU over the difference of the rows
is what one more row costs, ``marginal_us_per_row``, with every fixed cost cancelled.

Run by hand (minutes at 1,000 shards), not by the suite; the test runs a tiny row.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from pyspark.sql.streaming.datasource import ReadAllAvailable

from benchmarks._common import fixed as _f
from benchmarks._common import load as _load
from benchmarks._common import machine
from benchmarks._common import text_table as _table
from benchmarks._spark import ProcessCpu, spark_session
from benchmarks.loadtarget import LoadTarget
from benchmarks.scale_bench import put_one_per_shard
from spark_bridge import KinesisDataSource

__all__ = ["SHARDS", "main", "measure", "report", "run"]

SHARDS = (16, 128, 512, 1000)
RECORDS_PER_SHARD = 3
IDLE_SECONDS = 10.0
SETTLE_SECONDS = 5.0
QUERY_TIMEOUT = 900.0


async def _put(target: LoadTarget, rounds: int) -> int:
    async with target.client() as client:
        for _ in range(rounds):
            shards = await put_one_per_shard(client, target.stream_name)
    return shards * rounds


def _options(target: LoadTarget) -> dict[str, str]:
    return {
        "streamName": target.stream_name,
        "endpointUrl": target.endpoint_url,
        "awsAccessKeyId": "local",
        "awsSecretKey": "local",
    }


def _reader(options: dict[str, str]) -> Any:
    """The source's reader as Spark gets it (the public seam: the data source)."""
    source = KinesisDataSource(options)
    return source.streamReader(source.schema())


def _planner(options: dict[str, str], shards: int) -> dict[str, Any]:
    """AvailableNow from the start, planned in this process: CPU per shard of each trigger."""
    reader = _reader(options)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    cpu_ms: list[float] = []
    walls: list[float] = []
    try:
        for _ in range(20):
            wall, cpu = time.perf_counter(), time.process_time()
            end = reader.latestOffset(start, ReadAllAvailable())
            cpu_ms.append((time.process_time() - cpu) * 1000 / shards)
            walls.append(time.perf_counter() - wall)
            if end == start:
                break
            start = end
    finally:
        reader.stop()
    return {
        "planner_busy_ms_per_shard": cpu_ms[0],
        "planner_busy_wall_s": walls[0],
        "planner_final_ms_per_shard": cpu_ms[-1],
        "planner_triggers": len(cpu_ms),
    }


def _offset_log(checkpoint: Path) -> list[Any]:
    """The source's end offset of every micro-batch in the checkpoint, in order."""
    files = sorted(
        (int(path.name), path) for path in (checkpoint / "offsets").iterdir() if path.name.isdigit()
    )
    return [json.loads(path.read_text().splitlines()[2]) for _, path in files]


def _tasks(options: dict[str, str], checkpoint: Path) -> list[int]:
    reader = _reader(options)
    start = reader.initialOffset()  # TRIM_HORIZON: no call, nothing listed
    out = []
    for end in _offset_log(checkpoint):
        out.append(len(reader.partitions(start, end)))
        start = end
    return out


def _available_now(spark: Any, options: dict[str, str], checkpoint: Path) -> dict[str, Any]:
    cpu = ProcessCpu()
    cpu.start()
    began = time.perf_counter()
    frame = spark.readStream.format("kinesis").options(**options).load()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(QUERY_TIMEOUT)
    wall = time.perf_counter() - began
    used = cpu.stop()
    if query.isActive:
        query.stop()
        raise RuntimeError(f"the query did not end within {QUERY_TIMEOUT} s")
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    progress = list(query.recentProgress)
    return {
        "available_now_s": wall,
        "rows": sum(int(p.numInputRows) for p in progress),
        "micro_batches": len([p for p in progress if p.numInputRows > 0]),
        "cpu_s": used,
    }


def _idle(
    spark: Any, options: dict[str, str], checkpoint: Path, idle: float, settle: float
) -> dict[str, Any]:
    frame = spark.readStream.format("kinesis").options(**options).load()
    query = frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).start()
    try:
        time.sleep(settle)
        if query.exception() is not None:
            raise RuntimeError(f"the idle query failed: {query.exception()}")
        cpu = ProcessCpu()
        cpu.start()
        began = time.perf_counter()
        time.sleep(idle)
        used = cpu.stop()
        wall = time.perf_counter() - began
        rows = sum(int(p.numInputRows) for p in query.recentProgress)
    finally:
        query.stop()
    return {
        "idle_s": wall,
        "idle_rows": rows,
        "idle_runner_share": used.get("source_runner", 0.0) / wall,
        "idle_jvm_share": used.get("jvm", 0.0) / wall,
    }


def measure(
    shards: int,
    idle: float = IDLE_SECONDS,
    spark: Any = None,
    settle: float = SETTLE_SECONDS,
    shards_per_task: int | None = None,
    records_per_shard: int = RECORDS_PER_SHARD,
    options: dict[str, str] | None = None,
    planner: bool = True,
) -> dict[str, Any]:
    """One row: a fresh target of ``shards`` shards with ``records_per_shard`` records each,
    the queries above (no idle query with ``idle`` 0, no planner alone without ``planner``);
    ``options``: more source options."""
    owned = spark is None
    if spark is None:
        spark, owned = spark_session()
    spark.dataSource.register(KinesisDataSource)
    load = _load()
    with (
        LoadTarget(shards=shards, retain_records=records_per_shard + 2, tls=False) as target,
        tempfile.TemporaryDirectory(prefix="spark-scale-") as tmp,
    ):
        records = anyio.run(_put, target, records_per_shard)
        options = {**_options(target), **(options or {})}
        if shards_per_task is not None:
            options["shardsPerTask"] = str(shards_per_task)
        checkpoint = Path(tmp) / "checkpoint"
        row: dict[str, Any] = {
            "shards": shards,
            "records": records,
            "shards_per_task": shards_per_task,
            "loadavg_before": load,
        }
        row.update(_available_now(spark, options, checkpoint))
        if row["rows"] != records:
            raise RuntimeError(f"AvailableNow read {row['rows']} of {records} records")
        tasks = _tasks(options, checkpoint)
        workers = row["cpu_s"].get("python_workers", 0.0)
        row["tasks_per_batch"] = tasks
        row["tasks"] = sum(tasks)
        row["worker_cpu_s"] = workers
        row["worker_cpu_ms_per_task"] = workers * 1000 / max(sum(tasks), 1)
        row["worker_cpu_us_per_row"] = workers * 1e6 / max(records, 1)
        row["runner_cpu_s"] = row["cpu_s"].get("source_runner", 0.0)
        if planner:
            row.update(_planner(options, shards))
        if idle > 0:
            row.update(_idle(spark, options, checkpoint, idle, settle))
    if owned:
        spark.stop()
    return row


#: The arrival window of the marginal runs: longer than any put, so one micro-batch.
MARGINAL_WINDOW = "1h"


def marginal(shards: int, rows: tuple[int, int], spark: Any = None) -> dict[str, Any]:
    """What one more row costs the Python workers at ``shards`` shards: two AvailableNow
    reads of about ``rows[0]`` and ``rows[1]`` records, each one micro-batch of the same
    tasks (see the module's doc)."""
    runs = [
        measure(
            shards,
            idle=0,
            spark=spark,
            records_per_shard=max(1, total // shards),
            options={"arrivalWindowPerTrigger": MARGINAL_WINDOW},
            planner=False,
        )
        for total in rows
    ]
    small, large = runs
    one_batch = [run["micro_batches"] == 1 for run in runs]
    if not all(one_batch) or large["tasks"] != small["tasks"]:
        raise RuntimeError(
            f"the two reads were not one micro-batch of the same tasks: "
            f"{small['tasks_per_batch']} and {large['tasks_per_batch']}"
        )
    added = large["records"] - small["records"]
    return {
        "shards": shards,
        "rows": [small["records"], large["records"]],
        "tasks": small["tasks"],
        "worker_cpu_s": [small["worker_cpu_s"], large["worker_cpu_s"]],
        "marginal_us_per_row": (large["worker_cpu_s"] - small["worker_cpu_s"]) * 1e6 / added,
        "loadavg_before": small["loadavg_before"],
    }


def run_marginal(shards: tuple[int, ...], rows: tuple[int, int]) -> dict[str, Any]:
    """:func:`marginal` at every shard count, after a 16-shard warm-up."""
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": machine(), "loadavg_start": _load(), "marginal": []}
    spark, owned = spark_session()
    try:
        measure(16, idle=0, spark=spark, planner=False)
        for count in shards:
            results["marginal"].append(marginal(count, rows, spark))
    finally:
        if owned:
            spark.stop()
    results["loadavg_end"] = _load()
    results["seconds"] = time.perf_counter() - started
    return results


def report_marginal(results: dict[str, Any]) -> str:
    rows = results["marginal"]
    first = rows[0]["marginal_us_per_row"] if rows else 0.0
    for row in rows:
        row["ratio_to_first"] = row["marginal_us_per_row"] / first if first else 0.0
    head = (
        "Spark source, Python workers' CPU for one more row (two AvailableNow reads a shard "
        f"count, one micro-batch each); load average {results['loadavg_start']} at start, "
        f"{results['loadavg_end']} at end; {results['seconds']:.0f} s in all"
    )
    columns = [
        ("shards", "shards", _f(0)),
        ("tasks", "tasks", _f(0)),
        ("marginal µs/row", "marginal_us_per_row", _f(1)),
        ("ratio to first", "ratio_to_first", _f(2)),
    ]
    return "\n".join([head, _table(rows, columns)])


def run(
    shards: tuple[int, ...] = SHARDS,
    idle: float = IDLE_SECONDS,
    shards_per_task: int | None = None,
    rows: int | None = None,
) -> dict[str, Any]:
    """Every row of ``shards`` after a 16-shard warm-up; ``rows``: about that many records in
    every row (``rows // shards`` a shard, at least one), else 3 a shard."""
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine(),
        "loadavg_start": _load(),
        "rows": [],
        "rows_option": rows,
    }
    spark, owned = spark_session()
    try:
        # Warm-up (the JVM, the workers' imports); its source runner's CPU is the runner's
        # start-up (a new process per query), taken off each row's.
        warm = measure(16, idle=0, spark=spark, shards_per_task=shards_per_task)
        results["warmup"] = warm
        for count in shards:
            row = measure(
                count,
                idle,
                spark=spark,
                shards_per_task=shards_per_task,
                records_per_shard=RECORDS_PER_SHARD if rows is None else max(1, rows // count),
            )
            net = max(0.0, row["runner_cpu_s"] - warm["runner_cpu_s"])
            row["runner_net_ms_per_shard"] = net * 1000 / count
            results["rows"].append(row)
    finally:
        if owned:
            spark.stop()
    results["loadavg_end"] = _load()
    results["seconds"] = time.perf_counter() - started
    return results


def report(results: dict[str, Any]) -> str:
    head = (
        f"Spark source, {results.get('rows_option') or RECORDS_PER_SHARD} "
        f"{'records a row' if results.get('rows_option') else 'records a shard'}, local[2], "
        "AvailableNow into noop; "
        f"load average {results['loadavg_start']} at start, {results['loadavg_end']} at end; "
        f"{results['seconds']:.0f} s in all"
    )
    columns = [
        ("shards", "shards", _f(0)),
        ("AvailableNow s", "available_now_s", _f(1)),
        ("tasks", "tasks", _f(0)),
        ("worker CPU s", "worker_cpu_s", _f(2)),
        ("worker ms/task", "worker_cpu_ms_per_task", _f(0)),
        ("worker µs/row", "worker_cpu_us_per_row", _f(0)),
        ("runner net ms/shard", "runner_net_ms_per_shard", _f(3)),
        ("planner busy ms/shard", "planner_busy_ms_per_shard", _f(3)),
        ("planner busy wall s", "planner_busy_wall_s", _f(2)),
        ("planner final ms/shard", "planner_final_ms_per_shard", _f(3)),
        ("idle runner (cores)", "idle_runner_share", _f(3)),
        ("idle JVM (cores)", "idle_jvm_share", _f(3)),
    ]
    return "\n".join([head, _table(results["rows"], columns)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shards", default=",".join(map(str, SHARDS)), help="comma-separated")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="idle window, s")
    parser.add_argument("--shards-per-task", type=int, help="the option (default: automatic)")
    parser.add_argument("--rows", type=int, help="about this many records a row (not 3 a shard)")
    parser.add_argument(
        "--marginal", help="R1,R2: one more row's CPU from reads of about R1 and R2 records"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    counts = tuple(int(part) for part in args.shards.split(","))
    if args.marginal:
        small, large = (int(part) for part in args.marginal.split(","))
        if not 0 < small < large:
            parser.error("--marginal takes R1,R2 with 0 < R1 < R2")
        if args.rows or args.shards_per_task:
            parser.error(
                "--marginal reads with the default grouping; no --rows or --shards-per-task"
            )
        results = run_marginal(counts, (small, large))
        text = report_marginal(results)
    else:
        results = run(counts, args.idle, args.shards_per_task, args.rows)
        text = report(results)
    print(json.dumps(results, indent=2, default=str) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
