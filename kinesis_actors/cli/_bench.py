"""``kinesis-actors bench``: the benchmark suite (see ``benchmarks/``)."""

from __future__ import annotations

import argparse

__all__ = ["add_bench_arguments", "run_bench"]


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``kinesis-actors bench``."""
    parser.add_argument("--quick", action="store_true", help="CI-sized runs of every scenario")


def run_bench(args: argparse.Namespace) -> int:
    """Run the suite; returns the exit status."""
    raise NotImplementedError("the benchmark suite is not wired yet")
