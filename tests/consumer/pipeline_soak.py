"""A soak of the whole pipeline across resharding: what each reader delivers, loses, repeats
and puts out of order.

A :class:`~kinesis_actors.Producer` (default settings: aggregation on, ``preserve_order``)
writes ``key|index`` records of ``keys`` keys at a steady rate, each key's records one after
the other, through the fault proxy (``tests/faults.py``: throttles, 500s, dropped
connections, partial failures, stalls). Meanwhile the stream is resharded in cycles: a shard
split at its midpoint, another split a third of the way into its range, each split's
children merged back. Four readers read it from the trim horizon at the same time:

* an Enhanced Fan-Out consumer, whose TLS connections run through a CONNECT tunnel
  (``tests/connect_proxy.py``) that is reset at the TCP level now and then: the local server
  then holds the shard from it for 300 s, and it reads by GetRecords meanwhile;
* a polling consumer;
* a lease group of worker processes (``tests/consumer/_group_worker.py``, one on asyncio and
  one on trio) that are SIGKILLed and started again under the same id;
* a Spark Structured Streaming query (``tests/spark_bridge/_query_job.py``) to parquet, its
  driver killed (the whole process group) and the query started again from its checkpoint;
  once the writes end, an ``availableNow`` run reads the rest.

Then the faults stop, everything written must arrive, and the report says, per reader:
``delivered`` (distinct records), ``lost`` (acknowledged, never delivered), ``duplicates``
(deliveries beyond the first), and ``order_violations`` (a record delivered for the first
time after a later record of its key had been; a replay of records already delivered is a
duplicate, not a violation), which must be 0 for every reader. An off-midpoint split may
put the records of aggregates in flight across it on the child that does not own their key
(the producer's ``misplaced_records``); those keys' later records follow them there, so
``off_own_shard`` (records the readers found on a shard not owning their key) is at least
that. Spark must deliver every stream record exactly once (``duplicates`` 0, ``lost`` 0),
across the kills.

The suite runs a short form (``tests/consumer/test_pipeline_soak_local.py``); the long one
runs by hand and prints its report::

    python -m tests.consumer.pipeline_soak --seconds 600
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio

from kinesis_actors import KinesisClient, LocalDynamoDB, LocalKinesis, Producer, ProducerConfig
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition
from kinesis_actors.records import hash_key
from tests.connect_proxy import ConnectProxy
from tests.faults import FaultProxy

from .group import Group
from .lease_soak import Workers
from .pipeline_parts import Delivery, Faults, Reader, Resharder, SparkRuns, Writer

log = logging.getLogger("tests.pipeline_soak")


@dataclass(frozen=True)
class PipelineSettings:
    """How long, how fast, how hostile."""

    seconds: float = 40.0
    keys: int = 150
    rate: float = 150.0  # user records a second
    shards: int = 2
    reshard_every: float = 6.0  # one split or merge this often
    reshards_at_least: int = 3  # a midpoint split, an off-midpoint one, a merge (a busy
    # machine may take longer than ``seconds`` for them: the writes go on until they are done)
    kill_every: float = 8.0  # a group worker SIGKILLed and restarted this often
    spark_kill_every: float = 0.0  # 0: one driver kill, half way or after its first commit
    efo_reset_every: float = 0.0  # 0: one reset of the EFO tunnel, a third of the way
    efo_fallback_after: float = 3.0
    spark_catch_up: float = 600.0  # once the writes end, Spark gets this long to commit all
    faults: float = 0.12  # of PutRecords calls: one fault of the mix in ``Faults``
    seed: int = 0
    leases: dict[str, float] = field(
        default_factory=lambda: {
            "failover_time": 2.5,
            "renew_interval": 0.5,
            "take_interval": 0.25,
            "shard_sync_interval": 1.0,
        }
    )


@dataclass
class ReaderReport:
    delivered: int = 0
    lost: int = 0
    duplicates: int = 0
    order_violations: int = 0


@dataclass
class PipelineReport:
    """What the soak measured (see the module's doc)."""

    seconds: float = 0.0
    written: int = 0
    unsettled: int = 0
    failed: int = 0
    stream_records: int = 0
    stream_duplicates: int = 0  # one ``key|index`` at two positions (a resend)
    misplaced_records: int = 0  # the producer's count
    off_own_shard: int = 0  # records the readers found on a shard not owning their key
    aggregation: float = 0.0  # user records per Kinesis record
    splits: int = 0
    merges: int = 0
    worker_kills: int = 0
    worker_deaths: int = 0
    spark_kills: int = 0
    spark_deaths: int = 0
    spark_caught_up: bool = False  # its last run committed every record within the bound
    spark_runs: int = 0
    efo_resets: int = 0
    efo_fallbacks: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    rss_mib: tuple[float, float] = (0.0, 0.0)  # this process, after warm-up and at the end
    fds: tuple[int, int] = (0, 0)
    readers: dict[str, ReaderReport] = field(default_factory=dict)

    def line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@contextmanager
def _through(proxy: ConnectProxy) -> Iterator[None]:
    """HTTPS_PROXY set to ``proxy`` while a client opens (it reads the variable then)."""
    names = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy")
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    os.environ["HTTPS_PROXY"] = proxy.url()
    try:
        yield
    finally:
        del os.environ["HTTPS_PROXY"]
        os.environ.update(saved)


def judge(
    name: str,
    deliveries: list[Delivery],
    written: set[tuple[str, int]],
    report: PipelineReport,
) -> ReaderReport:
    """Fill one reader's figures from its deliveries, in the order it delivered them."""
    out = ReaderReport()
    delivered: dict[str, set[int]] = defaultdict(set)
    high: dict[str, int] = {}
    for key, index, *_ in deliveries:
        if index in delivered[key]:
            out.duplicates += 1
            continue
        if index < high.get(key, -1):
            out.order_violations += 1
        delivered[key].add(index)
        high[key] = max(high.get(key, -1), index)
    got = {(key, index) for key, indices in delivered.items() for index in indices}
    out.delivered = len(got)
    out.lost = len(written - got)
    report.readers[name] = out
    return out


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _shard_ranges(client: KinesisClient, stream: str) -> dict[str, tuple[int, int]]:
    shards = (await client.call("ListShards", {"StreamName": stream}))["Shards"]
    return {
        s["ShardId"]: (
            int(s["HashKeyRange"]["StartingHashKey"]),
            int(s["HashKeyRange"]["EndingHashKey"]),
        )
        for s in shards
    }


async def _until(predicate: Callable[[], bool], seconds: float) -> bool:
    with anyio.move_on_after(seconds):
        while not predicate():
            await anyio.sleep(0.2)  # other readers' progress: nothing to await
        return True
    return False


async def run_soak(
    kinesis: LocalKinesis, dynamodb: LocalDynamoDB, directory: Path, settings: PipelineSettings
) -> PipelineReport:
    """One soak, bounded by ``settings.seconds`` plus the drain (a few minutes at most)."""
    report = PipelineReport()
    faults = Faults(settings.faults, settings.seed)
    stream = f"pipeline-{settings.seed}-{int(time.time())}"
    keys = [f"user-{i}" for i in range(settings.keys)]
    efo_config = ConsumerConfig(
        mode="efo",
        consumer_name=f"soak-{settings.seed}",
        start=StartingPosition.trim_horizon(),
        shard_discovery_interval=1.0,
        efo_starvation_warning=settings.efo_fallback_after,
        efo_fallback_after=settings.efo_fallback_after,
    )
    polling_config = ConsumerConfig(
        start=StartingPosition.trim_horizon(), shard_discovery_interval=1.0
    )
    started = time.time()
    async with AsyncExitStack() as stack:
        admin = await stack.enter_async_context(kinesis.client(tls=False))
        await admin.create_stream(stream, settings.shards)
        proxy = stack.enter_context(FaultProxy(kinesis.plain_port, faults.decide))
        tunnel = stack.enter_context(ConnectProxy())
        with _through(tunnel):
            efo_client = await stack.enter_async_context(kinesis.client(tls=True))
        producer_client = await stack.enter_async_context(
            KinesisClient(
                region=kinesis.region,
                endpoint_url=proxy.endpoint_url,
                credentials=kinesis.credentials,
            )
        )
        group = Group(kinesis, dynamodb, stream, f"{stream}-leases", directory, settings.leases)
        stack.callback(group.close)
        workers = Workers(group, ["w1", "w2"], 0.0)
        spark = SparkRuns(kinesis, stream, directory)
        stack.callback(spark.kill)
        resharder = Resharder(admin, stream)
        producer = await stack.enter_async_context(
            Producer(producer_client, stream, ProducerConfig())
        )
        efo = await stack.enter_async_context(Consumer(efo_client, stream, efo_config))
        polling = await stack.enter_async_context(Consumer(admin, stream, polling_config))
        readers = {"efo": Reader(efo), "polling": Reader(polling)}
        async with anyio.create_task_group() as tg:
            for reader in readers.values():
                tg.start_soon(reader.run)
            for worker in workers.ids:
                workers.start(worker)
            spark.start()
            writer = Writer(producer, keys, settings.rate)
            tg.start_soon(writer.run)
            started = time.time()
            chaos = _Chaos(settings, started, tunnel, workers, spark, resharder, report)
            await chaos.run()
            while resharder.step < settings.reshards_at_least:  # still under writes
                await resharder.next()
            log.info("writes end: %d puts", len(writer.handles))
            report.rss_mib = (report.rss_mib[0], _rss_mib())
            report.fds = (report.fds[0], _fds())
            faults.on = False
            writer.stopping.set()
            with anyio.fail_after(120):
                await producer.flush()
            written = {(k, i) for k, i, h in writer.handles if h.exception() is None}
            report.written = len(written)
            report.unsettled = sum(not h.done() for *_, h in writer.handles)
            report.failed = sum(h.exception() is not None for *_, h in writer.handles)

            def arrived(deliveries: Callable[[], list[Delivery]]) -> Callable[[], bool]:
                return lambda: written <= {(d[0], d[1]) for d in deliveries()}

            log.info("flushed: %d written", len(written))
            if spark.kills == 0:
                # Spark had not committed a micro-batch yet (it starts slowly on a busy
                # machine): it is killed after its first, still behind the writes.
                await spark.kill_once_committed()
            await _until(arrived(lambda: readers["efo"].deliveries), 120)
            await _until(arrived(lambda: readers["polling"].deliveries), 60)
            await _until(arrived(lambda: _group_deliveries(group)), 120)
            log.info("readers drained")
            workers.check()
            report.spark_caught_up = await spark.finish(
                {(d[2], d[3], d[4]) for r in readers.values() for d in r.deliveries},
                settings.spark_catch_up,
            )
            log.info("spark finished")
            report.seconds = time.time() - started
            metrics = producer.metrics
            efo_metrics = efo.statistics()
            efo.stop()
            polling.stop()
        ranges = await _shard_ranges(admin, stream)
        report.faults = dict(proxy.stats.faults)
    report.misplaced_records = metrics.misplaced_records
    report.aggregation = round(metrics.records_per_kinesis_record, 2)
    report.efo_fallbacks = sum(s.fallbacks for s in efo_metrics.shards.values())
    report.splits, report.merges = resharder.splits, resharder.merges
    report.worker_deaths = workers.deaths
    report.spark_kills, report.spark_runs = spark.kills, spark.runs
    report.spark_deaths = spark.deaths
    _judge_all(report, written, ranges, readers, group, spark)
    return report


def _group_deliveries(group: Group) -> list[Delivery]:
    """The group's deliveries in the order they were made: by time across workers, by log
    line within one (a child's reader starts only after its parent's finished)."""
    out = []
    for d in sorted(group.deliveries(), key=lambda d: (d.t, d.worker, d.n)):
        key, index = d.data.split("|")
        out.append((key, int(index), d.shard, d.seq, d.sub))
    return out


def _judge_all(
    report: PipelineReport,
    written: set[tuple[str, int]],
    ranges: dict[str, tuple[int, int]],
    readers: dict[str, Reader],
    group: Group,
    spark: SparkRuns,
) -> None:
    polling = readers["polling"].deliveries
    positions: dict[tuple[str, str, int], tuple[str, int]] = {}
    for key, index, shard, seq, sub in polling + readers["efo"].deliveries:
        positions[(shard, seq, sub)] = (key, index)
    report.stream_records = len(positions)
    report.stream_duplicates = len(positions) - len(set(positions.values()))
    for (shard, _, _), (key, _) in positions.items():
        start, end = ranges[shard]
        report.off_own_shard += not start <= hash_key(key) <= end
    judge("efo", readers["efo"].deliveries, written, report)
    judge("polling", polling, written, report)
    judge("group", _group_deliveries(group), written, report)
    # Spark delivers in micro-batches; within one, a key's rows come from one shard (parents
    # are finished in an earlier batch than their children are started), in shard order.
    rows = sorted(spark.rows(), key=lambda r: (r[0], r[1][2], int(r[1][3]), r[1][4]))
    spark_report = judge("spark", [d for _, d in rows], written, report)
    seen = {(d[2], d[3], d[4]) for _, d in rows}
    spark_report.duplicates = len(rows) - len(seen)  # per stream record, not per ``key|index``
    spark_report.lost = len(positions.keys() - seen)


class _Chaos:
    """Until ``settings.seconds`` have passed: reshards, worker kills, Spark driver kills and
    EFO resets, each on its own schedule (seconds since the start)."""

    def __init__(
        self,
        settings: PipelineSettings,
        started: float,
        tunnel: ConnectProxy,
        workers: Workers,
        spark: SparkRuns,
        resharder: Resharder,
        report: PipelineReport,
    ) -> None:
        self.settings, self.started, self.report = settings, started, report
        self.tunnel, self.workers, self.spark, self.resharder = tunnel, workers, spark, resharder
        self.rng = random.Random(settings.seed + 1)
        self.every = {
            "reshard": settings.reshard_every,
            "kill": settings.kill_every,
            "spark": settings.spark_kill_every or settings.seconds / 2,
            "reset": settings.efo_reset_every or settings.seconds / 3,
        }
        self.once = {"spark": not settings.spark_kill_every, "reset": not settings.efo_reset_every}

    async def run(self) -> None:
        """Each action in a loop of its own (a reshard waits for the stream to be active
        again, seconds on a busy machine: it must not hold back a kill)."""
        async with anyio.create_task_group() as tg:
            for action in self.every:
                tg.start_soon(self._loop, action)
            warm = min(10.0, self.settings.seconds / 4)
            await anyio.sleep(max(0.0, self.started + warm - time.time()))
            self.report.rss_mib, self.report.fds = (_rss_mib(), 0.0), (_fds(), 0)
            await anyio.sleep(max(0.0, self.started + self.settings.seconds - time.time()))
            tg.cancel_scope.cancel()

    async def _loop(self, action: str) -> None:
        due = self.every[action]
        while True:
            await anyio.sleep(max(0.0, self.started + due - time.time()))
            self.workers.check()
            self.spark.check()
            log.info("%.1fs: %s", time.time() - self.started, action)
            if action == "reshard":
                with anyio.CancelScope(shield=True):  # a reshard is waited out, not left half
                    await self.resharder.next()
            elif action == "kill":
                with anyio.CancelScope(shield=True):  # killed, then restarted
                    await self.workers.kill_and_restart(self.rng.choice(self.workers.ids))
                self.report.worker_kills += 1
            elif action == "spark":
                if not self.spark.committed_since_start():
                    due += 2.0  # a kill before its first commit would prove nothing
                    continue
                self.spark.kill()
                self.spark.start()
            else:
                await anyio.to_thread.run_sync(self.tunnel.reset)  # it waits for its thread
                self.report.efo_resets += 1
            if self.once.get(action):
                return
            due += self.every[action]


async def _main(settings: PipelineSettings, keep: str | None) -> None:
    with (
        tempfile.TemporaryDirectory() as directory,
        LocalKinesis(shard_limit=10_000) as kinesis,
        LocalDynamoDB() as dynamodb,
    ):
        logs = Path(keep) if keep else Path(directory)
        logs.mkdir(parents=True, exist_ok=True)
        report = await run_soak(kinesis, dynamodb, logs, settings)
    print(report.line())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=150.0)
    parser.add_argument("--keys", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", help="a folder to keep the logs in")
    parser.add_argument("--short", action="store_true", help="the suite's settings")
    parser.add_argument(
        "--efo-reset-every", type=float, default=200.0, help="seconds; 0 for no TCP resets"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    # A SIGTERM leaves like Ctrl-C, through every context manager: no server or worker
    # process outlives the soak.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    settings = (
        PipelineSettings(seed=args.seed)
        if args.short
        else PipelineSettings(
            seconds=args.seconds,
            rate=args.rate,
            keys=args.keys,
            seed=args.seed,
            reshard_every=20.0,
            kill_every=30.0,
            spark_kill_every=150.0,
            efo_reset_every=args.efo_reset_every or float("inf"),
            efo_fallback_after=30.0,
            spark_catch_up=max(600.0, args.seconds),
        )
    )
    anyio.run(_main, settings, args.keep)


if __name__ == "__main__":
    main()
