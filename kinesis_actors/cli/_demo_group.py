"""The demo's consumer-group stage: three worker processes share a stream through a lease table
in the embedded local DynamoDB, one is killed, the others take its shards over.

Each worker is ``python -m kinesis_actors.cli._demo_worker WORKER SETTINGS``, printing one
JSON line per event (``_demo_worker``). The stage reads those lines, SIGKILLs one worker once
the shares are even, measures how long its shards stay unread, then stops the others cleanly
and checks that every record was delivered (at least once: records a worker processed after
its last checkpoint are delivered again when it crashes or loses a lease, and are counted).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from ..client import KinesisClient
from ..local import LocalDynamoDB

__all__ = ["GROUP_STEPS", "GroupFigures", "run_group"]

#: What the stage says as it goes, in order: one progress step each.
GROUP_STEPS = (
    "workers started",
    "shares even",
    "one SIGKILLed",
    "its shards taken over",
    "every record delivered",
    "workers stopped",
)

_WORKERS = ("worker-1", "worker-2", "worker-3")
_WORKER = "kinesis_actors.cli._demo_worker"
#: The protocol's timings here: a failover visible in a few seconds.
_FAILOVER = 3.0
_RENEW = 0.75
_KEYS = 24


@dataclass
class GroupFigures:
    """What the stage saw: shares, the failover, deliveries."""

    shards: int = 0
    even_seconds: float = 0.0
    shares: dict[str, list[str]] = field(default_factory=dict)
    killed: str = ""
    failover_time: float = _FAILOVER
    takeover_seconds: float = 0.0
    shares_after: dict[str, list[str]] = field(default_factory=dict)
    written: int = 0
    delivered: int = 0
    duplicates: int = 0
    missing: int = 0

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.delivered >= self.written > 0


class _Board:
    """Wakes the stage whenever a worker said something."""

    def __init__(self) -> None:
        self._changed = anyio.Event()

    def poke(self) -> None:
        self._changed.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            changed = self._changed = anyio.Event()
            await changed.wait()


class _Worker:
    """One worker process and what its standard output said."""

    def __init__(self, name: str, process: Process, board: _Board) -> None:
        self.name = name
        self.process = process
        self.board = board
        self.holding: set[str] = set()
        self.started: dict[str, float] = {}
        self.data: list[str] = []

    async def follow(self) -> None:
        assert self.process.stdout is not None
        lines = BufferedByteReceiveStream(self.process.stdout)
        while True:
            try:
                line = await lines.receive_until(b"\n", 1 << 24)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                return
            event = json.loads(line)
            if event["ev"] == "start":
                self.holding.add(event["shard"])
                self.started[event["shard"]] = time.monotonic()
            elif event["ev"] in ("stop", "finish", "release"):
                self.holding.discard(event["shard"])
            elif event["ev"] == "batch":
                self.data.extend(event["data"])
            self.board.poke()


def _quiet(step: str) -> None:
    """The default ``on_step``: say nothing."""


async def run_group(
    client: KinesisClient,
    kinesis_endpoint: str,
    credentials: Any,
    shards: int,
    log: Path,
    *,
    on_step: Callable[[str], None] = _quiet,
) -> GroupFigures:
    """The stage, against the embedded local Kinesis at ``kinesis_endpoint``; the workers'
    own warnings (a lease stolen while the shares even out, for instance) go to ``log``.
    ``on_step`` is called with each of :data:`GROUP_STEPS` as it is done."""
    figures = GroupFigures(shards=shards)
    stream = f"demo-group-{uuid.uuid4().hex[:6]}"
    await client.create_stream(stream, shards)
    keys = [f"key-{k}" for k in range(_KEYS)]
    written: list[str] = []
    writing = anyio.Event()

    async def write() -> None:
        round_ = 0
        while not writing.is_set():
            records = [{"Data": f"{k}:{round_}".encode(), "PartitionKey": k} for k in keys]
            await client.call("PutRecords", {"StreamName": stream, "Records": records})
            written.extend(f"{k}:{round_}" for k in keys)
            round_ += 1
            with anyio.move_on_after(0.1):
                await writing.wait()

    await anyio.Path(log.parent).mkdir(parents=True, exist_ok=True)
    with log.open("ab") as errors:
        async with LocalDynamoDB() as dynamodb, anyio.create_task_group() as tg:
            settings = {
                "kinesis": kinesis_endpoint,
                "dynamodb": dynamodb.endpoint_url,
                "credentials": list(credentials),
                "stream": stream,
                "table": f"demo-{uuid.uuid4().hex[:6]}",
                "leases": {"failover_time": _FAILOVER, "renew_interval": _RENEW},
            }
            board = _Board()
            workers: dict[str, _Worker] = {}
            started: list[_Worker] = []
            try:
                tg.start_soon(write)
                launched = time.monotonic()
                for name in _WORKERS:
                    process = await anyio.open_process(
                        [sys.executable, "-m", _WORKER, name, json.dumps(settings)], stderr=errors
                    )
                    workers[name] = _Worker(name, process, board)
                    started.append(workers[name])
                    tg.start_soon(workers[name].follow)
                on_step(GROUP_STEPS[0])
                share = shards // len(_WORKERS)
                with anyio.fail_after(60):
                    await board.until(lambda: all(len(w.holding) == share for w in started))
                figures.even_seconds = time.monotonic() - launched
                figures.shares = {name: sorted(w.holding) for name, w in workers.items()}
                on_step(GROUP_STEPS[1])
                await anyio.sleep(2 * _RENEW)  # checkpoints ride on renewals
                victim = workers.pop(_WORKERS[-1])
                figures.killed = victim.name
                orphans = set(victim.holding)
                victim.process.kill()  # SIGKILL: no checkpoint, no release
                killed_at = time.monotonic()
                on_step(GROUP_STEPS[2])
                with anyio.fail_after(60):
                    await board.until(
                        lambda: orphans <= set().union(*(w.holding for w in workers.values()))
                    )
                taken = [w.started[s] for w in workers.values() for s in orphans if s in w.started]
                figures.takeover_seconds = max(taken) - killed_at
                figures.shares_after = {name: sorted(w.holding) for name, w in workers.items()}
                on_step(GROUP_STEPS[3])
                writing.set()
                with anyio.fail_after(60):
                    await board.until(
                        lambda: set(written) <= set().union(*(w.data for w in started))
                    )
                on_step(GROUP_STEPS[4])
                for worker in workers.values():
                    worker.process.terminate()  # SIGTERM: checkpoint, then release
                with anyio.fail_after(30):
                    for worker in workers.values():
                        await worker.process.wait()
                on_step(GROUP_STEPS[5])
            finally:
                with anyio.CancelScope(shield=True):
                    for worker in started:
                        if worker.process.returncode is None:
                            worker.process.kill()  # no orphan process, whatever failed
                            await worker.process.wait()
                tg.cancel_scope.cancel()
    delivered: Counter[str] = Counter()
    for worker in started:
        delivered.update(worker.data)
    figures.written = len(written)
    figures.delivered = sum(delivered.values())
    figures.duplicates = sum(count - 1 for count in delivered.values())
    figures.missing = len(set(written) - set(delivered))
    await client.call("DeleteStream", {"StreamName": stream})
    return figures
