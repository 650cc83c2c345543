"""The moving parts of the pipeline soak (``tests/consumer/pipeline_soak.py``): the
producer's faults, a steady keyed writer, in-process readers, the resharder, and the Spark
query's runs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pyarrow.parquet as pq

from kinesis_actors import KinesisClient, LocalKinesis, Producer
from kinesis_actors.consumer import Consumer
from tests.faults import Cut, Delay, RejectRecords, Reply, Request
from tests.spark_bridge._query_job import committed_files, launch

#: A delivery as every reader reports it: (key, index, shard, sequence number, subsequence).
Delivery = tuple[str, int, str, str, int]


class Faults:
    """The producer's faults, from one seeded generator; only PutRecords calls meet them."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.on = True

    def decide(self, request: Request) -> Cut | Delay | Reply | RejectRecords | None:
        if not self.on or request.target != "PutRecords" or self.rng.random() >= self.rate:
            return None
        kind = self.rng.randrange(5)
        if kind == 0:
            return Reply.error("ProvisionedThroughputExceededException")
        if kind == 1:
            return Reply.error("InternalFailure", status=500)
        if kind == 2:
            return Cut()
        if kind == 3:
            return RejectRecords(frozenset(self.rng.sample(range(500), 20)))
        return Delay(self.rng.uniform(0.2, 1.0))


class Writer:
    """Puts ``key|index`` records at a steady rate, keys round robin, each key's in order."""

    def __init__(self, producer: Producer, keys: list[str], rate: float) -> None:
        self.producer, self.keys, self.rate = producer, keys, rate
        self.handles: list[tuple[str, int, Any]] = []
        self.stopping = anyio.Event()

    async def run(self) -> None:
        began = anyio.current_time()
        sent = 0
        while not self.stopping.is_set():
            key = self.keys[sent % len(self.keys)]
            index = sent // len(self.keys)
            handle = await self.producer.put(f"{key}|{index}".encode(), key)
            self.handles.append((key, index, handle))
            sent += 1
            ahead = began + sent / self.rate - anyio.current_time()
            if ahead > 0:
                with anyio.move_on_after(ahead):
                    await self.stopping.wait()


class Reader:
    """One in-process consumer's deliveries, in the order it handed them out."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.deliveries: list[Delivery] = []

    async def run(self) -> None:
        async for batch in self.consumer:
            table = batch.arrow.to_pydict()
            for seq, sub, data in zip(
                table["sequence_number"], table["sub_sequence_number"], table["data"], strict=True
            ):
                key, index = data.decode().split("|")
                self.deliveries.append((key, int(index), batch.shard_id, seq, sub))
            self.consumer.commit(batch)


class Resharder:
    """Splits and merges in a cycle: a midpoint split, a split a third of the way into the
    range, then each split's children merged back (so the open shards stay few)."""

    def __init__(self, client: KinesisClient, stream: str) -> None:
        self.client, self.stream = client, stream
        self.step = 0
        self.pairs: list[tuple[str, str]] = []  # children to merge, oldest first
        self.splits = self.merges = 0

    async def _open(self) -> list[dict[str, Any]]:
        shards = (await self.client.call("ListShards", {"StreamName": self.stream}))["Shards"]
        return sorted(
            (s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]),
            key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]),
        )

    async def next(self) -> None:
        step, self.step = self.step % 4, self.step + 1
        before = {s["ShardId"] for s in await self._open()}
        if step in (0, 1):
            open_ = await self._open()
            shard = open_[0] if step == 0 else open_[-1]
            start = int(shard["HashKeyRange"]["StartingHashKey"])
            end = int(shard["HashKeyRange"]["EndingHashKey"])
            point = (start + end + 1) // 2 if step == 0 else start + (end - start) // 3
            await self.client.call(
                "SplitShard",
                {
                    "StreamName": self.stream,
                    "ShardToSplit": shard["ShardId"],
                    "NewStartingHashKey": str(point),
                },
            )
            self.splits += 1
        else:
            low, high = self.pairs.pop(0)
            await self.client.call(
                "MergeShards",
                {"StreamName": self.stream, "ShardToMerge": low, "AdjacentShardToMerge": high},
            )
            self.merges += 1
        await self.client.wait_for_stream(self.stream)
        if step in (0, 1):
            children = [s["ShardId"] for s in await self._open() if s["ShardId"] not in before]
            assert len(children) == 2, children
            self.pairs.append((children[0], children[1]))


class SparkRuns:
    """The Spark query's runs (continuous): started, killed, started again from the
    checkpoint."""

    def __init__(self, kinesis: LocalKinesis, stream: str, directory: Path) -> None:
        key, secret = kinesis.credentials[:2]
        self.options = {
            "streamName": stream,
            "endpointUrl": kinesis.endpoint_url,
            "awsAccessKeyId": key,
            "awsSecretKey": secret,
            # Fewer, larger micro-batches: a run started again after a kill catches up in
            # minutes on a busy machine, where each micro-batch costs seconds.
            "arrivalWindowPerTrigger": "30s",
        }
        self.output, self.checkpoint = directory / "spark-out", directory / "spark-cp"
        self.log = (directory / "spark.log").open("ab")
        self.process: subprocess.Popen[bytes] | None = None
        self.runs = self.kills = self.deaths = 0
        self.commits_at_start = 0
        self._read: dict[Path, list[Delivery]] = {}  # committed files never change

    def commits(self) -> int:
        commits = self.checkpoint / "commits"
        return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.is_dir() else 0

    def start(self, mode: str = "continuous") -> None:
        self.commits_at_start = self.commits()
        self.process = launch(self.options, self.output, self.checkpoint, mode, self.log)
        self.runs += 1

    def kill(self, counted: bool = True) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
            self.kills += counted
        self.process = None

    def check(self) -> None:
        """A run that ended without our signal died: count it, start it again."""
        if self.process is not None and self.process.poll() is not None:
            self.deaths += 1
            self.start()

    def committed_since_start(self) -> bool:
        return self.commits() > self.commits_at_start

    async def kill_once_committed(self) -> None:
        """Kill the running query once it committed a micro-batch, and start it again."""
        with anyio.fail_after(300):
            while not self.committed_since_start():
                self.check()
                await anyio.sleep(0.5)  # another process's files: there is no event to await
        self.kill()
        self.start()

    async def finish(self, positions: set[tuple[str, str, int]], seconds: float) -> bool:
        """Once the running query committed a row for each of ``positions`` (or ``seconds``
        passed: False), stop it: a row the sink did not commit does not count anyway."""
        caught_up = False
        with anyio.move_on_after(seconds):
            while not positions <= {(d[2], d[3], d[4]) for _, d in self.rows()}:
                self.check()
                await anyio.sleep(1.0)  # another process's files: there is no event to await
            caught_up = True
        self.kill(counted=False)
        return caught_up

    def rows(self) -> list[tuple[int, Delivery]]:
        """Every committed row as (micro-batch, delivery)."""
        out: list[tuple[int, Delivery]] = []
        for path, batch in sorted(committed_files(self.output).items(), key=lambda f: f[1]):
            if path not in self._read:
                table = pq.read_table(path).to_pydict()
                self._read[path] = [
                    (key, int(index), shard, seq, int(sub))
                    for shard, seq, sub, (key, index) in zip(
                        table["shardId"],
                        table["sequenceNumber"],
                        table["subSequenceNumber"],
                        (data.decode().split("|") for data in table["data"]),
                        strict=True,
                    )
                ]
            out.extend((batch, delivery) for delivery in self._read[path])
        return out
