"""``kinesis-actors bench``: the benchmark suite (see ``benchmarks/``).

The suite lives in the ``benchmarks`` package and needs the ``bench`` extra (the peers it
compares against, and matplotlib for its plots); without it the command says so in one line
instead of failing half-way through a run.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

__all__ = ["add_bench_arguments", "run_bench"]

#: Import names of the bench extra's packages (async-kinesis installs ``kinesis``).
BENCH_MODULES = {
    "matplotlib": "matplotlib",
    "aiokpl": "aiokpl",
    "kinesis": "async-kinesis",
    "boto3": "boto3",
    "aws_kinesis_agg": "aws-kinesis-agg",
    "aiobotocore": "aiobotocore",
}
SCENARIOS = (
    "producer_throughput",
    "producer_capacity",
    "consumer_throughput",
    "latency",
    "consumer_memory",
)


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``kinesis-actors bench`` (also ``python -m benchmarks.suite``)."""
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
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="run only this scenario (repeatable; default: all)",
    )


def _missing() -> list[str]:
    missing = []
    for module, distribution in BENCH_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(distribution)
    try:
        found = importlib.util.find_spec("benchmarks.suite") is not None
    except ImportError:
        found = False
    if not found:
        missing.append("the benchmarks package (run from a source checkout)")
    return missing


def run_bench(args: argparse.Namespace) -> int:
    """Run the suite; returns the exit status (2, with one line, if the extra is missing)."""
    missing = _missing()
    if missing:
        print(
            "kinesis-actors: error: bench needs the bench extra "
            f"(missing: {', '.join(missing)}); install it with: "
            "pip install 'kinesis-actors[bench]'",
            file=sys.stderr,
        )
        return 2
    from benchmarks.suite import run_from_args  # noqa: PLC0415 - only with the extra

    return run_from_args(args)
