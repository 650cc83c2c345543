"""Argument parsing and dispatch for ``kinesis-actors``.

User errors (bad flags, a missing server, an unknown stream) print one line saying what to do
and exit with status 2; only bugs print a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial

import anyio

from .. import errors
from ._demo import run_demo
from ._local import run_local
from ._put import run_put

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

    put = commands.add_parser(
        "put",
        help="produce standard input's lines to a stream, one record per line",
        description="Reads lines from standard input and produces each non-empty line as one "
        "record (bounded queue, KPL aggregation, retries); prints a JSON summary.",
    )
    put.add_argument("--stream", required=True, help="the stream to write to")
    put.add_argument(
        "--key", help="partition key for every line (default: the line number, spreading lines)"
    )
    put.add_argument(
        "--no-aggregation", action="store_true", help="send one Kinesis record per line"
    )
    _connection_flags(put)
    return parser


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint-url", help="the Kinesis endpoint (default: AWS for --region)")
    parser.add_argument("--region", default="us-east-1", help="AWS region (default us-east-1)")
    parser.add_argument(
        "--no-verify", action="store_true", help="do not verify TLS certificates (local servers)"
    )


def _client_options(args: argparse.Namespace) -> dict[str, object]:
    return {
        "region": args.region,
        "endpoint_url": args.endpoint_url,
        "verify": not args.no_verify,
    }


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
        if args.command == "put":
            return anyio.run(
                partial(
                    run_put,
                    sys.stdin.buffer,
                    stream=args.stream,
                    key=args.key,
                    client_options=_client_options(args),
                    aggregation=not args.no_aggregation,
                )
            )
    except errors.KinesisError as exc:
        print(f"kinesis-actors: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover
