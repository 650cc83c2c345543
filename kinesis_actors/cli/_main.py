"""Argument parsing and dispatch for ``kinesis-actors``.

User errors (bad flags, a missing server, an unknown stream) print one line saying what to do
and exit with status 2; only bugs print a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from .. import errors
from ._demo import run_demo
from ._local import run_local

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kinesis-actors",
        description="An actor runtime for AWS Kinesis Data Streams.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="run the product end to end on an embedded local Kinesis"
    )
    demo.add_argument("--records", type=int, default=2000, help="records to produce")
    demo.add_argument("--shards", type=int, default=4, help="shards of the demo stream")

    commands.add_parser(
        "local", help="run the embedded local Kinesis in the foreground and print its endpoints"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            if args.records <= 0 or args.shards <= 0:
                raise errors.ConfigError("--records and --shards must be positive")
            return anyio.run(run_demo, args.records, args.shards)
        if args.command == "local":
            return run_local()
    except errors.KinesisError as exc:
        print(f"kinesis-actors: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover
