"""Argument parsing and dispatch for ``kinesis-actors``.

User errors (bad flags, a missing server, an unknown stream, an unreachable endpoint, missing
credentials) print one line saying what to do and exit with status 2; only bugs print a
traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import NoReturn

import anyio

from .. import errors
from ..client import KinesisClient, StreamRef
from ..consumer import StartingPosition
from ..runtime import RestartIntensityExceeded
from ._bench import run_bench
from ._common import CONNECTION_HELP, UsageError, connection_flags, describe, open_client
from ._consumers import run_consumers
from ._demo import DemoOptions, run_demo
from ._leases import add_leases_parser, run_leases_command
from ._local import run_local, stream_spec
from ._put import INTERRUPT_FLUSH_TIMEOUT, run_put, standard_input
from ._streams import STREAM_COMMANDS, add_stream_parsers, run_stream_command
from ._tail import run_tail

__all__ = ["main"]

_PROG = "kinesis-actors"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line pointing at ``--help``, not the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=_PROG,
        description="An actor runtime for AWS Kinesis Data Streams.",
        epilog="create-stream, describe-stream, list-streams, update-shard-count and "
        "delete-stream are named after the AWS CLI's 'aws kinesis' subcommands and accept its "
        "flag names (--stream-name, --shard-count, --target-shard-count, "
        "--enforce-consumer-deletion). Run 'kinesis-actors COMMAND --help' for a command's "
        "flags and examples. User errors exit with status 2 and one line on standard error.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run the product end to end on an embedded local Kinesis",
        description="Starts the embedded local Kinesis, creates a source and a sink stream, "
        "produces a keyed workload through the producer (bounded queue, KPL aggregation) "
        "while an Enhanced Fan-Out consumer reads it live, runs a Spark micro-batch query "
        "(Arrow path) into the sink stream and a parquet folder, verifies every record "
        "arrived exactly once, runs a consumer group of three worker processes through a "
        "lease table in the local DynamoDB (one is killed, the others take over) and prints a "
        "summary. Exit status 0 only if all of it held.\n\n"
        "needs: the local Kinesis (npm kinesis-local) unless --endpoint-url; PySpark (the "
        "spark extra) and Java 17 unless --no-spark; the local DynamoDB (npm dynalite) for the "
        "group stage, which is skipped with a note without it. A missing piece is said in one "
        "line before any stage runs.",
        epilog="examples:\n  kinesis-actors demo\n  kinesis-actors demo --records 50000 "
        "--no-spark\n  kinesis-actors demo --endpoint-url https://kinesis.eu-west-1."
        "amazonaws.com --region eu-west-1   (creates and deletes two streams: costs money)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--records", type=_positive_int, default=20_000, help="records to produce (20,000)"
    )
    demo.add_argument(
        "--shards", type=_positive_int, default=4, help="shards of each demo stream (4)"
    )
    demo.add_argument(
        "--output", type=Path, help="folder for the parquet output and the Spark checkpoint"
    )
    demo.add_argument("--no-spark", action="store_true", help="skip the Spark stage")
    connection_flags(demo)

    local = commands.add_parser(
        "local",
        help="run the embedded local Kinesis in the foreground and print its endpoints",
        description="Starts the embedded local Kinesis server (kinesis-mock, npm package "
        "kinesis-local) on free loopback ports, prints one JSON line with its endpoints, "
        "region and credentials, and serves until Ctrl-C or SIGTERM.",
        epilog='output: {"endpoint_url": "http://127.0.0.1:PORT", "tls_endpoint_url": '
        '"https://127.0.0.1:PORT", "region": "us-east-1", "credentials": ["local", '
        '"local"], "streams": {"orders": 2}}. The TLS endpoint speaks HTTP/2 (needed by '
        "--mode efo) with a self-signed certificate: pass --no-verify to the other commands.\n\n"
        "install: make setup, or npm install --prefix .tools kinesis-local@0.6.2 (needs "
        "Node.js 18+); KINESIS_LOCAL_DIR points at another install.\n\n"
        "example (PORT: the endpoint_url's port, from the printed line):\n"
        "  kinesis-actors local --create-stream orders:2 &\n"
        "  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local\n"
        "  seq 100 | kinesis-actors put --stream orders --endpoint-url http://127.0.0.1:PORT\n"
        "  kinesis-actors tail --stream orders --from trim_horizon --count 100 "
        "--endpoint-url http://127.0.0.1:PORT",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    local.add_argument(
        "--create-stream",
        metavar="NAME[:SHARDS]",
        action="append",
        type=stream_spec,
        default=[],
        help="create this stream (one shard unless SHARDS) before printing the endpoints; "
        "repeatable",
    )
    add_stream_parsers(commands, _stream, _positive_int)

    put = commands.add_parser(
        "put",
        help="produce standard input's lines to a stream, one record per line",
        description="Reads lines from standard input and produces each non-empty line as one "
        "record (bounded queue, KPL aggregation, retries); prints a JSON summary: "
        '{"stream", "read" (the first non-empty lines, taken by the producer), '
        '"records" (acknowledged: in the stream), '
        '"failed", "not_sent", "interrupted", "calls", "kinesis_records", '
        '"backpressure_cycles"}, where read = records + failed + not_sent. Exits 0 when every '
        "record was acknowledged, 1 when some failed. Ctrl-C (SIGINT; SIGTERM alike) stops "
        f"reading, gives the lines read up to {INTERRUPT_FLUSH_TIMEOUT:g} s to be "
        "acknowledged, counts the rest as not_sent (those in flight may have been written), "
        "prints the summary and exits 130 (143); a second Ctrl-C gives up at once.",
        epilog="examples:\n"
        "  seq 1000 | kinesis-actors put --stream orders\n"
        "  kinesis-actors put --stream orders --key customer-7 < events.jsonl\n\n"
        + CONNECTION_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    put.add_argument(
        "--stream",
        required=True,
        type=_stream,
        help="the stream to write to: its name, or its ARN (another account's stream)",
    )
    put.add_argument(
        "--key", help="partition key for every line (default: the line number, spreading lines)"
    )
    put.add_argument(
        "--no-aggregation", action="store_true", help="send one Kinesis record per line"
    )
    connection_flags(put)

    tail = commands.add_parser(
        "tail",
        help="print a stream's records as they arrive, one JSON object per line",
        description="Reads one or more streams with the library's Consumer (polling or "
        "Enhanced Fan-Out) and prints one JSON object per user record (KPL aggregates are "
        "expanded), in order within a shard:\n"
        '  {"stream", "shard_id", "sequence_number", "sub_sequence_number", '
        '"partition_key",\n'
        '   "explicit_hash_key", "approximate_arrival_timestamp" (ISO 8601, UTC), "data",\n'
        '   "data_encoding": "utf-8" (data is the text) or "base64" (not valid UTF-8)}\n'
        "Runs until --count records were printed (exit 0), its reader goes away (`| head`: "
        "exit 0), or Ctrl-C (exit 130; SIGTERM 143). In efo mode a consumer this command "
        "registers is deregistered on exit; an existing one is reused and kept.",
        epilog="examples:\n"
        "  kinesis-actors tail --stream orders                      # new records, until Ctrl-C\n"
        "  kinesis-actors tail --stream orders --from trim_horizon --count 10\n"
        "  kinesis-actors tail --stream orders,payments --raw | grep ERROR\n"
        "  kinesis-actors tail --stream orders --from trim_horizon --raw | head -n 1\n"
        "  kinesis-actors tail --stream orders --mode efo "
        "--endpoint-url https://127.0.0.1:PORT --no-verify\n\n" + CONNECTION_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tail.add_argument(
        "--stream",
        required=True,
        type=_stream_list,
        help="the stream, or several: a,b,c (names or stream ARNs)",
    )
    tail.add_argument(
        "--mode",
        choices=("polling", "efo"),
        default="polling",
        help="polling (GetRecords, the default) or efo (Enhanced Fan-Out: SubscribeToShard "
        "over HTTP/2, needs an https endpoint)",
    )
    tail.add_argument(
        "--from",
        dest="start",
        metavar="POSITION",
        type=_starting_position,
        default=StartingPosition.latest(),
        help="latest (the default: only records arriving from now on), trim_horizon (the "
        "oldest retained record), or an ISO 8601 timestamp such as 2026-01-02T03:04:05Z",
    )
    tail.add_argument(
        "--count",
        metavar="N",
        type=_positive_int,
        help="stop after printing N records (default: run until Ctrl-C)",
    )
    tail.add_argument(
        "--raw",
        action="store_true",
        help="print only each record's data, as is, one per line (no JSON)",
    )
    tail.add_argument(
        "--consumer-name",
        metavar="NAME",
        help="efo: the consumer's name (default: kinesis-actors- and a hash of the stream "
        "names, the library's default)",
    )
    connection_flags(tail)

    consumers = commands.add_parser(
        "consumers",
        help="list or deregister a stream's Enhanced Fan-Out consumers",
        description="Registered consumers cost money and use one of a stream's 20 slots; "
        "a killed job can leave one behind. List them (JSON), or deregister one by name.",
        epilog="examples:\n"
        "  kinesis-actors consumers list --stream orders\n"
        "  kinesis-actors consumers deregister --stream orders --name orders-app",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = consumers.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list",
        help="print the stream's consumers as JSON",
        description='Prints a JSON array: [{"name", "arn", "status", "created" (ISO 8601)}].',
        epilog=CONNECTION_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument("--stream", required=True, type=_stream, help="the stream (name or ARN)")
    connection_flags(listing)
    removal = actions.add_parser(
        "deregister",
        help="deregister one consumer and wait",
        description='Deregisters the consumer, waits until it is gone and prints {"deregistered":'
        ' NAME, "stream": STREAM}; exits 2 if the stream has no consumer of that name.',
        epilog=CONNECTION_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    removal.add_argument("--stream", required=True, type=_stream, help="the stream (name or ARN)")
    removal.add_argument("--name", required=True, help="the consumer's name")
    connection_flags(removal)

    add_leases_parser(commands)

    # Listed here for the overview only: main() hands `bench ...` to the checkout's suite,
    # which owns its flags and its --help.
    commands.add_parser(
        "bench",
        help="run the benchmark suite (from a source checkout) against a loopback load "
        "target, peers side by side; 'kinesis-actors bench --help' for its flags",
        add_help=False,
    )
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def _stream(text: str) -> str:
    """A stream name or stream ARN, checked before any call (the region once it is known)."""
    try:
        StreamRef.parse(text.strip(), option="--stream")
    except errors.ConfigError as exc:
        raise argparse.ArgumentTypeError(
            exc.message.removeprefix("--stream").lstrip(": ")
        ) from None
    return text.strip()


def _stream_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"expected a stream name or comma-separated names, got {text!r}"
        )
    return [_stream(name) for name in dict.fromkeys(names)]


def _starting_position(text: str) -> StartingPosition:
    word = text.strip().lower()
    if word == "latest":
        return StartingPosition.latest()
    if word in ("trim_horizon", "trim-horizon"):
        return StartingPosition.trim_horizon()
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected latest, trim_horizon or an ISO 8601 timestamp, got {text!r}"
        ) from None
    try:
        return StartingPosition.at_timestamp(stamp)
    except errors.ConfigError:
        raise argparse.ArgumentTypeError(f"{text!r} is in the future") from None


async def _with_client(
    args: argparse.Namespace,
    streams: Sequence[str],
    body: Callable[[KinesisClient], Awaitable[int]],
) -> int:
    """Open a client, check quickly that the endpoint answers and the streams exist, run."""
    for stream in streams:  # an ARN of another region fails here, before any call
        StreamRef.parse(stream, option="--stream", region=args.region)
    client = await open_client(
        KinesisClient(region=args.region, endpoint_url=args.endpoint_url, verify=not args.no_verify)
    )
    try:
        for stream in streams:
            await describe(client, stream, args.region)
        return await body(client)
    finally:
        await client.aclose()


def _failure(exc: BaseException) -> tuple[str, int] | None:
    """The one line and exit status for an error a person can act on; None for a bug.

    Service and configuration errors are 2 (the user can fix them); a consumer that gave up
    after repeated failures while running is 1. Task groups wrap errors: look inside.
    """
    if isinstance(exc, UsageError | errors.KinesisError):
        return str(exc), 2
    if isinstance(exc, RestartIntensityExceeded):
        last = exc.__cause__ if exc.__cause__ is not None else exc
        return f"gave up after repeated failures; the last one: {last}", 1
    if isinstance(exc, BaseExceptionGroup):
        found = [_failure(inner) for inner in exc.exceptions]
        if found and all(one is not None for one in found):
            return found[0]
    return None


class _OneLine(logging.Formatter):
    """The library's warnings as one line each, without the tracebacks."""

    def format(self, record: logging.LogRecord) -> str:
        return f"kinesis-actors: {record.levelname.lower()}: {record.getMessage()}"


class _ToStderr(logging.Handler):
    """Writes to ``sys.stderr`` as it is at each line: while a live progress display shows
    (``put`` on a terminal), that is the display's proxy, which prints the line above it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def _said_by_the_error(record: logging.LogRecord) -> bool:
    """False for the client's "cannot reach" warning: every command's first call fails fast
    and says the same in its one-line error."""
    return not getattr(record, "first_contact", False)


def _quiet_logging() -> None:
    """Send the library's warnings to stderr, one line each, unless logging is set up."""
    library = logging.getLogger("kinesis_actors")
    if logging.getLogger().handlers or library.handlers:
        return  # the application (or pytest) decides
    handler = _ToStderr()
    handler.setFormatter(_OneLine())
    handler.addFilter(_said_by_the_error)
    library.addHandler(handler)
    library.setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        try:
            return run_bench(argv[1:])
        except KeyboardInterrupt:
            return 130
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else 2
    _quiet_logging()
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`kinesis-actors tail ... | head`): stop quietly, and keep the
        # interpreter's final flush from complaining about the closed pipe.
        if threading.current_thread() is threading.main_thread():
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        failure = _failure(exc)
        if failure is None:
            raise
        message, status = failure
        print(f"kinesis-actors: error: {message}", file=sys.stderr)
        return status


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        options = DemoOptions(
            records=args.records,
            shards=args.shards,
            endpoint_url=args.endpoint_url,
            region=args.region,
            verify=not args.no_verify,
            output=args.output,
            spark=not args.no_spark,
        )
        return anyio.run(run_demo, options)
    if args.command == "local":
        return run_local(dict(args.create_stream))
    if args.command in STREAM_COMMANDS:
        return anyio.run(run_stream_command, args)
    if args.command == "leases":
        return anyio.run(run_leases_command, args)
    if args.command == "consumers":
        return anyio.run(
            partial(
                _with_client,
                args,
                [args.stream],
                partial(
                    run_consumers,
                    action=args.action,
                    stream=args.stream,
                    name=getattr(args, "name", None),
                ),
            )
        )
    if args.command == "put":
        return anyio.run(
            partial(
                _with_client,
                args,
                [args.stream],
                partial(
                    run_put,
                    lines=standard_input(),
                    stream=args.stream,
                    key=args.key,
                    aggregation=not args.no_aggregation,
                ),
            )
        )
    if args.command == "tail":
        if args.mode == "efo" and (args.endpoint_url or "https:").startswith("http:"):
            raise UsageError(
                "--mode efo needs an https endpoint (SubscribeToShard is HTTP/2 over TLS): pass "
                "the server's https URL as --endpoint-url (with --no-verify for the local "
                "server's self-signed certificate), or use --mode polling"
            )
        if args.consumer_name is not None and args.mode != "efo":
            raise UsageError("--consumer-name is for --mode efo only")
        return anyio.run(
            partial(
                _with_client,
                args,
                args.stream,
                partial(
                    run_tail,
                    streams=args.stream,
                    mode=args.mode,
                    start=args.start,
                    count=args.count,
                    consumer_name=args.consumer_name,
                    raw=args.raw,
                ),
            )
        )
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover
