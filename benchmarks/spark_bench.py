"""Spark bridge benchmarks: the ``kinesis`` source and sink.

One run, one local Spark session (``local[2]``):

1. **Source**: ``records`` records of 100 B, KPL-aggregated by ``SyncProducer``, pre-loaded
   into a 4-shard stream of the benchmark load target (``benchmarks.loadtarget``, fast enough
   that Spark and the bridge are measured, not the server), then a short pause and 2,000
   more. ``readStream.format("kinesis")`` with ``Trigger.AvailableNow`` into the ``noop``
   sink (the driver plans, the tasks read their ranges). Rows/s over the query's wall time
   and over the micro-batches' ``addBatch``, and the CPU of every process of the run
   (``/proc``), net of a warm-up query.
2. **The same through Python tuples**: ``kinesis_tuples``, whose ``read`` yields Python
   tuples instead of Arrow batches.
3. **The planner in this process** (no Spark): one micro-batch of about 10,000 rows and one
   of every pre-loaded row, both ending at an anchor on the same shards: driver CPU per
   micro-batch, calls per shard, pickled partition sizes; and the executor range reader's
   rows/s in this process.
4. **Sink** against the embedded local server: ``df.write.format("kinesis")`` and a
   Kinesis -> Spark -> Kinesis ``writeStream``.

The previous design, where the driver read every record and shipped the rows in the tasks
(``readPath=driver``), was measured here side by side until it was removed; its figures are
in docs/spark.md ("Where this stops scaling").

Usage: ``python -m benchmarks.spark_bench [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pickle
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

import spark_bridge
from benchmarks._common import KEYS, load, machine, payloads
from benchmarks._spark import ProcessCpu, spark_session
from benchmarks.loadtarget import LoadTarget
from kinesis_actors import LocalKinesis, ProducerConfig
from kinesis_actors.sync import SyncProducer
from spark_bridge import KinesisDataSource

__all__ = ["TupleKinesisDataSource", "main", "markdown", "run"]

TAIL_RECORDS = 2_000
"""Records put after the pre-load and a pause: the planner's anchors for the whole pre-load."""
PAUSE_S = 1.5

SHARDS = 4
RECORD_BYTES = 100
SCALES = {"full": 200_000, "quick": 30_000}
WARMUP_RECORDS = 2_000
QUERY_TIMEOUT = 600.0


# -- the tuple comparison source -----------------------------------------------------------------


class TupleStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The bridge's reader, but ``read`` yields Python tuples instead of Arrow batches.

    The task reads the same range; the rows are turned into Python objects
    column by column (``to_pylist``) and zipped into tuples, which Spark then converts back to
    Arrow in the worker (``records_to_arrow_batches``), row by row with its type checks. Built
    around the reader the public data source gives (``KinesisDataSource.streamReader``), every
    other call passed to it as it is.
    """

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def initialOffset(self) -> Any:
        return self._reader.initialOffset()

    def getDefaultReadLimit(self) -> Any:
        return self._reader.getDefaultReadLimit()

    def latestOffset(self, start: Any = None, limit: Any = None) -> Any:
        return self._reader.latestOffset(start, limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._reader.prepareForTriggerAvailableNow()

    def reportLatestOffset(self) -> Any:
        return self._reader.reportLatestOffset()

    def partitions(self, start: Any, end: Any) -> Any:
        return self._reader.partitions(start, end)

    def read(self, partition: Any) -> Iterator[Any]:
        for batch in self._reader.read(partition):
            yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)

    def commit(self, end: Any) -> None:
        self._reader.commit(end)

    def stop(self) -> None:
        self._reader.stop()


class TupleKinesisDataSource(KinesisDataSource):
    """``format("kinesis_tuples")``: :class:`TupleStreamReader` behind the bridge's options."""

    @classmethod
    def name(cls) -> str:
        return "kinesis_tuples"

    def streamReader(self, schema: Any) -> Any:
        return TupleStreamReader(super().streamReader(schema))


# -- helpers ----------------------------------------------------------------------------------


def _options(local: LocalKinesis | LoadTarget, stream: str) -> dict[str, str]:
    return {
        "streamName": stream,
        "endpointUrl": local.endpoint_url,
        "awsAccessKeyId": "local",
        "awsSecretKey": "local",
    }


def _preload(local: LocalKinesis | LoadTarget, stream: str, count: int) -> dict[str, Any]:
    """Put ``count`` records of 100 B (aggregated) from this process; its figures."""
    started, cpu = time.perf_counter(), time.process_time()
    data = payloads(RECORD_BYTES)
    with SyncProducer(
        stream,
        endpoint_url=local.endpoint_url,
        credentials=("local", "local"),
        config=ProducerConfig(aggregation=True),
        batch_size=512,
    ) as producer:
        for index in range(count):
            producer.put(data[index % len(data)], KEYS[index % len(KEYS)])
        producer.flush()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "span_s": round(wall, 3),
        "rows": count,
        "wall_s": round(wall, 3),
        "rows_per_s": round(count / wall, 1),
        "cpu_us_per_row": round(cpu / max(count, 1) * 1e6, 3),
    }


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


def _read_partitions(reader: Any, start: Any, end: Any) -> int:
    """What the tasks would read for (start, end), in this process (``reader``: the
    bridge's, whose ``read`` yields Arrow batches): the rows counted."""
    rows = 0
    for partition in reader.partitions(start, end):
        for batch in reader.read(pickle.loads(pickle.dumps(partition))):
            rows += batch.num_rows
    return rows


def _planner_inprocess(
    target: LoadTarget, stream: str, span_s: float, rows: int, repeats: int = 3
) -> dict[str, Any]:
    """The executors path's driver side without Spark: one micro-batch of about 10,000 rows
    and one of every pre-loaded row, each ending at an anchor (the records put after the
    pause), planned ``repeats`` times by a fresh reader; medians."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: PLC0415

    out: dict[str, Any] = {}
    small_window = max(span_s * min(10_000, rows // 2) / max(rows, 1), 0.001)
    for label, window_s in (("small", small_window), ("all", span_s + PAUSE_S / 2)):
        samples: list[dict[str, Any]] = []
        for _ in range(repeats):
            options = {
                **_options(target, stream),
                "arrivalWindowPerTrigger": f"{window_s * 1000:.0f}ms",
                "settleLag": "100ms",
            }
            source = KinesisDataSource({k.lower(): v for k, v in options.items()})
            reader = source.streamReader(source.schema())
            start = reader.initialOffset()
            reader._get_planner()  # the client opens outside the measurement
            cpu0 = time.process_time()
            end = reader.latestOffset(start, ReadAllAvailable())
            parts = reader.partitions(start, end)
            sizes = [len(pickle.dumps(part)) for part in parts]
            cpu = time.process_time() - cpu0
            calls = dict(reader._planner.calls) if reader._planner else {}
            began = time.perf_counter()
            read = _read_partitions(reader, start, end)
            read_s = time.perf_counter() - began
            reader.stop()
            samples.append(
                {"cpu_s": cpu, "rows": read, "calls": calls, "sizes": sizes, "read_s": read_s}
            )
        cpu_s = statistics.median(sample["cpu_s"] for sample in samples)
        batch_rows = int(statistics.median(sample["rows"] for sample in samples))
        calls = samples[-1]["calls"]
        data_calls = calls.get("GetShardIterator", 0) + calls.get("GetRecords", 0)
        out[label] = {
            "rows": batch_rows,
            "window_s": round(window_s, 3),
            "driver_cpu_ms_per_batch": round(cpu_s * 1000, 2),
            "driver_cpu_ms_per_batch_runs": [round(x["cpu_s"] * 1000, 2) for x in samples],
            "driver_cpu_us_per_row": round(cpu_s / max(batch_rows, 1) * 1e6, 4),
            "calls": calls,
            "data_calls_per_shard": round(data_calls / SHARDS, 2),
            "partition_bytes_max": max(samples[-1]["sizes"], default=0),
            "partitions": len(samples[-1]["sizes"]),
            "executor_read_rows_per_s_inprocess": round(
                batch_rows / statistics.median(x["read_s"] for x in samples), 1
            ),
        }
    return out


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
    names = {role: f"spark-bench-{role}-{tag}" for role in ("warm", "sink", "pipe")}
    results: dict[str, Any] = {
        "suite": "kinesis-actors spark bench",
        "mode": "custom" if records else "quick" if quick else "full",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "loadavg_start": load(),
        "records": n,
        "record_bytes": RECORD_BYTES,
        "shards": SHARDS,
        "tail_records": TAIL_RECORDS,
    }
    started = time.perf_counter()
    with (
        LoadTarget(shards=SHARDS, retain_records=n + TAIL_RECORDS + 1000, limits=None) as target,
        LocalKinesis(streams=dict.fromkeys(names.values(), SHARDS)) as local,
    ):
        source_stream = target.stream_name
        progress(f"pre-loading {n} records into {SHARDS} shards of the load target")
        results["preload"] = _preload(target, source_stream, n)
        time.sleep(PAUSE_S)  # the pause the anchors of the whole pre-load fall into
        _preload(target, source_stream, TAIL_RECORDS)
        total = n + TAIL_RECORDS
        _preload(local, names["warm"], warm)

        progress("the planner in this process (no Spark)")
        results["planner_inprocess"] = _planner_inprocess(
            target, source_stream, results["preload"]["span_s"], n
        )

        progress("starting Spark")
        spark, owned = spark_session()
        try:
            spark_bridge.register(spark)
            spark.dataSource.register(TupleKinesisDataSource)
            with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
                folder = Path(tmp)
                paths: tuple[tuple[str, str, dict[str, str]], ...] = (
                    ("executors", "kinesis", {}),
                    ("tuples", "kinesis_tuples", {}),
                )
                warmups: dict[str, Any] = {}
                for label, fmt, extra in paths:
                    progress(f"warm-up query ({label}, {warm} rows)")
                    options = {**_options(local, names["warm"]), **extra}
                    warmups[label] = _source(spark, fmt, options, folder / f"warm-{label}", warm)
                results["warmup"] = warmups
                source: dict[str, Any] = {}
                for label, fmt, extra in paths:
                    progress(f"source, {label}: {total} rows")
                    options = {**_options(target, source_stream), **extra}
                    figures = _source(spark, fmt, options, folder / f"cp-{label}", total)
                    fixed = warmups[label]["cpu_s"].get("source_runner", 0.0)
                    runner = figures["cpu_s"].get("source_runner", 0.0)
                    net = max(runner - fixed, 0.0) / max(figures["rows"] - warm, 1) * 1e6
                    figures["source_runner_fixed_cpu_s"] = fixed
                    figures["source_runner_net_cpu_us_per_row"] = round(net, 4)
                    figures["driver_ceiling_rows_per_s_per_core"] = (
                        round(1e6 / net) if net else None
                    )
                    source[label] = figures
                source["arrow_over_tuples_rows_per_s"] = _ratio(
                    source["executors"]["rows_per_s"], source["tuples"]["rows_per_s"]
                )
                source["arrow_over_tuples_add_batch"] = _ratio(
                    source["executors"]["rows_per_s_add_batch"],
                    source["tuples"]["rows_per_s_add_batch"],
                )
                results["source"] = source

                progress(f"sink: df.write of {warm} rows (warm-up), then {n} rows")
                sink_options = _options(local, names["sink"])
                warm_write = _sink_batch(spark, sink_options, warm)
                batch_write = _sink_batch(spark, sink_options, n)
                batch_write["warmup"] = warm_write
                sink: dict[str, Any] = {"batch_write": batch_write}
                progress(f"sink: writeStream, kinesis source -> kinesis sink, {total} rows")
                frame = (
                    spark.readStream.format("kinesis")
                    .options(**_options(target, source_stream))
                    .load()
                    .select("data", "partitionKey")
                )
                sink["stream_pipeline"] = _stream_query(
                    lambda writer: (
                        writer.format("kinesis").options(**_options(local, names["pipe"])).start()
                    ),
                    frame,
                    folder / "cp-pipe",
                    total,
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
        "Source rows/s is over the query's wall time (start() to termination: the runner's "
        "start, planning, every micro-batch, the AvailableNow end check); rows_per_s_add_batch "
        "over the sum of the micro-batches' addBatch (the tasks: read, rows into noop).",
        "executors: the driver plans (a few calls per shard and trigger, see "
        "planner_inprocess) and the tasks read their ranges with GetRecords; tuples: the same "
        "reads, yielded as Python tuples. Same stream, same rows, each from TRIM_HORIZON with "
        "its own checkpoint, default options (10 s windows).",
        "source_runner_net_cpu_us_per_row: (CPU of the query's python_streaming_source_runner "
        "- that of a warm-up query of the same path reading the warm-up rows) / (rows - "
        "warm-up rows): the runner's fixed cost (process start, imports, opening clients) "
        "removed, noisily (it varies by tens of ms between queries).",
        "planner_inprocess: the executors path's latestOffset + partitions (+ pickling them) "
        "in this process, for a micro-batch of about 10,000 rows and one of every pre-loaded "
        "row, both ending at an anchor on the same 4 shards; medians of 3 fresh readers. "
        "data_calls_per_shard counts GetShardIterator + GetRecords for the trigger.",
        "The load target (benchmarks.loadtarget, no service limits) serves the source stream so "
        "that Spark and the bridge are measured; the sink writes to the embedded local server "
        "(kinesis-mock), whose PutRecords rate bounds the sink rows/s. All processes share the "
        "same 2 cores. CPU figures come from /proc (utime+stime), sampled every 0.2 s.",
    ]
    if not all(source[label]["rows_match"] for label in ("executors", "tuples")):
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
        f"Spark bridge, {results['records']:,} records of {results['record_bytes']} B "
        f"(+{results['tail_records']:,}), {results['shards']} shards, local[2] "
        f"({results['machine']['cpu_model']}, {results['machine']['cores']} cores)",
        "",
        "| measurement | rows/s (wall) | rows/s (addBatch) | micro-batches | wall s "
        "| driver CPU us/row | worker CPU us/row | JVM CPU us/row |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, title in (
        ("executors", "source, executors read (Arrow)"),
        ("tuples", "source, executors read (tuples)"),
    ):
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
    planner = results["planner_inprocess"]
    lines += [
        "",
        "| planner in this process | rows | driver CPU ms/batch | us/row "
        "| GetShardIterator+GetRecords per shard | largest partition, bytes |",
        "|---|---|---|---|---|---|",
    ]
    for label in ("small", "all"):
        row = planner[label]
        lines.append(
            f"| one micro-batch, {label} | {_fmt(row['rows'])} "
            f"| {_fmt(row['driver_cpu_ms_per_batch'])} | {_fmt(row['driver_cpu_us_per_row'])} "
            f"| {_fmt(row['data_calls_per_shard'])} | {_fmt(row['partition_bytes_max'])} |"
        )
    lines += [
        "",
        f"Arrow / tuples: {_fmt(source['arrow_over_tuples_rows_per_s'])}x rows/s (wall).",
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
