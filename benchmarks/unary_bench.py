"""CPU per unary call at 1 to 1,024 callers at once: this project's client beside boto3.

    .venv/bin/python benchmarks/unary_bench.py [--quick] [--json] [--concurrency 1,16,256,1024]

Every row runs ``calls`` GetRecords calls (an empty shard, one iterator reused: the reply is
small, so what is measured is the call's machinery, not the records) against the loopback
load target in a process of its own (plain HTTP/1.1, no limits), from ``concurrency``
callers at once: tasks sharing one :class:`~kinesis_actors.KinesisClient` for this
project, threads sharing one boto3 client for boto3 (its pool sized to the threads, its
natural setting; with fewer connections urllib3 opens and drops extra ones). The figure is
this process's CPU time (``time.process_time``) over the calls, per call, after a warm-up
of one call per caller; the target's CPU is apart. A polling consumer of N shards is up to
N callers waiting at once, which is why the high rows matter.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import anyio

from benchmarks._common import fixed as _f
from benchmarks._common import load as _load
from benchmarks._common import machine
from benchmarks._common import text as _s
from benchmarks._common import text_table as _table
from benchmarks.loadtarget import LoadTarget

__all__ = ["CONCURRENCY", "main", "measure", "report", "run"]

CONCURRENCY = (1, 16, 256, 1024)
SHARD = "shardId-000000000000"


def calls_for(concurrency: int, quick: bool, smoke: bool = False) -> int:
    """How many calls a row makes: enough to dwarf the clock's grain, a few per caller."""
    if smoke:
        return max(2 * concurrency, 20)
    floor = 600 if quick else 3000
    return max(floor, (4 if quick else 8) * concurrency)


def _split(calls: int, callers: int) -> list[int]:
    """``calls`` shared among ``callers`` as evenly as can be (the first get the rest)."""
    base, rest = divmod(calls, callers)
    return [base + (index < rest) for index in range(callers)]


@contextmanager
def _cpu(row: dict[str, Any], target: LoadTarget, calls: int) -> Iterator[None]:
    """Fill ``row`` with the wall, CPU and target CPU spent inside the block, per call."""
    wall, cpu, target_cpu = time.perf_counter(), time.process_time(), target.cpu_seconds()
    yield
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    target_cpu = target.cpu_seconds() - target_cpu
    row |= {
        "calls": calls,
        "seconds": wall,
        "calls_per_s": calls / wall,
        "cpu_us_per_call": cpu / calls * 1e6,
        "target_cpu_us_per_call": target_cpu / calls * 1e6,
        "cpu_share": cpu / wall,
    }


def measure_ours(target: LoadTarget, concurrency: int, calls: int) -> dict[str, Any]:
    """This project's client: ``concurrency`` tasks, one client."""

    async def run() -> dict[str, Any]:
        row: dict[str, Any] = {"peer": "kinesis-actors", "concurrency": concurrency}
        async with target.client() as client:
            started = await client.call(
                "GetShardIterator",
                {"StreamName": target.stream_name, "ShardId": SHARD, "ShardIteratorType": "LATEST"},
            )
            params = {"ShardIterator": started["ShardIterator"]}

            async def caller(count: int) -> None:
                for _ in range(count):
                    await client.call("GetRecords", params)

            async with anyio.create_task_group() as tg:  # warm-up: every connection opened
                for _ in range(concurrency):
                    tg.start_soon(caller, 1)
            with _cpu(row, target, calls):
                async with anyio.create_task_group() as tg:
                    for count in _split(calls, concurrency):
                        tg.start_soon(caller, count)
        return row

    return anyio.run(run)


def measure_boto3(target: LoadTarget, concurrency: int, calls: int) -> dict[str, Any]:
    """boto3: ``concurrency`` threads, one client whose pool has as many connections."""
    import boto3  # noqa: PLC0415 - optional peer
    from botocore.config import Config  # noqa: PLC0415

    from benchmarks.peers import CREDENTIALS, REGION  # noqa: PLC0415

    client = boto3.client(
        "kinesis",
        region_name=REGION,
        endpoint_url=target.endpoint_url,
        aws_access_key_id=CREDENTIALS[0],
        aws_secret_access_key=CREDENTIALS[1],
        config=Config(max_pool_connections=concurrency, retries={"mode": "standard"}),
    )
    iterator = client.get_shard_iterator(
        StreamName=target.stream_name, ShardId=SHARD, ShardIteratorType="LATEST"
    )["ShardIterator"]

    def caller(count: int) -> None:
        for _ in range(count):
            client.get_records(ShardIterator=iterator)

    row: dict[str, Any] = {"peer": "boto3", "concurrency": concurrency}
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(caller, [1] * concurrency))  # warm-up: threads and connections
        with _cpu(row, target, calls):
            list(pool.map(caller, _split(calls, concurrency)))
    client.close()
    return row


PEERS: dict[str, Callable[[LoadTarget, int, int], dict[str, Any]]] = {
    "kinesis-actors": measure_ours,
    "boto3": measure_boto3,
}


def measure(peer: str, target: LoadTarget, concurrency: int, calls: int) -> dict[str, Any]:
    """One row: ``peer``'s CPU per call at ``concurrency`` callers."""
    load = _load()
    row = PEERS[peer](target, concurrency, calls)
    row["loadavg_before"] = load
    return row


def run(
    quick: bool = False,
    smoke: bool = False,
    concurrency: tuple[int, ...] = CONCURRENCY,
    peers: tuple[str, ...] = tuple(PEERS),
) -> dict[str, Any]:
    """Every peer at every concurrency, interleaved so a busy machine slows them alike."""
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": machine(), "loadavg_start": _load(), "rows": []}
    with LoadTarget(shards=1, tls=False) as target:
        for level in concurrency:
            for peer in peers:
                calls = calls_for(level, quick, smoke)
                results["rows"].append(measure(peer, target, level, calls))
    results["loadavg_end"] = _load()
    results["seconds"] = time.perf_counter() - started
    return results


def report(results: dict[str, Any]) -> str:
    head = (
        f"CPU per GetRecords call (empty shard, loopback target, HTTP/1.1); load average "
        f"{results['loadavg_start']} at start, {results['loadavg_end']} at end; "
        f"{results['seconds']:.0f} s in all"
    )
    return "\n".join(
        [
            head,
            _table(
                results["rows"],
                [
                    ("peer", "peer", _s),
                    ("callers", "concurrency", _f(0)),
                    ("calls", "calls", _f(0)),
                    ("calls/s", "calls_per_s", _f(0)),
                    ("CPU us/call", "cpu_us_per_call", _f(0)),
                    ("target us/call", "target_cpu_us_per_call", _f(0)),
                    ("CPU share", "cpu_share", _f(2)),
                ],
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer calls a row")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--concurrency",
        default=",".join(map(str, CONCURRENCY)),
        help="callers at once, comma-separated (default %(default)s)",
    )
    parser.add_argument(
        "--peer", action="append", choices=tuple(PEERS), help="only this peer (repeatable)"
    )
    args = parser.parse_args(argv)
    levels = tuple(int(part) for part in args.concurrency.split(","))
    results = run(args.quick, concurrency=levels, peers=tuple(args.peer or PEERS))
    print(json.dumps(results, indent=2, default=str) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
