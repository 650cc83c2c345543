"""A stream's life from the command line, named after ``aws kinesis``'s subcommands:
``create-stream``, ``describe-stream``, ``list-streams``, ``update-shard-count`` and
``delete-stream``.

The names and flags are the AWS CLI's (``--stream-name`` is accepted beside our ``--stream``,
``--shard-count``, ``--target-shard-count``, ``--enforce-consumer-deletion``) so that a person
who knows one knows the other. Unlike the AWS CLI, the commands that change a stream wait
until it is ACTIVE again (or gone), at most :data:`WAIT_BOUND` seconds, so the next command
can use it at once; ``--no-wait`` returns as soon as the service took the request. Output is
JSON on standard output; errors are one line on standard error with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

import anyio

from .. import errors
from ..client import KinesisClient, StreamRef, stream_params
from ._common import (
    CONNECTION_HELP,
    PROBE_RETRY,
    UsageError,
    connection_flags,
    describe,
    first_call,
    open_client,
)

__all__ = ["STREAM_COMMANDS", "WAIT_BOUND", "add_stream_parsers", "run_stream_command"]

#: The subcommands this module owns.
STREAM_COMMANDS = (
    "create-stream",
    "describe-stream",
    "list-streams",
    "update-shard-count",
    "delete-stream",
)
#: How long a command waits for a stream to become ACTIVE (or to be gone). AWS creates a
#: stream in tens of seconds and reshards one in minutes at worst for large streams; the
#: local server takes a fraction of a second.
WAIT_BOUND = 600.0
_AWS = "mirrors 'aws kinesis {}'"


def _summary_help() -> str:
    return (
        'Prints the stream\'s summary as JSON: {"stream", "arn", "status", "mode" '
        '(PROVISIONED or ON_DEMAND), "open_shards", "retention_hours", "consumers" (registered '
        'Enhanced Fan-Out consumers), "encryption", "created" (ISO 8601)}.'
    )


def add_stream_parsers(
    commands: Any, stream_type: Callable[[str], str], positive_int: Callable[[str], int]
) -> None:
    """The five subcommands, on ``commands`` (the top-level parser's subparsers)."""
    formatter = argparse.RawDescriptionHelpFormatter

    def stream_flag(parser: argparse.ArgumentParser, *, name_only: bool = False) -> None:
        parser.add_argument(
            "--stream",
            "--stream-name",
            dest="stream",
            required=True,
            type=stream_type,
            help="the stream's name" + ("" if name_only else ", or its ARN"),
        )

    def wait_flag(parser: argparse.ArgumentParser, until: str) -> None:
        parser.add_argument(
            "--no-wait",
            action="store_true",
            help=f"return once the request is taken, without waiting until {until}",
        )

    create = commands.add_parser(
        "create-stream",
        help="create a stream (provisioned with --shard-count N, or --on-demand)",
        description=f"Creates a stream and waits until it is ACTIVE ({_AWS.format('create-stream')}"
        f", which does not wait). {_summary_help()}",
        epilog="examples:\n"
        "  kinesis-actors create-stream --stream orders --shard-count 4\n"
        "  kinesis-actors create-stream --stream clicks --on-demand\n\n" + CONNECTION_HELP,
        formatter_class=formatter,
    )
    stream_flag(create, name_only=True)
    capacity = create.add_mutually_exclusive_group(required=True)
    capacity.add_argument(
        "--shard-count", type=positive_int, metavar="N", help="provisioned, with N shards"
    )
    capacity.add_argument(
        "--on-demand",
        action="store_true",
        help="on-demand capacity mode (the service picks and scales the shards)",
    )
    wait_flag(create, "it is ACTIVE")
    connection_flags(create)

    described = commands.add_parser(
        "describe-stream",
        help="print a stream's summary: status, shards, mode, retention, consumers",
        description=f"{_summary_help()} One call, DescribeStreamSummary "
        f"({_AWS.format('describe-stream-summary')}).",
        epilog="example:\n  kinesis-actors describe-stream --stream orders\n\n" + CONNECTION_HELP,
        formatter_class=formatter,
    )
    stream_flag(described)
    connection_flags(described)

    listing = commands.add_parser(
        "list-streams",
        help="print the names of the region's streams",
        description="Prints a JSON array of every stream's name, all pages of ListStreams "
        f"({_AWS.format('list-streams')}).",
        epilog="example:\n  kinesis-actors list-streams --region eu-west-1\n\n" + CONNECTION_HELP,
        formatter_class=formatter,
    )
    connection_flags(listing)

    update = commands.add_parser(
        "update-shard-count",
        help="change a provisioned stream's shard count (uniform scaling)",
        description="Asks for N open shards with uniform scaling and waits until the stream is "
        f"ACTIVE again ({_AWS.format('update-shard-count')}, which does not wait). The service "
        "allows at most double or half the current count in one step. " + _summary_help(),
        epilog="example:\n  kinesis-actors update-shard-count --stream orders "
        "--target-shard-count 8\n\n" + CONNECTION_HELP,
        formatter_class=formatter,
    )
    stream_flag(update)
    update.add_argument(
        "--target-shard-count", required=True, type=positive_int, metavar="N", help="shards wanted"
    )
    wait_flag(update, "it is ACTIVE again")
    connection_flags(update)

    delete = commands.add_parser(
        "delete-stream",
        help="delete a stream (and, with --enforce-consumer-deletion, its EFO consumers)",
        description="Deletes the stream and waits until it is gone "
        f"({_AWS.format('delete-stream')}, which does not wait); prints "
        '{"deleted": STREAM}. Its records are gone with it.',
        epilog="example:\n  kinesis-actors delete-stream --stream orders\n\n" + CONNECTION_HELP,
        formatter_class=formatter,
    )
    stream_flag(delete)
    delete.add_argument(
        "--enforce-consumer-deletion",
        action="store_true",
        help="delete it even if Enhanced Fan-Out consumers are registered (they go with it)",
    )
    wait_flag(delete, "it is gone")
    connection_flags(delete)


def summary(described: dict[str, Any]) -> dict[str, Any]:
    """A ``StreamDescriptionSummary`` in this command line's words (see the help)."""
    created = described.get("StreamCreationTimestamp")
    return {
        "stream": described["StreamName"],
        "arn": described.get("StreamARN"),
        "status": described["StreamStatus"],
        "mode": described.get("StreamModeDetails", {}).get("StreamMode", "PROVISIONED"),
        "open_shards": described.get("OpenShardCount"),
        "retention_hours": described.get("RetentionPeriodHours"),
        "consumers": described.get("ConsumerCount"),
        "encryption": described.get("EncryptionType"),
        "created": created.isoformat() if isinstance(created, datetime) else created,
    }


def _print(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2)
    print()


async def run_stream_command(args: argparse.Namespace) -> int:
    """Run one of :data:`STREAM_COMMANDS` as parsed into ``args``; returns the exit status."""
    stream: str | None = getattr(args, "stream", None)
    if stream is not None:  # an ARN of another region fails here, before any call
        StreamRef.parse(stream, option="--stream", region=args.region)
    client = await open_client(
        KinesisClient(region=args.region, endpoint_url=args.endpoint_url, verify=not args.no_verify)
    )
    try:
        if args.command == "list-streams":
            _print(await _list(client))
            return 0
        assert stream is not None
        if args.command == "create-stream":
            await _create(client, args)
        elif args.command == "update-shard-count":
            await _update(client, args)
        elif args.command == "delete-stream":
            await _delete(client, args)
            return 0
        described = await describe(client, stream, args.region)
        _print(summary(described))
        return 0
    finally:
        await client.aclose()


async def _list(client: KinesisClient) -> list[str]:
    names: list[str] = []
    params: dict[str, Any] = {}
    while True:
        reply = await first_call(client, client.call("ListStreams", params, retry=PROBE_RETRY))
        page = reply.get("StreamNames", [])
        names.extend(page)
        if not reply.get("HasMoreStreams") or not page:
            return names
        # NextToken is the current form; ExclusiveStartStreamName the one older servers know.
        token = reply.get("NextToken")
        params = {"NextToken": token} if token else {"ExclusiveStartStreamName": page[-1]}


async def _create(client: KinesisClient, args: argparse.Namespace) -> None:
    stream: str = args.stream
    if StreamRef.parse(stream).arn is not None:
        raise UsageError("create-stream takes a stream's name, not an ARN (--stream)")
    params: dict[str, Any] = {"StreamName": stream}
    if args.on_demand:
        params["StreamModeDetails"] = {"StreamMode": "ON_DEMAND"}
    else:
        params["ShardCount"] = args.shard_count
    try:
        await first_call(client, client.call("CreateStream", params, retry=PROBE_RETRY))
    except errors.ResourceInUseError:
        raise UsageError(
            f"stream {stream!r} already exists at {client.endpoint_url}; "
            f"'kinesis-actors describe-stream --stream {stream}' shows it"
        ) from None
    if not args.no_wait:
        await _until_active(client, stream, "CREATING", args.region)


async def _update(client: KinesisClient, args: argparse.Namespace) -> None:
    stream: str = args.stream
    described = await describe(client, stream, args.region)
    if described.get("StreamModeDetails", {}).get("StreamMode") == "ON_DEMAND":
        raise UsageError(
            f"stream {stream!r} is on-demand: the service scales its shards itself "
            "(update-shard-count is for provisioned streams)"
        )
    params = {
        **stream_params(stream),
        "TargetShardCount": args.target_shard_count,
        "ScalingType": "UNIFORM_SCALING",
    }
    await first_call(client, client.call("UpdateShardCount", params, retry=PROBE_RETRY))
    if not args.no_wait:
        await _until_active(client, stream, "UPDATING", args.region)


async def _delete(client: KinesisClient, args: argparse.Namespace) -> None:
    stream: str = args.stream
    await describe(client, stream, args.region)
    params = {**stream_params(stream), "EnforceConsumerDeletion": args.enforce_consumer_deletion}
    try:
        await first_call(client, client.call("DeleteStream", params, retry=PROBE_RETRY))
    except errors.ResourceInUseError:
        raise UsageError(
            f"stream {stream!r} has registered Enhanced Fan-Out consumers: pass "
            "--enforce-consumer-deletion to delete them with it, or deregister them first "
            f"('kinesis-actors consumers list --stream {stream}')"
        ) from None
    if not args.no_wait:
        await _until_gone(client, stream)
    print(json.dumps({"deleted": stream}))


async def _until_gone(client: KinesisClient, stream: str) -> None:
    """Wait until ``stream`` is no longer found; a usage error after :data:`WAIT_BOUND` s."""
    with anyio.move_on_after(WAIT_BOUND):
        delay = 0.05
        while True:
            try:
                await client.call("DescribeStreamSummary", stream_params(stream))
            except errors.ResourceNotFoundError:
                return
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)
    raise UsageError(
        f"stream {stream!r} is still DELETING after {WAIT_BOUND:g} s; "
        f"'kinesis-actors list-streams' shows when it is gone"
    )


async def _until_active(client: KinesisClient, stream: str, status: str, region: str) -> None:
    """Wait until ``stream`` is ACTIVE again; a usage error after :data:`WAIT_BOUND` s."""
    with anyio.move_on_after(WAIT_BOUND):
        delay = 0.05
        while (await describe(client, stream, region))["StreamStatus"] != "ACTIVE":
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)
        return
    raise UsageError(
        f"stream {stream!r} is still {status} after {WAIT_BOUND:g} s; "
        f"'kinesis-actors describe-stream --stream {stream}' shows when it is ACTIVE"
    )
