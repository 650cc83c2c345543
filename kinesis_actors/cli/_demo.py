"""``kinesis-actors demo``: the whole product end to end, in under a minute.

1. Starts the embedded local Kinesis (or uses ``--endpoint-url``) and creates a source and a
   sink stream; a local Spark session starts meanwhile in a worker thread.
2. Produces a keyed workload through the :class:`~kinesis_actors.Producer` (a small bounded
   queue, so backpressure shows, and KPL aggregation per shard) while an Enhanced Fan-Out
   :class:`~kinesis_actors.Consumer` reads it live: put-to-consume latency is measured from
   the timestamp inside each record.
3. Runs a Spark micro-batch query (the ``kinesis`` format, Arrow batches, AvailableNow) from
   the source stream into the sink stream and a parquet folder.
4. A consumer group (with the embedded servers only): three worker processes share a stream
   through a lease table in the embedded local DynamoDB; once the shares are even one is
   SIGKILLed and the others take its shards over (``_demo_group``).
5. Verifies: the consumer saw every record exactly once and in order per key; the sink stream
   and the parquet folder hold every record once; the group delivered every record. Prints a
   summary; exits 0 only if all holds.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.to_thread
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..client import KinesisClient
from ..consumer import Consumer, ConsumerConfig, StartingPosition
from ..local import LocalKinesis, find_server_dir
from ..producer import Producer, ProducerConfig
from ._demo_group import GROUP_STEPS, GroupFigures, run_group
from ._demo_needs import check_spark, group_note

__all__ = ["DemoOptions", "run_demo"]

_KEYS = 50


@dataclass
class DemoOptions:
    records: int = 20_000
    shards: int = 4
    endpoint_url: str | None = None
    region: str = "us-east-1"
    verify: bool = True
    output: Path | None = None
    spark: bool = True
    group: bool = True


@dataclass
class _Figures:
    sent: dict[str, list[int]] = field(default_factory=dict)
    received: dict[str, list[int]] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    produce_seconds: float = 0.0
    consume_seconds: float = 0.0
    backpressure_cycles: int = 0
    calls: int = 0
    per_aggregate: float = 0.0
    failed: int = 0


async def _produce(
    client: KinesisClient,
    stream: str,
    *,
    records: int,
    figures: _Figures,
    progress: Any,
    task: Any,
) -> None:
    config = ProducerConfig(linger=0.02, queue_limit_records=1_000)
    started = time.perf_counter()
    async with Producer(client, stream, config) as producer:
        for i in range(records):
            key = f"user-{i % _KEYS}"
            figures.sent.setdefault(key, []).append(i)
            await producer.put(f"{key}:{i}:{time.time_ns()}".encode(), key)
            if i % 500 == 0:
                progress.update(task, completed=i)
        await producer.flush()
    progress.update(task, completed=records)
    figures.produce_seconds = time.perf_counter() - started
    metrics = producer.metrics
    figures.backpressure_cycles = metrics.backpressure_cycles
    figures.calls = metrics.calls
    figures.per_aggregate = metrics.records_per_kinesis_record
    figures.failed = metrics.records_failed


async def _consume(
    client: KinesisClient,
    stream: str,
    *,
    records: int,
    figures: _Figures,
    progress: Any,
    task: Any,
    subscribed: anyio.Event,
) -> None:
    config = ConsumerConfig(
        mode="efo",
        consumer_name=f"kinesis-actors-demo-{uuid.uuid4().hex[:6]}",
        registration="lazy",
        deregister_on_close=True,
        start=StartingPosition.trim_horizon(),
    )
    count = 0
    started: float | None = None
    async with Consumer(client, stream, config) as consumer:
        subscribed.set()
        async for batch in consumer:
            now = time.time_ns()
            started = started or time.perf_counter()
            for data in batch.arrow.column("data").to_pylist():
                key, index, stamp = data.decode().split(":")
                figures.received.setdefault(key, []).append(int(index))
                figures.latencies_ms.append((now - int(stamp)) / 1e6)
            count += len(batch)
            consumer.commit(batch)
            progress.update(task, completed=count)
            if count >= records:
                break
    figures.consume_seconds = time.perf_counter() - (started or time.perf_counter())


async def _count_stream(client: KinesisClient, stream: str, expected: int) -> list[str]:
    """Every record of ``stream`` (polling), once ``expected`` have been seen."""
    seen: list[str] = []
    config = ConsumerConfig(start=StartingPosition.trim_horizon(), idle_backoff_initial=0.05)
    async with Consumer(client, stream, config) as consumer:
        async for batch in consumer:
            seen.extend(data.decode() for data in batch.arrow.column("data").to_pylist())
            if len(seen) >= expected:
                break
    return seen


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


async def run_demo(options: DemoOptions) -> int:
    """The demo; before any stage, a usage error (one line) for a missing piece it needs."""
    if options.spark:
        check_spark()
    if options.endpoint_url is None:
        find_server_dir()  # LocalKinesisError: one line naming the install command
    group_stage = options.group and options.endpoint_url is None
    if group_stage and (note := group_note()) is not None:
        print(f"kinesis-actors: note: {note}", file=sys.stderr, flush=True)
        group_stage = False
    console = Console()
    records = options.records
    figures = _Figures()
    workdir = options.output or Path(tempfile.mkdtemp(prefix="kinesis-actors-demo-"))
    suffix = uuid.uuid4().hex[:6]
    source, sink = f"demo-source-{suffix}", f"demo-sink-{suffix}"
    spark_session = None
    spark_starting = None
    spark_log = workdir / "spark.log"
    if options.spark:
        from ._demo_spark import start_spark  # noqa: PLC0415 - pyspark is an extra

        workdir.mkdir(parents=True, exist_ok=True)
        spark_starting = _Background(partial(start_spark, spark_log))
    progress = _progress(console)
    async with (
        _Server(options) as (endpoint, verify, credentials),
        KinesisClient(
            region=options.region, endpoint_url=endpoint, verify=verify, credentials=credentials
        ) as client,
    ):
        console.print(f"Kinesis at [bold]{endpoint or 'AWS ' + options.region}[/]")
        for name in (source, sink):
            await client.create_stream(name, options.shards)
        console.print(f"streams [bold]{source}[/] and [bold]{sink}[/], {options.shards} shards")
        if spark_starting is not None:
            console.print(f"Spark's own log: {spark_log}")
        with progress:
            put_task = progress.add_task("produce (bounded queue)", total=records)
            efo_task = progress.add_task("consume (Enhanced Fan-Out)", total=records)
            subscribed = anyio.Event()
            with anyio.fail_after(180):
                async with anyio.create_task_group() as group:
                    group.start_soon(
                        partial(
                            _consume,
                            client,
                            source,
                            records=records,
                            figures=figures,
                            progress=progress,
                            task=efo_task,
                            subscribed=subscribed,
                        )
                    )
                    await subscribed.wait()
                    group.start_soon(
                        partial(
                            _produce,
                            client,
                            source,
                            records=records,
                            figures=figures,
                            progress=progress,
                            task=put_task,
                        )
                    )
            stage = None
            if spark_starting is not None:
                spark_task = progress.add_task("spark micro-batches → sink", total=records)
                spark_session = await spark_starting.result()
                connection = {"region": options.region, "verifySsl": str(verify).lower()}
                if endpoint is not None:
                    connection["endpointUrl"] = endpoint
                if credentials is not None:
                    connection["awsAccessKeyId"], connection["awsSecretKey"] = credentials[:2]
                stage = await _run_spark(
                    spark_session,
                    connection=connection,
                    source=source,
                    sink=sink,
                    workdir=workdir,
                    progress=progress,
                    task=spark_task,
                )
        sink_rows: list[str] = []
        parquet_rows = 0
        if stage is not None and spark_session is not None:
            session = spark_session
            with anyio.fail_after(120):
                sink_rows = await _count_stream(client, sink, records)
            parquet_rows = await anyio.to_thread.run_sync(
                lambda: int(session.read.parquet(str(workdir / "parquet")).count())
            )
        for name in (source, sink):
            if options.endpoint_url is not None:
                await client.call("DeleteStream", {"StreamName": name})
        team = None
        if group_stage and endpoint is not None and credentials is not None:
            console.print("consumer group: 3 worker processes, a lease table in local DynamoDB")
            with _progress(console) as steps, anyio.fail_after(120):
                step = steps.add_task("consumer group", total=len(GROUP_STEPS))

                def on_step(done: str) -> None:
                    steps.update(step, advance=1, description=f"group: {done}")

                team = await run_group(
                    client, endpoint, credentials, 6, workdir / "group.log", on_step=on_step
                )
    if spark_session is not None:
        await anyio.to_thread.run_sync(spark_session.stop)
    return _summary(
        console,
        options=options,
        figures=figures,
        stage=stage,
        sink_rows=sink_rows,
        parquet_rows=parquet_rows,
        workdir=workdir,
        group=team,
    )


async def _run_spark(
    spark: Any,
    *,
    connection: dict[str, str],
    source: str,
    sink: str,
    workdir: Path,
    progress: Any,
    task: Any,
) -> Any:
    from ._demo_spark import run_query  # noqa: PLC0415 - pyspark is an extra

    done = [0]

    def on_batch(rows: int) -> None:
        done[0] += rows
        progress.update(task, completed=done[0])

    return await anyio.to_thread.run_sync(
        partial(
            run_query,
            spark,
            source=source,
            sink=sink,
            connection=connection,
            output=workdir / "parquet",
            checkpoint=workdir / "checkpoint",
            on_batch=on_batch,
        )
    )


def _summary(
    console: Console,
    *,
    options: DemoOptions,
    figures: _Figures,
    stage: Any,
    sink_rows: list[str],
    parquet_rows: int,
    workdir: Path,
    group: GroupFigures | None = None,
) -> int:
    records = options.records
    in_order = figures.received == figures.sent
    expected_sink = sorted(f"{key}:{i}".upper() for key, idx in figures.sent.items() for i in idx)
    sink_ok = stage is None or (
        sorted(row.rsplit(":", 1)[0] for row in sink_rows) == expected_sink
        and parquet_rows == records
    )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    table = Table(title="kinesis-actors demo", show_header=False)
    table.add_row("records", f"{records:,} over {options.shards} shards, {_KEYS} keys")
    table.add_row(
        "produce",
        f"{records / figures.produce_seconds:,.0f} records/s; {figures.calls} PutRecords calls, "
        f"{figures.per_aggregate:.0f} records per aggregate, {figures.failed} failed",
    )
    table.add_row("backpressure cycles", f"{figures.backpressure_cycles} (queue of 1,000 records)")
    table.add_row(
        "consume (EFO)",
        f"{records / max(figures.consume_seconds, 1e-9):,.0f} records/s after the first batch",
    )
    table.add_row(
        "put→consume latency",
        f"p50 {_percentile(figures.latencies_ms, 0.5):,.0f} ms, "
        f"p99 {_percentile(figures.latencies_ms, 0.99):,.0f} ms",
    )
    if stage is not None:
        table.add_row(
            "spark (Arrow path)",
            f"{stage.rows:,} rows in {stage.batches} micro-batches, "
            f"{stage.rows / max(stage.seconds, 1e-9):,.0f} rows/s",
        )
        table.add_row("sink stream", f"{len(sink_rows):,} records")
        table.add_row("parquet", f"{parquet_rows:,} rows in {workdir / 'parquet'}")
    if group is not None:
        shares = ", ".join(f"{name} {len(held)}" for name, held in group.shares.items())
        after = ", ".join(f"{name} {len(held)}" for name, held in group.shares_after.items())
        table.add_row(
            "consumer group",
            f"{group.shards} shards, leases even after {group.even_seconds:.1f} s ({shares})",
        )
        table.add_row(
            "failover",
            f"{group.killed} SIGKILLed: its shards read again after "
            f"{group.takeover_seconds:.1f} s (failover time {group.failover_time:g} s; {after})",
        )
        table.add_row(
            "group deliveries",
            f"{group.written:,} records, {group.missing} missing, {group.duplicates} delivered "
            "twice (steals while the shares even out, and the crash: at-least-once)",
        )
    table.add_row("peak memory", f"{peak_mib:,.0f} MiB (this process)")
    console.print(table)
    print(f"every record exactly once, in order per key: {'yes' if in_order else 'NO'}")
    if stage is not None:
        print(f"sink stream and parquet hold every record once: {'yes' if sink_ok else 'NO'}")
    group_ok = group is None or group.ok
    if group is not None:
        print(f"the group delivered every record after a failover: {'yes' if group_ok else 'NO'}")
    return 0 if in_order and sink_ok and group_ok else 1


class _Background:
    """Run a blocking function in a thread from now on; ``await result()`` later."""

    def __init__(self, function: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = threading.Event()

        def target() -> None:
            try:
                self._value = function()
            except BaseException as exc:
                self._error = exc
            finally:
                self._done.set()

        threading.Thread(target=target, name="spark-start", daemon=True).start()

    async def result(self) -> Any:
        await anyio.to_thread.run_sync(self._done.wait)
        if self._error is not None:
            raise self._error
        return self._value


class _Server:
    """The embedded local Kinesis, or the endpoint the user gave."""

    def __init__(self, options: DemoOptions) -> None:
        self._options = options
        self._local: LocalKinesis | None = None

    async def __aenter__(self) -> tuple[str | None, bool, Any]:
        if self._options.endpoint_url is not None:
            return self._options.endpoint_url, self._options.verify, None
        self._local = LocalKinesis()
        await self._local.__aenter__()
        return self._local.tls_endpoint_url, False, self._local.credentials

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._local is not None:
            await self._local.__aexit__(exc_type, exc, tb)
