"""The benchmark suite behind ``kinesis-actors bench``: every scenario, every peer, one run.

Runs the scenarios of :mod:`benchmarks.scenarios` against loopback load targets, each peer
(:mod:`benchmarks.peers`) on the same target as this project, and writes to ``--out``
(default ``benchmarks/results/``): ``results.json`` (every figure), the PNG plots and
``RESULTS.md`` (:mod:`benchmarks.report`). ``--quick`` is CI-sized, the default is the full
run for publishing, ``--smoke`` is for tests (seconds; its figures mean nothing).

It prints a summary (records/s per config and peer, the capacity share, latency, memory);
``--full-report`` prints the whole ``RESULTS.md`` too.

Usage: ``kinesis-actors bench [--quick] [--out DIR] [--full-report]`` or
``python -m benchmarks.suite``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import scenarios
from benchmarks._common import load, machine
from benchmarks.peers import CONSUMERS, PRODUCERS, PROJECT, ConsumerPeer, ProducerPeer
from benchmarks.report import markdown, summary, write_plots

__all__ = ["SCENARIOS", "add_bench_arguments", "main", "run", "run_from_args", "write"]

SCENARIOS = (
    "producer_throughput",
    "producer_capacity",
    "consumer_throughput",
    "latency",
    "consumer_memory",
)

THROUGHPUT = ("producer_throughput", "consumer_throughput")
_DISTRIBUTIONS = {
    PROJECT: "kinesis-actors",
    f"{PROJECT} put_many": "kinesis-actors",
    "aiokpl": "aiokpl",
    "async-kinesis": "async-kinesis",
    "boto3": "boto3",
}


def _version(peer: str) -> str:
    try:
        return importlib.metadata.version(_DISTRIBUTIONS[peer])
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _peers(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each peer per role: ok, or which rows it could not run and why."""
    roles: list[tuple[str, list[ProducerPeer] | list[ConsumerPeer], tuple[str, ...]]] = [
        ("producer", PRODUCERS, ("producer_throughput", "producer_capacity")),
        ("consumer", CONSUMERS, ("consumer_throughput",)),
    ]
    out = []
    for role, peers, names in roles:
        for peer in peers:
            rows = [
                (name, row)
                for name in names
                if name in results["scenarios"]
                for row in results["scenarios"][name]["rows"]
                if row["peer"] == peer.name
            ]
            if not rows:
                continue
            reasons: dict[str, list[str]] = {}
            for name, row in rows:
                if row["status"] != "ok":
                    reason = f"{row['status']}: {row['reason']}".replace("|", "/")
                    reasons.setdefault(reason, []).append(row.get("config") or name)
            problems = [f"{', '.join(where)}: {reason}" for reason, where in reasons.items()]
            ran = sum(row["status"] == "ok" for _, row in rows)
            status = "ok" if not problems else "partial" if ran else "failed"
            detail = "; ".join([peer.note, *problems])
            out.append(
                {
                    "name": peer.name,
                    "role": role,
                    "version": _version(peer.name),
                    "status": status,
                    "rows_ok": ran,
                    "rows_not_run": len(rows) - ran,
                    "detail": detail,
                }
            )
    return out


def _cpu_check(results: dict[str, Any]) -> dict[str, Any]:
    """The load target's CPU must stay below the client's in every throughput row."""
    failures, count = [], 0
    for name in THROUGHPUT:
        for row in results["scenarios"].get(name, {}).get("rows", []):
            if row["status"] != "ok":
                continue
            count += 1
            if not row["target_below_client_cpu"]:
                failures.append(f"{name}/{row['config']}/{row['peer']}")
    return {"passed": not failures, "rows": count, "failures": failures}


def run(
    mode: str = "full",
    only: list[str] | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the scenarios (all, or ``only`` these) at ``mode``'s scale; returns the figures."""
    scale = scenarios.SCALES[mode]
    started = time.perf_counter()
    results: dict[str, Any] = {
        "suite": "kinesis-actors bench",
        "mode": mode,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "loadavg_start": load(),
        "scale": {
            key: getattr(scale, key)
            for key in (
                "small",
                "large",
                "capacity_seconds",
                "consume",
                "stall_seconds",
                "repeats",
            )
        },
        "scenarios": {},
    }
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "producer_throughput": lambda: scenarios.producer_throughput(scale, progress=progress),
        "producer_capacity": lambda: scenarios.producer_capacity(scale, progress=progress),
        "consumer_throughput": lambda: scenarios.consumer_throughput(scale, progress=progress),
        "latency": lambda: scenarios.latency(scale, progress=progress),
        "consumer_memory": lambda: scenarios.consumer_memory(scale, progress=progress),
    }
    for name in SCENARIOS:
        if only and name not in only:
            continue
        began = time.perf_counter()
        results["scenarios"][name] = runners[name]()
        results["scenarios"][name]["scenario_seconds"] = time.perf_counter() - began
    results["peers"] = _peers(results)
    results["checks"] = {"target_cpu_below_client": _cpu_check(results)}
    results["loadavg_end"] = load()
    results["seconds"] = time.perf_counter() - started
    return results


def write(results: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write the plots, ``RESULTS.md`` and ``results.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(results, out)
    results["plots"] = plots
    table = out / "RESULTS.md"
    table.write_text(markdown(results, plots), encoding="utf-8")
    data = out / "results.json"
    data.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return {"json": data, "table": table}


def run_from_args(args: argparse.Namespace) -> int:
    """What ``kinesis-actors bench`` does once the flags are parsed; returns the exit status."""
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"

    def progress(message: str) -> None:
        print(f"bench: {message}", file=sys.stderr, flush=True)

    results = run(mode, args.scenario, progress)
    paths = write(results, Path(args.out))
    if args.full_report:
        print(paths["table"].read_text(encoding="utf-8"))
    print(summary(results))
    print(
        f"wrote {paths['json']}, {paths['table']} (the full report"
        + ("" if args.full_report else ": --full-report prints it")
        + f") and {len(results['plots'])} plots"
    )
    return 0


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's flags (``kinesis-actors bench`` passes its arguments through to them)."""
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="CI-sized runs of every scenario")
    sizes.add_argument(
        "--smoke",
        action="store_true",
        help="tiny runs that only prove the suite works (for tests; figures mean nothing)",
    )
    parser.add_argument(
        "--out",
        default="benchmarks/results",
        help="directory for results.json, RESULTS.md and the plots (default benchmarks/results)",
    )
    parser.add_argument(
        "--full-report",
        action="store_true",
        help="print the whole RESULTS.md (every row, every note, the peers) before the summary",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="run only this scenario (repeatable; default: all)",
    )


def main(argv: list[str] | None = None) -> int:
    """``kinesis-actors bench``, which runs this module from the checkout."""
    parser = argparse.ArgumentParser(
        prog="kinesis-actors bench",
        description="Runs every benchmark scenario with this project and its peers (aiokpl, "
        "async-kinesis, boto3) against loopback load targets, and writes results.json, "
        "RESULTS.md and the plots. Runs from a source checkout (the suite is not part of the "
        "installed package).",
    )
    add_bench_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
