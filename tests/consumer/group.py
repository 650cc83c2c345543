"""Worker processes of a consumer group, a steady writer, and what their logs prove.

Each worker is ``tests/consumer/_group_worker.py`` in its own process, writing JSON lines (its
records and the consumer's own lease events) to its own file. :class:`Group` starts, kills and
stops them and reads the files back; the checks below judge only what the logs say.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from kinesis_actors import KinesisClient, LocalDynamoDB, LocalKinesis
from kinesis_actors.records import ShardMap

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Delivery:
    """One user record as a worker logged it (``n``: its line in that worker's log)."""

    worker: str
    shard: str
    seq: str
    sub: int
    key: str
    data: str
    t: float
    n: int

    @property
    def record(self) -> tuple[str, str, int]:
        return self.shard, self.seq, self.sub

    @property
    def order(self) -> tuple[int, int]:
        return int(self.seq), self.sub


@dataclass
class Group:
    """The worker processes of one test, and their logs."""

    kinesis: LocalKinesis
    dynamodb: LocalDynamoDB
    stream: str
    table: str
    directory: Path
    leases: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    launched: dict[str, float] = field(default_factory=dict)

    def start(self, worker: str) -> None:
        settings = {
            "worker_id": worker,
            "kinesis": self.kinesis.endpoint_url,
            "kinesis_tls": self.kinesis.tls_endpoint_url,
            "dynamodb": self.dynamodb.endpoint_url,
            "credentials": list(self.kinesis.credentials),
            "stream": self.stream,
            "table": self.table,
            "leases": self.leases,
            "log": str(self.log_path(worker)),
            **self.extra,
        }
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.launched[worker] = time.time()
        self.processes[worker] = subprocess.Popen(
            [sys.executable, "-m", "tests.consumer._group_worker", json.dumps(settings)],
            cwd=ROOT,
            env=env,
        )

    def log_path(self, worker: str) -> Path:
        return self.directory / f"{worker}.jsonl"

    def kill(self, worker: str) -> float:
        """SIGKILL: no checkpoint, no release. Returns when it was sent."""
        process = self.processes[worker]
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        return time.time()

    async def terminate(self, worker: str) -> int:
        """SIGTERM: a clean stop (checkpoint, release); returns the exit code (the caller
        bounds the wait)."""
        process = self.processes[worker]
        process.send_signal(signal.SIGTERM)
        while process.poll() is None:
            await anyio.sleep(0.05)
        return process.returncode

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)

    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for worker in self.processes:
            path = self.log_path(worker)
            if not path.exists():
                continue
            for n, line in enumerate(path.read_text().splitlines()):
                if line.endswith("}"):  # a SIGKILL may cut the last line
                    event = json.loads(line)
                    event["n"] = n
                    out.append(event)
        return out

    def deliveries(self) -> list[Delivery]:
        return [
            Delivery(e["w"], e["shard"], e["seq"], e["sub"], e["key"], e["data"], e["t"], e["n"])
            for e in self.events()
            if e["ev"] == "record"
        ]

    def holding(self) -> dict[str, set[str]]:
        """The shards each live worker reads now, from its own start/stop/finish/release."""
        held: dict[str, set[str]] = defaultdict(set)
        for event in sorted(self.events(), key=lambda e: (e["t"], e["n"])):
            worker = event["w"]
            if event["ev"] == "ready":  # a new process under this id: it holds nothing yet
                held[worker].clear()
            elif event["ev"] == "start":
                held[worker].add(event["shard"])
            elif event["ev"] in ("stop", "finish", "release"):
                held[worker].discard(event["shard"])
        return {
            worker: held[worker]
            for worker, process in self.processes.items()
            if process.poll() is None
        }

    async def wait_for(self, predicate: Callable[[], bool]) -> float:
        """Poll the logs until ``predicate()`` holds (the caller bounds the wait); return the
        time it was seen."""
        while not predicate():
            await anyio.sleep(0.1)
        return time.time()


def keys_per_shard(shards: ShardMap, per_shard: int) -> list[str]:
    """Partition keys, ``per_shard`` of them landing on each open shard."""
    chosen: dict[str, list[str]] = defaultdict(list)
    i = 0
    while sum(len(keys) for keys in chosen.values()) < per_shard * len(shards):
        key = f"key-{i}"
        i += 1
        shard = str(shards.shard_for(key))
        if len(chosen[shard]) < per_shard:
            chosen[shard].append(key)
    return [key for keys in chosen.values() for key in keys]


class Writer:
    """Writes rounds of every key, ``data = "key:round"``, until stopped: a steady load."""

    def __init__(self, client: KinesisClient, stream: str, keys: list[str], pause: float) -> None:
        self.client = client
        self.stream = stream
        self.keys = keys
        self.pause = pause
        self.rounds = 0
        self.stopping = anyio.Event()

    async def run(self) -> None:
        while not self.stopping.is_set():
            await self.write_round()
            with anyio.move_on_after(self.pause):
                await self.stopping.wait()

    async def write_round(self) -> None:
        round_ = self.rounds
        records = [{"Data": f"{key}:{round_}".encode(), "PartitionKey": key} for key in self.keys]
        for start in range(0, len(records), 500):
            result = await self.client.call(
                "PutRecords", {"StreamName": self.stream, "Records": records[start : start + 500]}
            )
            assert result["FailedRecordCount"] == 0
        self.rounds += 1

    def written(self) -> set[str]:
        return {f"{key}:{r}" for key in self.keys for r in range(self.rounds)}


def check_order_within_each_reading(events: list[dict[str, Any]]) -> int:
    """Within each reading of a shard by a worker (from one of its ``start`` events to the
    next), sequence numbers rise and each key's rounds rise. Returns the readings checked."""
    last: dict[tuple[str, str], tuple[int, int]] = {}
    rounds: dict[tuple[str, str], dict[str, int]] = {}
    checked = 0
    for event in sorted(events, key=lambda e: (e["w"], e["n"])):
        reading = (event.get("w", ""), event.get("shard", ""))
        if event["ev"] == "start":
            last.pop(reading, None)
            rounds[reading] = {}
            checked += 1
        elif event["ev"] == "record":
            order = (int(event["seq"]), event["sub"])
            previous = last.get(reading)
            assert previous is None or order > previous, event
            last[reading] = order
            key, round_ = event["data"].rsplit(":", 1)
            assert key == event["key"], event
            seen = rounds.setdefault(reading, {})
            assert int(round_) > seen.get(key, -1), event
            seen[key] = int(round_)
    return checked


def first_deliveries(deliveries: list[Delivery]) -> dict[tuple[str, str, int], Delivery]:
    first: dict[tuple[str, str, int], Delivery] = {}
    for delivery in sorted(deliveries, key=lambda d: (d.t, d.worker, d.n)):
        first.setdefault(delivery.record, delivery)
    return first
