"""What a consumer group costs in DynamoDB, and how fast it fails over, against the KCL.

    .venv/bin/python benchmarks/lease_bench.py [--leases 100] [--workers 1,3] [--seconds 30]
        [--failover-shards 12] [--failover-workers 3] [--failover-runs 3] [--no-failover]
        [--checkpoint-every S] [--json]

Runs real lease coordinators (``kinesis_actors.leases.LeaseCoordinator``, default
``LeaseConfig``: failover 10 s, renewals every failover/3, take rounds every failover/6) in
this process against a local Kinesis (the stream's shards) and a local DynamoDB (the table).

**Cost.** A stream of ``--leases`` shards is shared by each worker count of ``--workers``.
Once every lease is held and the shares are even (or a minute and a half has passed: the
report says which), every DynamoDB request the workers make is counted, per operation, for
``--seconds``. The figure is requests per second, set against what the KCL 2.x and the KCL
3.x make with their defaults for the same leases and workers (:mod:`benchmarks.kcl_model`,
models computed from their source's intervals, not runs of the KCL): the ratios say how
much more (or less) the table is asked for. With ``--checkpoint-every S`` every worker
notes a new checkpoint of each lease it holds every S seconds, as an application committing
its progress does: here they ride on the renewals (``note_checkpoint``), in the KCL each is
an UpdateItem, which both models then count.

**Failover.** ``--failover-workers`` workers share ``--failover-shards`` shards evenly; one
is stopped without a word, as a SIGKILL would (its coordinator is cancelled: no release, no
more renewals). The figure is the time from that moment until every lease it held is held
by a survivor, set against the bound this library states (failover time + one renewal
interval) and the KCL 2.x's window with its defaults (``kcl_failover_window``). The death
falls anywhere in the victim's renewal cycle, so it is repeated (``--failover-runs``), each
run on a fresh stream and table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from benchmarks.kcl_model import kcl2_calls_per_s, kcl3_calls_per_s, kcl_failover_window
from kinesis_actors import LocalDynamoDB, LocalKinesis
from kinesis_actors.client import DynamoDBClient
from kinesis_actors.leases import (
    LeaseAcquired,
    LeaseConfig,
    LeaseCoordinator,
    LeaseHandoff,
    LeaseLostError,
)
from kinesis_actors.runtime import unwrap_sole

__all__ = ["main", "run"]

#: How many workers list the lease table every take round (the lease package's watchers,
#: docs/leases.md "Who lists the table"); the others list it once a failover time.
WATCHERS = 2
#: How long the shares may take to even out before the cost is measured anyway.
_BALANCE_TIMEOUT = 90.0
#: The local server's account limit on open shards: the cost and failover streams of a run
#: are all open at once.
_SHARD_LIMIT = 10_000
#: How long a failover may take before it is reported as not done.
_FAILOVER_TIMEOUT = 120.0


def _item_size(item: Mapping[str, Any]) -> int:
    """An item's size as DynamoDB bills it, near enough: each attribute's name plus its value
    (strings and numbers by their text, sets by their members)."""
    size = 0
    for name, typed in item.items():
        size += len(name)
        for value in typed.values():
            members = value if isinstance(value, list) else [value]
            size += sum(len(str(member)) for member in members)
    return size


def _read_units(operation: str, params: Mapping[str, Any], reply: Mapping[str, Any]) -> float:
    """Read capacity units of one reply, by DynamoDB's rule: a Scan or Query page is billed on
    the items it read, rounded up to 4 KB (half for an eventually consistent read); a GetItem
    on its item, rounded up the same way."""
    items = reply.get("Items")
    if items is None:
        item = reply.get("Item")
        if operation != "GetItem" or item is None:
            return 0.0
        items = [item]
    size = sum(_item_size(item) for item in items)
    units = float(max(1, -(-size // 4096)))
    return units if params.get("ConsistentRead") else units / 2


class _Counting:
    """A DynamoDB caller that counts every request it forwards, per operation, and the items,
    bytes and read units its replies carry."""

    def __init__(self, client: DynamoDBClient, calls: Counter[str], reads: Counter[str]) -> None:
        self._client = client
        self._calls = calls
        self._reads = reads

    async def call(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        self._calls[operation] += 1
        reply = await self._client.call(operation, params)
        items = reply.get("Items")
        if items is None and reply.get("Item") is not None:
            items = [reply["Item"]]
        if items is not None:
            self._reads["items"] += len(items)
            self._reads["bytes"] += sum(_item_size(item) for item in items)
            # In hundredths, to keep a Counter of ints (an eventually consistent page is 0.5).
            self._reads["read_units_x100"] += round(100 * _read_units(operation, params, reply))
        return reply


@dataclass
class _Worker:
    """One worker of the group, owned by its task; the benchmark only reads it."""

    worker_id: str
    calls: Counter[str] = field(default_factory=Counter)
    #: items, bytes and read units of the replies (see _Counting).
    reads: Counter[str] = field(default_factory=Counter)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    #: shard id -> when this worker last acquired it (removed when lost).
    acquired: dict[str, float] = field(default_factory=dict)
    failure: BaseException | None = None
    #: checkpoints noted (``--checkpoint-every``).
    checkpoints: int = 0


@dataclass(frozen=True)
class _Group:
    kinesis: LocalKinesis
    dynamodb: LocalDynamoDB
    stream: str
    table: str
    config: LeaseConfig
    #: Seconds between two checkpoints of each held lease (None: no checkpoints).
    checkpoint_every: float | None = None


async def _checkpoint_held(
    worker: _Worker, coordinator: LeaseCoordinator, stream: str, every: float
) -> None:
    """Note a new checkpoint of every lease the worker holds each ``every`` seconds, as an
    application committing its progress does (``note_checkpoint``: the consumer's commit)."""
    sequence = 49_590_000_000_000_000_000_000_000_000_000_000_000_000_000_000
    while True:
        await anyio.sleep(every)
        sequence += 1
        for shard_id in list(worker.acquired):
            with contextlib.suppress(LeaseLostError):
                coordinator.note_checkpoint(stream, shard_id, str(sequence))
                worker.checkpoints += 1


async def _follow(worker: _Worker, coordinator: LeaseCoordinator) -> None:
    """Keep the worker's held leases as the coordinator's events say, until cancelled."""
    async for event in coordinator:
        if isinstance(event, LeaseAcquired):
            worker.acquired[event.shard_id] = anyio.current_time()
        elif isinstance(event, LeaseHandoff):
            # A reader with nothing in flight hands over at once.
            worker.acquired.pop(event.shard_id, None)
            with contextlib.suppress(LeaseLostError):
                await coordinator.hand_over(event.stream, event.shard_id)
        else:
            worker.acquired.pop(event.shard_id, None)


async def _run_worker(worker: _Worker, group: _Group) -> None:
    with worker.scope:
        try:
            async with (
                group.dynamodb.client() as ddb,
                group.kinesis.client(tls=False) as kinesis,
                LeaseCoordinator(
                    _Counting(ddb, worker.calls, worker.reads),
                    kinesis,
                    group.table,
                    group.stream,
                    worker_id=worker.worker_id,
                    config=group.config,
                ) as coordinator,
            ):
                every = group.checkpoint_every
                if every is None:
                    await _follow(worker, coordinator)
                    return
                # A failure leaves as itself, not in a group of one.
                with unwrap_sole():
                    async with anyio.create_task_group() as checkpointing:
                        checkpointing.start_soon(
                            _checkpoint_held, worker, coordinator, group.stream, every
                        )
                        await _follow(worker, coordinator)
                        checkpointing.cancel_scope.cancel()
        except Exception as error:  # reported, not raised: the other workers go on
            worker.failure = error


async def _until(condition: Callable[[], bool], limit: float) -> float | None:
    """Seconds until ``condition`` held (polled every 50 ms), or None after ``limit`` s."""
    start = anyio.current_time()
    while not condition():
        if anyio.current_time() - start > limit:
            return None
        await anyio.sleep(0.05)
    return anyio.current_time() - start


def _even(workers: Sequence[_Worker], leases: int) -> bool:
    held = [len(worker.acquired) for worker in workers]
    return sum(held) == leases and max(held) - min(held) <= 1


def _failures(workers: Sequence[_Worker]) -> list[str]:
    return [f"{w.worker_id}: {w.failure!r}" for w in workers if w.failure is not None]


async def _new_group(
    kinesis: LocalKinesis,
    dynamodb: LocalDynamoDB,
    shards: int,
    config: LeaseConfig,
    checkpoint_every: float | None = None,
) -> _Group:
    """A fresh stream of ``shards`` shards, and a table name no run used."""
    suffix = uuid.uuid4().hex[:8]
    group = _Group(
        kinesis, dynamodb, f"stream-{suffix}", f"leases-{suffix}", config, checkpoint_every
    )
    async with kinesis.client(tls=False) as client:
        with anyio.fail_after(120):
            await client.create_stream(group.stream, shards)
    return group


async def measure_cost(
    kinesis: LocalKinesis,
    dynamodb: LocalDynamoDB,
    *,
    leases: int,
    workers: int,
    seconds: float,
    config: LeaseConfig,
    checkpoint_every: float | None = None,
) -> dict[str, Any]:
    """DynamoDB requests per second of ``workers`` sharing ``leases`` shards (see the module),
    each lease checkpointed every ``checkpoint_every`` seconds if given."""
    group = await _new_group(kinesis, dynamodb, leases, config, checkpoint_every)
    crew = [_Worker(f"worker-{index}") for index in range(workers)]
    async with anyio.create_task_group() as tasks:
        for worker in crew:
            tasks.start_soon(_run_worker, worker, group)
        balanced = await _until(
            lambda: _even(crew, leases) or bool(_failures(crew)), _BALANCE_TIMEOUT
        )
        before = sum((worker.calls for worker in crew), Counter[str]())
        reads_before = [Counter(worker.reads) for worker in crew]
        checkpoints_before = sum(worker.checkpoints for worker in crew)
        start = time.monotonic()
        await anyio.sleep(seconds)
        elapsed = time.monotonic() - start
        after = sum((worker.calls for worker in crew), Counter[str]())
        reads = [worker.reads - old for worker, old in zip(crew, reads_before, strict=True)]
        held = [len(worker.acquired) for worker in crew]
        checkpoints = sum(worker.checkpoints for worker in crew) - checkpoints_before
        tasks.cancel_scope.cancel()
    calls = after - before
    total = sum(calls.values())
    kcl = kcl2_calls_per_s(leases, workers, config.failover_time, checkpoint_every)
    kcl3 = kcl3_calls_per_s(leases, workers, config.failover_time, checkpoint_every)
    ours = total / elapsed
    return {
        "leases": leases,
        "workers": workers,
        "seconds": round(elapsed, 2),
        "even_after_s": None if balanced is None else round(balanced, 2),
        "held": held,
        "calls": dict(sorted(calls.items())),
        "calls_per_s": round(ours, 2),
        "per_operation_per_s": {op: round(n / elapsed, 2) for op, n in sorted(calls.items())},
        "checkpoint_every_s": checkpoint_every,
        # Checkpoints noted a second: they ride on renewals, so none is a request of its own.
        "checkpoints_noted_per_s": round(checkpoints / elapsed, 2),
        # Renewals, plus a listing every other round by each of the two watchers and one a failover
        # time by every other worker (one Scan page each at these sizes).
        "expected_calls_per_s": round(
            leases / config.renew_period
            + min(workers, WATCHERS) / (2 * config.take_period)
            + max(0, workers - WATCHERS) / config.failover_time,
            2,
        ),
        "kcl": {key: round(value, 2) for key, value in kcl.items()},
        "kcl3": {key: round(value, 3) for key, value in kcl3.items()},
        # Per worker: items and kilobytes read a second, and read units a second (modelled
        # from the replies' sizes, see _read_units).
        "items_read_per_s": [round(r["items"] / elapsed, 1) for r in reads],
        "kb_read_per_s": [round(r["bytes"] / 1000 / elapsed, 1) for r in reads],
        "read_units_per_s": [round(r["read_units_x100"] / 100 / elapsed, 2) for r in reads],
        "ratio_to_kcl": round(ours / kcl["calls_per_s"], 3),
        "ratio_to_kcl3": round(ours / kcl3["calls_per_s"], 3),
        "failures": _failures(crew),
    }


async def measure_failover(
    kinesis: LocalKinesis,
    dynamodb: LocalDynamoDB,
    *,
    shards: int,
    workers: int,
    config: LeaseConfig,
) -> dict[str, Any]:
    """Seconds from one worker's silent death until survivors hold all its leases."""
    group = await _new_group(kinesis, dynamodb, shards, config)
    crew = [_Worker(f"worker-{index}") for index in range(workers)]
    async with anyio.create_task_group() as tasks:
        started = anyio.current_time()
        for worker in crew:
            tasks.start_soon(_run_worker, worker, group)
        even = await _until(lambda: _even(crew, shards) or bool(_failures(crew)), _BALANCE_TIMEOUT)
        dead, survivors = crew[0], crew[1:]
        orphans = set(dead.acquired)
        # The death falls at whatever point of the victim's renewal cycle it is, as a real
        # one does: the failover time varies by up to one renewal interval from run to run.
        killed = anyio.current_time()
        dead.scope.cancel()

        def taken() -> bool:
            return all(
                any(worker.acquired.get(shard, -1.0) >= killed for worker in survivors)
                for shard in orphans
            )

        done = await _until(lambda: taken() or bool(_failures(survivors)), _FAILOVER_TIMEOUT)
        takes = sorted(
            worker.acquired[shard] - killed
            for worker in survivors
            for shard in orphans
            if worker.acquired.get(shard, -1.0) >= killed
        )
        tasks.cancel_scope.cancel()
    low, high = kcl_failover_window(config.failover_time)
    bound = config.failover_time + 2 * config.take_period
    return {
        "shards": shards,
        "workers": workers,
        "even_after_s": None if even is None else round(even, 2),
        "startup_s": round(killed - started, 2),
        "orphaned_leases": len(orphans),
        "failover_s": None if done is None or not takes else round(takes[-1], 2),
        "first_take_s": round(takes[0], 2) if takes else None,
        "bound_s": round(bound, 2),
        "within_bound": done is not None and bool(takes) and takes[-1] <= bound,
        "kcl_window_s": [round(low, 2), round(high, 2)],
        "failures": _failures(survivors),
    }


async def _run(
    leases: int,
    worker_counts: Sequence[int],
    seconds: float,
    failover_runs: int,
    failover_shards: int,
    failover_workers: int,
    config: LeaseConfig,
    checkpoint_every: float | None,
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "config": {
            "failover_time": config.failover_time,
            "renew_interval": round(config.renew_period, 3),
            "take_interval": round(config.take_period, 3),
            "checkpoint_every": checkpoint_every,
        },
        "cost": [],
        "failover": [],
    }
    async with (
        LocalKinesis(operation_duration=0.0, shard_limit=_SHARD_LIMIT) as kinesis,
        LocalDynamoDB() as dynamodb,
    ):
        for workers in worker_counts:
            results["cost"].append(
                await measure_cost(
                    kinesis,
                    dynamodb,
                    leases=leases,
                    workers=workers,
                    seconds=seconds,
                    config=config,
                    checkpoint_every=checkpoint_every,
                )
            )
        for _ in range(failover_runs):
            results["failover"].append(
                await measure_failover(
                    kinesis,
                    dynamodb,
                    shards=failover_shards,
                    workers=failover_workers,
                    config=config,
                )
            )
    return results


def run(
    *,
    leases: int = 100,
    workers: Sequence[int] = (1, 3),
    seconds: float = 30.0,
    failover_runs: int = 3,
    failover_shards: int = 12,
    failover_workers: int = 3,
    config: LeaseConfig | None = None,
    checkpoint_every: float | None = None,
) -> dict[str, Any]:
    """Both benchmarks: ``cost``, a :func:`measure_cost` row per worker count (each lease
    checkpointed every ``checkpoint_every`` seconds, if given, in ours and in the KCL
    models), and ``failover``, ``failover_runs`` rows of :func:`measure_failover`."""
    return anyio.run(
        _run,
        leases,
        list(workers),
        seconds,
        failover_runs,
        failover_shards,
        failover_workers,
        config or LeaseConfig(),
        checkpoint_every,
    )


def render(results: Mapping[str, Any]) -> str:
    """The report as text."""
    config = results["config"]
    every = config.get("checkpoint_every")
    checkpoints = (
        "no checkpoints"
        if every is None
        else f"each lease checkpointed every {every:g} s (ours: on its renewals; the KCL: an "
        "UpdateItem each)"
    )
    lines = [
        f"lease protocol: failover {config['failover_time']:g} s, renew every "
        f"{config['renew_interval']:g} s, take round every {config['take_interval']:g} s",
        "",
        "DynamoDB requests per second (steady state; the KCL 2.x and 3.x models at the same "
        f"failover time; {checkpoints}):",
        f"{'leases':>6} {'workers':>7} {'ours/s':>8} {'expected':>8} {'KCL2/s':>7} {'ratio':>6} "
        f"{'KCL3/s':>7} {'ratio':>6}  per operation/s; held",
    ]
    for row in results["cost"]:
        ops = ", ".join(f"{op} {rate:g}" for op, rate in row["per_operation_per_s"].items())
        even = "" if row["even_after_s"] is not None else " (shares not even)"
        lines.append(
            f"{row['leases']:>6} {row['workers']:>7} {row['calls_per_s']:>8.2f} "
            f"{row['expected_calls_per_s']:>8.2f} {row['kcl']['calls_per_s']:>7.2f} "
            f"{row['ratio_to_kcl']:>6.3f} {row['kcl3']['calls_per_s']:>7.2f} "
            f"{row['ratio_to_kcl3']:>6.3f}  {ops}; {row['held']}{even}"
            + (f"; checkpoints noted/s {row['checkpoints_noted_per_s']:g}" if every else "")
        )
        lines.append(
            f"  read per worker: items/s {row['items_read_per_s']}, kB/s {row['kb_read_per_s']}, "
            f"read units/s {row['read_units_per_s']}"
        )
        lines.extend(f"  failed: {failure}" for failure in row["failures"])
    runs = results["failover"]
    if not runs:
        lines += ["", "failover: not measured"]
    else:
        first = runs[0]
        low, high = first["kcl_window_s"]
        lines += [
            "",
            f"failover: {first['workers']} workers share {first['shards']} shards, one stops "
            f"silently; bound failover + renewal interval = {first['bound_s']:g} s; the KCL 2.x "
            f"takes {low:g}-{high:g} s at the same failover time",
        ]
        for fo in runs:
            took = "not done" if fo["failover_s"] is None else f"{fo['failover_s']:.2f} s"
            lines.append(
                f"  {fo['orphaned_leases']} leases orphaned: all taken over after {took} "
                f"(first after {fo['first_take_s']} s), "
                f"{'within' if fo['within_bound'] else 'NOT within'} the bound"
            )
            lines.extend(f"  failed: {failure}" for failure in fo["failures"])
    return "\n".join(lines)


def _counts(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive whole numbers like 1,3, got {text!r}")
    return values


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=100)
    parser.add_argument("--workers", type=_counts, default=[1, 3])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--failover-shards", type=int, default=12)
    parser.add_argument("--failover-workers", type=int, default=3)
    parser.add_argument("--failover-runs", type=int, default=3)
    parser.add_argument("--no-failover", action="store_true")
    parser.add_argument(
        "--checkpoint-every",
        type=_seconds,
        default=None,
        help="checkpoint each held lease every S seconds (the KCL models: one UpdateItem each)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.failover_workers < 2:
        parser.error("--failover-workers must be at least 2: one dies, one takes over")
    results = run(
        leases=args.leases,
        workers=args.workers,
        seconds=args.seconds,
        failover_runs=0 if args.no_failover else args.failover_runs,
        failover_shards=args.failover_shards,
        failover_workers=args.failover_workers,
        checkpoint_every=args.checkpoint_every,
    )
    print(json.dumps(results, indent=2) if args.json else render(results))
    failed = any(row["failures"] for row in (*results["cost"], *results["failover"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
