"""Spark bridge benchmarks: the ``kinesis`` source and sink against the embedded local server.

One run, one local Spark session (``local[2]``), one :class:`~kinesis_actors.LocalKinesis`:

1. **Source via Arrow**: ``records`` records of 100 B, KPL-aggregated by ``SyncProducer``,
   pre-loaded into a 4-shard stream; ``readStream.format("kinesis")`` with
   ``Trigger.AvailableNow`` into the ``noop`` sink. Rows/s over the query's wall time (start
   to termination, the source runner's start-up and the AvailableNow end check included) and
   over the sum of the micro-batches' ``addBatch`` (the executor side), micro-batches, the
   progress durations, and the CPU of every process of the run (``/proc``).
2. **The same through Python tuples**: ``kinesis_tuples``, a subclass of the bridge's own
   reader whose ``read`` yields the partition's rows as Python tuples instead of Arrow
   batches. The driver side (consumer, staging, Arrow IPC payloads in the partitions) is the
   bridge's code, unchanged; only the executor's hand-over to Spark differs.
3. **Sink**: ``df.write.format("kinesis")`` of ``records`` rows (100 B binary ``data``,
   ``partitionKey``) from ``spark.range``; and ``writeStream.format("kinesis")`` fed by the
   kinesis source (a Kinesis -> Spark -> Kinesis pipeline of the same rows).
4. **Where the driver stops scaling**: the source's driver side runs in one Python process
   per query (``python_streaming_source_runner``): its CPU per row, measured from ``/proc``
   (net of a warm-up query's fixed cost), and the same staging path measured in this process
   without Spark (``DriverConsumer`` + Arrow IPC); the ceiling is 1 / (CPU per row) per core.

Usage: ``python -m benchmarks.spark_bench [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import spark_bridge
from benchmarks._common import KEYS, load, machine, payloads
from kinesis_actors import LocalKinesis, ProducerConfig
from kinesis_actors.sync import SyncProducer
from spark_bridge import KinesisDataSource
from spark_bridge._driver import DriverConsumer
from spark_bridge._legacy import DriverReadStreamReader, _ipc
from spark_bridge._options import parse_source_options
from spark_bridge._source import KinesisStreamReader

__all__ = ["ProcessCpu", "TupleKinesisDataSource", "main", "markdown", "run"]

SHARDS = 4
RECORD_BYTES = 100
SCALES = {"full": 200_000, "quick": 30_000}
WARMUP_RECORDS = 2_000
QUERY_TIMEOUT = 600.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the tuple comparison source -----------------------------------------------------------------


class TupleStreamReader(KinesisStreamReader):
    """The bridge's reader, but ``read`` yields Python tuples instead of Arrow batches.

    The partition carries the same Arrow IPC payload; the rows are turned into Python objects
    column by column (``to_pylist``) and zipped into tuples, which Spark then converts back to
    Arrow in the worker (``records_to_arrow_batches``), row by row with its type checks.
    """

    def read(self, partition: Any) -> Iterator[Any]:
        for batch in super().read(partition):
            yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


class TupleKinesisDataSource(KinesisDataSource):
    """``format("kinesis_tuples")``: :class:`TupleStreamReader` behind the bridge's options."""

    @classmethod
    def name(cls) -> str:
        return "kinesis_tuples"

    def streamReader(self, schema: Any) -> Any:
        return TupleStreamReader(parse_source_options(self.options))


# -- CPU of the run's processes, from /proc ------------------------------------------------------


def _stat(pid: int) -> tuple[int, float] | None:
    """``(parent pid, user + system CPU seconds)`` of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "exited_unknown"
    if "python_streaming_source_runner" in cmdline:
        return "source_runner"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python_workers"
    if "java" in cmdline.split(" ", 1)[0] or "org.apache.spark" in cmdline:
        return "jvm"
    if "node" in cmdline.split(" ", 1)[0]:
        return "kinesis_server"
    return "other"


class ProcessCpu:
    """CPU seconds per role of this process's descendants between ``start`` and ``stop``.

    ``/proc`` is scanned every ``interval`` seconds so that processes which end during the
    window (the query's source runner) still count with the last CPU seen. Processes alive
    at ``start`` count from then; later ones from zero (their start-up is part of the cost).
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._root = os.getpid()
        self._base: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._self_cpu = 0.0

    def _descendants(self) -> dict[int, float]:
        parents: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            found = _stat(int(name))
            if found is not None:
                parents[int(name)], cpu[int(name)] = found
        tree: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            tree.setdefault(parent, []).append(pid)
        out: dict[int, float] = {}
        todo = list(tree.get(self._root, []))
        while todo:
            pid = todo.pop()
            out[pid] = cpu[pid]
            todo.extend(tree.get(pid, []))
        return out

    def _sample(self) -> None:
        for pid, seconds in self._descendants().items():
            if pid not in self._roles:
                self._roles[pid] = _role(pid)
                self._base.setdefault(pid, 0.0)
            self._last[pid] = seconds

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        self._base = dict(self._descendants())
        self._last = dict(self._base)
        self._roles = {pid: _role(pid) for pid in self._base}
        self._self_cpu = time.process_time()
        self._thread = threading.Thread(target=self._run, name="proc-cpu", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        roles: dict[str, float] = {"this_process": time.process_time() - self._self_cpu}
        for pid, seconds in self._last.items():
            role = self._roles[pid]
            roles[role] = roles.get(role, 0.0) + max(0.0, seconds - self._base.get(pid, 0.0))
        return {role: round(seconds, 3) for role, seconds in roles.items()}


# -- helpers ----------------------------------------------------------------------------------


def _options(local: LocalKinesis, stream: str) -> dict[str, str]:
    key, secret = local.credentials[:2]
    return {
        "streamName": stream,
        "endpointUrl": local.endpoint_url,
        "awsAccessKeyId": key,
        "awsSecretKey": secret,
    }


def _preload(local: LocalKinesis, stream: str, count: int) -> dict[str, Any]:
    """Put ``count`` records of 100 B (aggregated) from this process; its figures."""
    started, cpu = time.perf_counter(), time.process_time()
    data = payloads(RECORD_BYTES)
    with SyncProducer(
        stream,
        endpoint_url=local.endpoint_url,
        credentials=local.credentials,
        config=ProducerConfig(aggregation=True),
        batch_size=512,
    ) as producer:
        for index in range(count):
            producer.put(data[index % len(data)], KEYS[index % len(KEYS)])
        producer.flush()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "rows": count,
        "wall_s": round(wall, 3),
        "rows_per_s": round(count / wall, 1),
        "cpu_us_per_row": round(cpu / max(count, 1) * 1e6, 3),
    }


def _session() -> tuple[Any, bool]:
    """The active Spark session, or a new ``local[2]`` one (then ``True``: stop it after)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415 - after PYSPARK_PYTHON is set

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    warehouse = tempfile.mkdtemp(prefix="spark-bench-warehouse-")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kinesis-actors-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session, True


def _per_row(cpu: dict[str, float], rows: int) -> dict[str, float]:
    return {role: round(seconds / max(rows, 1) * 1e6, 3) for role, seconds in cpu.items()}


def _stream_query(
    start: Callable[[Any], Any], frame: Any, checkpoint: Path, expected: int
) -> dict[str, Any]:
    """Run one AvailableNow query (``start`` adds the sink); its figures."""
    cpu = ProcessCpu()
    cpu.start()
    began = time.perf_counter()
    query = start(
        frame.writeStream.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    )
    query.awaitTermination(QUERY_TIMEOUT)
    wall = time.perf_counter() - began
    used = cpu.stop()
    if query.isActive:
        query.stop()
        raise RuntimeError(f"the query did not end within {QUERY_TIMEOUT} s")
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    rows = sum(int(p.numInputRows) for p in progress)
    durations: dict[str, int] = {}
    for p in progress:
        for key, millis in (p.durationMs or {}).items():
            durations[key] = durations.get(key, 0) + int(millis)
    add_batch = durations.get("addBatch", 0) / 1000
    return {
        "rows": rows,
        "rows_expected": expected,
        "rows_match": rows == expected,
        "micro_batches": len(progress),
        "rows_per_batch": [int(p.numInputRows) for p in progress],
        "wall_s": round(wall, 3),
        "rows_per_s": round(rows / wall, 1),
        "add_batch_s": round(add_batch, 3),
        "rows_per_s_add_batch": round(rows / add_batch, 1) if add_batch else None,
        "duration_ms_sum": durations,
        "cpu_s": used,
        "cpu_us_per_row": _per_row(used, rows),
    }


def _source(spark: Any, fmt: str, options: dict[str, str], checkpoint: Path, n: int) -> Any:
    frame = spark.readStream.format(fmt).options(**options).load()
    return _stream_query(lambda writer: writer.format("noop").start(), frame, checkpoint, n)


def _driver_inprocess(local: LocalKinesis, stream: str, count: int) -> dict[str, Any]:
    """The source's driver side without Spark: consumer + staging + Arrow IPC, in this process.

    Everything the ``python_streaming_source_runner`` does per row, short of pickling the
    partitions: ``DriverConsumer`` reads the stream from TRIM_HORIZON (polling, the default
    mode) and stages the rows; ``take`` cuts micro-batches of everything staged; ``_ipc``
    serialises each shard's batches like ``partitions`` does.
    """
    options = parse_source_options({k.lower(): v for k, v in _options(local, stream).items()})
    start = DriverReadStreamReader(options).initialOffset()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    driver = DriverConsumer(options, start)
    rows = takes = payload_bytes = arrow_batches = largest = 0
    ipc_s = 0.0
    try:
        driver.wait_open(60.0)
        deadline = time.monotonic() + QUERY_TIMEOUT
        while rows < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the driver consumer staged {rows} of {count} rows")
            plan = driver.take(start, None, None)
            if plan.rows == 0:
                driver.wait_for_data(0.5)
                continue
            start, rows, takes = plan.end, rows + plan.rows, takes + 1
            began = time.perf_counter()
            for batches in plan.batches.values():
                payload_bytes += len(_ipc(batches))
                arrow_batches += len(batches)
                largest = max(largest, *(batch.num_rows for batch in batches))
            ipc_s += time.perf_counter() - began
    finally:
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        driver.close()
    cpu_us = cpu / max(rows, 1) * 1e6
    return {
        "rows": rows,
        "takes": takes,
        "arrow_batches": arrow_batches,
        "largest_arrow_batch_rows": largest,
        "wall_s": round(wall, 3),
        "rows_per_s": round(rows / wall, 1),
        "cpu_s": round(cpu, 3),
        "cpu_us_per_row": round(cpu_us, 3),
        "ipc_us_per_row": round(ipc_s / max(rows, 1) * 1e6, 3),
        "ipc_payload_bytes_per_row": round(payload_bytes / max(rows, 1), 1),
        "ceiling_rows_per_s_per_core": round(1e6 / cpu_us) if cpu_us else None,
    }


def _sink_batch(spark: Any, options: dict[str, str], n: int) -> dict[str, Any]:
    """``df.write.format("kinesis")`` of ``n`` rows of 100 B, two partitions."""
    frame = spark.range(0, n, 1, 2).selectExpr(
        f"cast(lpad(cast(id as string), {RECORD_BYTES}, 'x') as binary) as data",
        f"concat('pk-', cast(id % {len(KEYS)} as string)) as partitionKey",
    )
    frame.cache().count()  # the rows exist before the clock starts
    cpu = ProcessCpu()
    cpu.start()
    began = time.perf_counter()
    frame.write.format("kinesis").mode("append").options(**options).save()
    wall = time.perf_counter() - began
    used = cpu.stop()
    frame.unpersist()
    return {
        "rows": n,
        "partitions": 2,
        "wall_s": round(wall, 3),
        "rows_per_s": round(n / wall, 1),
        "cpu_s": used,
        "cpu_us_per_row": _per_row(used, n),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


# -- the run --------------------------------------------------------------------------------------


def run(
    quick: bool = False, *, records: int | None = None, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    """Every measurement, in one run; ``records`` overrides the scale (tests)."""
    n = records or SCALES["quick" if quick else "full"]
    warm = min(WARMUP_RECORDS, n // 2)
    tag = uuid.uuid4().hex[:8]
    names = {role: f"spark-bench-{role}-{tag}" for role in ("source", "warm", "sink", "pipe")}
    results: dict[str, Any] = {
        "suite": "kinesis-actors spark bench",
        "mode": "custom" if records else "quick" if quick else "full",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "loadavg_start": load(),
        "records": n,
        "record_bytes": RECORD_BYTES,
        "shards": SHARDS,
    }
    started = time.perf_counter()
    with LocalKinesis(streams=dict.fromkeys(names.values(), SHARDS)) as local:
        progress(f"pre-loading {n} records into {SHARDS} shards")
        results["preload"] = _preload(local, names["source"], n)
        _preload(local, names["warm"], warm)

        progress("driver staging path in this process (no Spark)")
        results["driver_inprocess"] = _driver_inprocess(local, names["source"], n)

        progress("starting Spark")
        spark, owned = _session()
        try:
            spark_bridge.register(spark)
            spark.dataSource.register(TupleKinesisDataSource)
            with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
                folder = Path(tmp)
                warmups = {}
                for fmt in ("kinesis", "kinesis_tuples"):
                    progress(f"warm-up query ({fmt}, {warm} rows)")
                    warmups[fmt] = _source(
                        spark, fmt, _options(local, names["warm"]), folder / f"warm-{fmt}", warm
                    )
                results["warmup"] = warmups
                # The driver side is the same code for both formats: one fixed cost per query.
                fixed_runner = round(
                    sum(w["cpu_s"].get("source_runner", 0.0) for w in warmups.values())
                    / len(warmups),
                    3,
                )
                source: dict[str, Any] = {}
                for label, fmt in (("arrow", "kinesis"), ("tuples", "kinesis_tuples")):
                    progress(f"source via {label}: {n} rows")
                    figures = _source(
                        spark, fmt, _options(local, names["source"]), folder / f"cp-{label}", n
                    )
                    fixed = fixed_runner
                    runner = figures["cpu_s"].get("source_runner", 0.0)
                    net = max(runner - fixed, 0.0) / max(figures["rows"] - warm, 1) * 1e6
                    figures["source_runner_fixed_cpu_s"] = fixed
                    figures["source_runner_net_cpu_us_per_row"] = round(net, 3)
                    figures["driver_ceiling_rows_per_s_per_core"] = (
                        round(1e6 / net) if net else None
                    )
                    source[label] = figures
                source["arrow_over_tuples_rows_per_s"] = _ratio(
                    source["arrow"]["rows_per_s"], source["tuples"]["rows_per_s"]
                )
                source["arrow_over_tuples_add_batch"] = _ratio(
                    source["arrow"]["rows_per_s_add_batch"],
                    source["tuples"]["rows_per_s_add_batch"],
                )
                arrow_w = source["arrow"]["cpu_us_per_row"].get("python_workers")
                tuple_w = source["tuples"]["cpu_us_per_row"].get("python_workers")
                source["worker_cpu_tuples_over_arrow"] = _ratio(tuple_w, arrow_w)
                results["source"] = source

                progress(f"sink: df.write of {warm} rows (warm-up), then {n} rows")
                sink_options = _options(local, names["sink"])
                warm_write = _sink_batch(spark, sink_options, warm)
                batch_write = _sink_batch(spark, sink_options, n)
                batch_write["warmup"] = warm_write
                sink: dict[str, Any] = {"batch_write": batch_write}
                progress(f"sink: writeStream, kinesis source -> kinesis sink, {n} rows")
                frame = (
                    spark.readStream.format("kinesis")
                    .options(**_options(local, names["source"]))
                    .load()
                    .select("data", "partitionKey")
                )
                sink["stream_pipeline"] = _stream_query(
                    lambda writer: (
                        writer.format("kinesis").options(**_options(local, names["pipe"])).start()
                    ),
                    frame,
                    folder / "cp-pipe",
                    n,
                )
                results["sink"] = sink
        finally:
            if owned:
                spark.stop()
    results["notes"] = _notes(results)
    results["loadavg_end"] = load()
    results["seconds"] = round(time.perf_counter() - started, 1)
    return results


def _notes(results: dict[str, Any]) -> list[str]:
    source = results["source"]
    notes = [
        "Source rows/s is over the query's wall time: awaitTermination after start(), so it "
        "includes the source runner's start (a new Python process per query), the first "
        "latestOffset opening the consumer, and the AvailableNow end check (every shard read "
        "twice past the cutoff). rows_per_s_add_batch is over the sum of the micro-batches' "
        "addBatch durations (the executor side: partitions shipped, read, rows into noop).",
        "Arrow vs tuples: both formats use the bridge's driver side unchanged (same consumer, "
        "same staging, same Arrow IPC payload per shard in each partition, same stream and "
        "record count, each from TRIM_HORIZON with its own checkpoint). The only difference is "
        "the executor: 'kinesis' yields the IPC's batches (cast to the Spark schema, zero copy); "
        "'kinesis_tuples' turns them into Python objects (column.to_pylist, zip) and yields "
        "tuples, which pyspark converts back to Arrow row by row (records_to_arrow_batches). "
        "The tuple path therefore includes the Arrow->Python object cost any tuple source pays "
        "to build its rows.",
        "The consumer reads with the polling defaults (5 GetRecords/s and 2 MiB/s per shard, "
        "like the service): with 4 shards that budget, not Spark, can bound the wall rows/s "
        "when Spark is fast (see driver_inprocess.rows_per_s: the same reads without Spark).",
        "CPU figures come from /proc (utime+stime) of this process's descendants, sampled "
        "every 0.2 s: source_runner is the query's python_streaming_source_runner (driver "
        "side: consumer, staging, IPC, pickling partitions), python_workers the pyspark.daemon "
        "workers (executor side), jvm the Spark JVM, kinesis_server the local server (node). "
        "All share the same 2 cores.",
        "Driver ceiling = 1e6 / (driver CPU microseconds per row): rows/s one driver core can "
        "stage. source_runner_net_cpu_us_per_row is marginal: (runner CPU of the measured query "
        "- mean runner CPU of the two warm-up queries) / (rows - warm-up rows), which removes "
        "(noisily: it varies by about 1 s between queries) the fixed "
        "cost per query (process start, imports, consumer open); driver_inprocess measures the "
        "same staging path in this process with no Spark at all (consumer + take + IPC; not "
        "the pickling of partitions nor the runner's socket to the JVM).",
        "Sink: batch_write is df.write.format('kinesis') of spark.range rows (cached before the "
        "clock) with 100 B binary data, 2 partitions (2 tasks, one producer each, aggregation "
        "on); stream_pipeline is readStream kinesis -> writeStream kinesis with AvailableNow, "
        "so it includes reading the source stream. The local server's CPU (kinesis_server) "
        "competes for the same 2 cores. A warm-up write runs first, so the measured write's "
        "python_workers CPU excludes the workers' one-time imports. preload is the same "
        "SyncProducer writing the source stream from this process, without Spark: its rows/s "
        "is what the local server accepts, the reference for the sink's rows/s.",
    ]
    if not all(source[label]["rows_match"] for label in ("arrow", "tuples")):
        notes.append("WARNING: a source query did not deliver exactly the pre-loaded rows")
    return notes


# -- output ---------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown(results: dict[str, Any]) -> str:
    """A small table of the headline figures."""
    source, sink = results["source"], results["sink"]
    lines = [
        f"Spark bridge, {results['records']:,} records of {results['record_bytes']} B, "
        f"{results['shards']} shards, local[2] ({results['machine']['cpu_model']}, "
        f"{results['machine']['cores']} cores)",
        "",
        "| measurement | rows/s (wall) | rows/s (addBatch) | micro-batches | wall s "
        "| driver CPU us/row | worker CPU us/row | JVM CPU us/row |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, title in (("arrow", "source, Arrow batches"), ("tuples", "source, Python tuples")):
        row = source[label]
        per = row["cpu_us_per_row"]
        lines.append(
            f"| {title} | {_fmt(row['rows_per_s'])} | {_fmt(row['rows_per_s_add_batch'])} "
            f"| {row['micro_batches']} | {_fmt(row['wall_s'])} "
            f"| {_fmt(row['source_runner_net_cpu_us_per_row'])} "
            f"| {_fmt(per.get('python_workers'))} | {_fmt(per.get('jvm'))} |"
        )
    batch = sink["batch_write"]
    pipe = sink["stream_pipeline"]
    lines.append(
        f"| sink, df.write | {_fmt(batch['rows_per_s'])} | - | - | {_fmt(batch['wall_s'])} "
        f"| - | {_fmt(batch['cpu_us_per_row'].get('python_workers'))} "
        f"| {_fmt(batch['cpu_us_per_row'].get('jvm'))} |"
    )
    lines.append(
        f"| kinesis -> writeStream kinesis | {_fmt(pipe['rows_per_s'])} "
        f"| {_fmt(pipe['rows_per_s_add_batch'])} | {pipe['micro_batches']} "
        f"| {_fmt(pipe['wall_s'])} "
        f"| {_fmt(pipe['cpu_us_per_row'].get('source_runner'))} "
        f"| {_fmt(pipe['cpu_us_per_row'].get('python_workers'))} "
        f"| {_fmt(pipe['cpu_us_per_row'].get('jvm'))} |"
    )
    inproc = results["driver_inprocess"]
    preload = results["preload"]
    lines += [
        "",
        f"Arrow / tuples: {_fmt(source['arrow_over_tuples_rows_per_s'])}x rows/s (wall), "
        f"{_fmt(source['arrow_over_tuples_add_batch'])}x (addBatch); worker CPU tuples / "
        f"Arrow: {_fmt(source['worker_cpu_tuples_over_arrow'])}x.",
        f"Driver staging without Spark: {_fmt(inproc['rows_per_s'])} rows/s, "
        f"{_fmt(inproc['cpu_us_per_row'])} us CPU/row (IPC {_fmt(inproc['ipc_us_per_row'])}), "
        f"ceiling {_fmt(inproc['ceiling_rows_per_s_per_core'])} rows/s per driver core; in the "
        f"query's runner: ceiling "
        f"{_fmt(source['arrow']['driver_ceiling_rows_per_s_per_core'])} rows/s per core.",
        f"SyncProducer from this process (no Spark, pre-load): {_fmt(preload['rows_per_s'])} "
        f"rows/s, {_fmt(preload['cpu_us_per_row'])} us CPU/row.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="30k records instead of 200k")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(f"spark-bench: {message}", file=sys.stderr, flush=True)

    results = run(args.quick, progress=progress)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    # Run from the imported module, not ``__main__``: Spark's workers unpickle the tuple data
    # source by reference to ``benchmarks.spark_bench``.
    from benchmarks.spark_bench import main as _main

    sys.exit(_main())
