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
from ._bench import add_bench_arguments, run_bench
from ._consumers import run_consumers
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

    consumers = commands.add_parser(
        "consumers",
        help="list or deregister a stream's Enhanced Fan-Out consumers",
        description="Registered consumers cost money and use one of a stream's 20 slots; "
        "a killed job can leave one behind. List them (JSON), or deregister one by name.",
    )
    actions = consumers.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="print the stream's consumers as JSON")
    listing.add_argument("--stream", required=True, help="the stream")
    _connection_flags(listing)
    removal = actions.add_parser("deregister", help="deregister one consumer and wait")
    removal.add_argument("--stream", required=True, help="the stream")
    removal.add_argument("--name", required=True, help="the consumer's name")
    _connection_flags(removal)

    bench = commands.add_parser(
        "bench",
        help="run the benchmark suite against a loopback load target, peers side by side",
    )
    add_bench_arguments(bench)
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
        if args.command == "bench":
            return run_bench(args)
        if args.command == "consumers":
            return anyio.run(
                partial(
                    run_consumers,
                    args.action,
                    stream=args.stream,
                    name=getattr(args, "name", None),
                    client_options=_client_options(args),
                )
            )
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
