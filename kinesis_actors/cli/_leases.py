"""``kinesis-actors leases --table T [--stream S]``: what a lease table says, shard by shard.

Reads the whole table with a consistent, paginated Scan, decodes each item with the lease
package's KCL codec (:func:`~kinesis_actors.leases.decode_lease`: this library's items and the
KCL's read alike) and prints one row per lease: the stream, the shard, the owner (``-`` when
free), the lease counter, the checkpoint with its sub-sequence number, the parents and the
owner switches since the last checkpoint, and the **lag**.

Lag is the age of the oldest record not yet checkpointed, measured where the KCL measures it:
``MillisBehindLatest`` of one ``GetRecords`` (``Limit`` 1) from just after the checkpoint
(``AT_SEQUENCE_NUMBER`` when the checkpoint is inside an aggregate, whose remaining user
records are not processed yet): how many milliseconds the next record to process is behind
the shard's newest one; 0 when the checkpoint is caught up. A shard at ``SHARD_END`` has no
lag (0), nor one whose checkpoint is ``LATEST`` (it starts at the tip); ``TRIM_HORIZON`` is
measured from the oldest retained record; ``AT_TIMESTAMP`` (the timestamp is the
application's, not in the item) and leases whose stream is unknown (a KCL single-stream
table read without ``--stream``) show none. It costs one GetShardIterator and one GetRecords
per shard, at most :data:`_LAG_CONCURRENCY` at a time; ``--no-lag`` skips it.

An item that is not a lease (a wrong type, no ``leaseKey``) is listed with what is wrong, not
skipped: a table that does not read right should say so. :func:`add_leases_parser` and
:func:`run_leases_command` are the command's flags and its run from them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TextIO

import anyio

from .. import errors
from ..client import DynamoDBClient, KinesisClient, RetrySettings
from ..leases import LATEST, SHARD_END, TRIM_HORIZON, decode_lease
from ._common import (
    CONNECTION_HELP,
    PROBE_RETRY,
    UsageError,
    connection_flags,
    open_client,
    unreachable_cause,
)

__all__ = [
    "LeaseRow",
    "add_leases_parser",
    "lag_millis",
    "read_leases",
    "render",
    "run_leases",
    "run_leases_command",
]

#: Shards whose lag is measured at the same time (two Kinesis calls each).
_LAG_CONCURRENCY = 8
#: A lag probe is a report, not a read that must succeed: one quick retry.
_LAG_RETRY = RetrySettings(max_retries=1, base=0.1, max=0.5)
_HEADERS = (
    "stream",
    "shard",
    "owner",
    "counter",
    "checkpoint",
    "sub",
    "parents",
    "switches",
    "lag",
)


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """One line of the listing (the JSON output is this, field for field)."""

    lease_key: str
    stream: str | None
    shard_id: str | None
    owner: str | None
    counter: int | None
    checkpoint: str | None
    sub_sequence: int | None
    parents: tuple[str, ...]
    owner_switches: int | None
    lag_millis: int | None = None
    lag_error: str | None = None
    item_error: str | None = None


def _row(item: dict[str, Any], stream: str | None) -> LeaseRow:
    try:
        lease = decode_lease(item)
    except ValueError as exc:
        key = item.get("leaseKey", {})
        text = key.get("S") if isinstance(key, dict) else None
        return LeaseRow(
            str(text), None, None, None, None, None, None, (), None, item_error=str(exc)
        )
    return LeaseRow(
        lease_key=lease.key,
        stream=lease.stream_name or stream,
        shard_id=lease.shard_id,
        owner=lease.owner,
        counter=lease.counter,
        checkpoint=lease.checkpoint,
        sub_sequence=lease.sub_sequence,
        parents=lease.parent_shard_ids,
        owner_switches=lease.owner_switches_since_checkpoint,
    )


async def read_leases(ddb: DynamoDBClient, table: str, stream: str | None) -> list[LeaseRow]:
    """Every lease of ``table`` (those of ``stream`` only, if given), sorted by stream and shard.

    With ``stream``, a lease that names another stream is left out; one that names none (the
    KCL's single-stream items) is taken to be the stream's.
    """
    rows = [
        _row(item, stream) async for item in ddb.scan({"TableName": table, "ConsistentRead": True})
    ]
    if stream is not None:
        rows = [row for row in rows if row.stream in (None, stream)]
    return sorted(rows, key=lambda row: (row.stream or "", row.shard_id or "", row.lease_key))


async def lag_millis(kinesis: KinesisClient, stream: str, lease: LeaseRow) -> int | None:
    """The lease's lag (see the module's docstring), or None where there is none to measure."""
    checkpoint = lease.checkpoint
    if checkpoint in (SHARD_END, LATEST):
        return 0
    params: dict[str, Any] = {"StreamName": stream, "ShardId": lease.shard_id}
    if checkpoint == TRIM_HORIZON:
        params["ShardIteratorType"] = "TRIM_HORIZON"
    elif checkpoint is not None and checkpoint.isdigit():
        inside_aggregate = bool(lease.sub_sequence)
        params["ShardIteratorType"] = (
            "AT_SEQUENCE_NUMBER" if inside_aggregate else "AFTER_SEQUENCE_NUMBER"
        )
        params["StartingSequenceNumber"] = checkpoint
    else:
        return None  # AT_TIMESTAMP, or a checkpoint we cannot place
    iterator = await kinesis.call("GetShardIterator", params, retry=_LAG_RETRY)
    records = await kinesis.call(
        "GetRecords", {"ShardIterator": iterator["ShardIterator"], "Limit": 1}, retry=_LAG_RETRY
    )
    behind: int = records["MillisBehindLatest"]
    return behind


async def _with_lags(kinesis: KinesisClient, rows: Sequence[LeaseRow]) -> list[LeaseRow]:
    measured = list(rows)
    limiter = anyio.CapacityLimiter(_LAG_CONCURRENCY)

    async def measure(index: int) -> None:
        row = measured[index]
        if row.stream is None or row.shard_id is None:
            return
        async with limiter:
            try:
                lag = await lag_millis(kinesis, row.stream, row)
            except errors.KinesisError as exc:
                measured[index] = replace(row, lag_error=str(exc))
            else:
                measured[index] = replace(row, lag_millis=lag)

    async with anyio.create_task_group() as group:
        for index in range(len(measured)):
            group.start_soon(measure, index)
    return measured


def _cell(row: LeaseRow, name: str) -> str:
    if name == "stream":
        return row.stream or "?"
    if name == "shard":
        return row.shard_id or row.lease_key
    if row.item_error is not None:
        return f"unreadable: {row.item_error}" if name == "owner" else ""
    if name == "owner":
        return row.owner or "-"
    if name == "counter":
        return str(row.counter)
    if name == "checkpoint":
        return row.checkpoint or ""
    if name == "sub":
        return str(row.sub_sequence)
    if name == "parents":
        return ",".join(row.parents) or "-"
    if name == "switches":
        return str(row.owner_switches)
    if row.lag_error is not None:
        return f"? ({row.lag_error})"
    return "-" if row.lag_millis is None else f"{row.lag_millis} ms"


def render(rows: Sequence[LeaseRow], table: str) -> str:
    """The human listing: aligned columns, then one line of leases per owner."""
    lines = [[_cell(row, name) for name in _HEADERS] for row in rows]
    widths = [max([len(h)] + [len(line[i]) for line in lines]) for i, h in enumerate(_HEADERS)]
    out = ["  ".join(h.ljust(w) for h, w in zip(_HEADERS, widths, strict=True)).rstrip()]
    out += [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    ]
    owners = Counter(row.owner or "(free)" for row in rows if row.item_error is None)
    held = ", ".join(f"{owner}: {count}" for owner, count in sorted(owners.items()))
    out.append(f"{len(rows)} leases in {table}" + (f" ({held})" if held else ""))
    return "\n".join(out)


def _is_lease_table(table: dict[str, Any]) -> bool:
    return table.get("KeySchema") == [{"AttributeName": "leaseKey", "KeyType": "HASH"}]


async def run_leases(
    ddb: DynamoDBClient,
    kinesis: KinesisClient | None,
    *,
    table: str,
    stream: str | None,
    as_json: bool,
    out: TextIO | None = None,
) -> int:
    """Print the listing (``as_json``: a JSON array of :class:`LeaseRow`); lags are measured
    when ``kinesis`` is given. Exit status 0."""
    out = sys.stdout if out is None else out
    described = await ddb.describe_table(table)
    if not _is_lease_table(described):
        raise errors.ValidationError(
            f"table {table!r} is not a lease table: its key schema is "
            f"{described.get('KeySchema')!r}, a lease table's is leaseKey (a string hash key)"
        )
    rows = await read_leases(ddb, table, stream)
    if kinesis is not None:
        rows = await _with_lags(kinesis, rows)
    if as_json:
        json.dump([asdict(row) for row in rows], out, indent=2)
        out.write("\n")
    else:
        out.write(render(rows, table) + "\n")
    return 0


def add_leases_parser(commands: Any) -> None:
    """The ``leases`` command's flags and help, under ``commands`` (argparse's subparsers)."""
    leases = commands.add_parser(
        "leases",
        help="list a consumer group's lease table: owner, checkpoint and lag per shard",
        description="Reads the lease table (KCL format: this library's and the KCL's tables "
        "alike) and prints one row per shard: stream, shard, owner ('-' when free), lease "
        "counter, checkpoint and its sub-sequence number, parent shards, owner switches since "
        "the last checkpoint, and lag. Lag is MillisBehindLatest of one GetRecords (Limit 1) "
        "from just after the checkpoint: how far the next record to process is behind the "
        "shard's newest one (0: caught up; SHARD_END and LATEST: 0; AT_TIMESTAMP, or a stream "
        "the lease does not name and --stream does not give: '-'). It costs two Kinesis calls "
        "per shard; --no-lag skips them. The last line counts the leases per owner.",
        epilog="examples:\n"
        "  kinesis-actors leases --table orders-app --stream orders\n"
        "  kinesis-actors leases --table orders-app --json --no-lag\n"
        "  kinesis-actors leases --table orders-app --stream orders "
        "--endpoint-url http://127.0.0.1:PORT --dynamodb-endpoint-url http://127.0.0.1:PORT2\n\n"
        + CONNECTION_HELP
        + "  --dynamodb-endpoint-url URL: the lease table's DynamoDB (default: AWS's for "
        "--region).\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    leases.add_argument("--table", required=True, help="the lease table (the application name)")
    leases.add_argument(
        "--stream",
        help="the stream: only its leases are listed, and the KCL's single-stream leases "
        "(which do not name their stream) get a lag",
    )
    leases.add_argument(
        "--json", action="store_true", help="print a JSON array, one object per lease"
    )
    leases.add_argument("--no-lag", action="store_true", help="do not measure lags (no Kinesis)")
    leases.add_argument(
        "--dynamodb-endpoint-url",
        metavar="URL",
        help="the DynamoDB endpoint of the lease table (default: AWS for --region)",
    )
    connection_flags(leases)


async def run_leases_command(args: argparse.Namespace) -> int:
    """Check quickly that the table is there, then list it (with lags unless --no-lag)."""
    verify = not args.no_verify
    ddb = await open_client(
        DynamoDBClient(region=args.region, endpoint_url=args.dynamodb_endpoint_url, verify=verify)
    )
    try:
        endpoint = ddb.endpoint_url
        try:
            await ddb.call("DescribeTable", {"TableName": args.table}, retry=PROBE_RETRY)
        except errors.ResourceNotFoundError:
            raise UsageError(
                f"table {args.table!r} not found at {endpoint} (region {args.region}); check "
                "--table, --region and --dynamodb-endpoint-url"
            ) from None
        except errors.TransportError as exc:
            raise UsageError(
                f"cannot reach DynamoDB at {endpoint} ({unreachable_cause(exc)}); is the server "
                "running? check --dynamodb-endpoint-url"
            ) from None
        options = {"table": args.table, "stream": args.stream, "as_json": args.json}
        if args.no_lag:
            return await run_leases(ddb, None, **options)
        kinesis = await open_client(
            KinesisClient(region=args.region, endpoint_url=args.endpoint_url, verify=verify)
        )
        try:
            return await run_leases(ddb, kinesis, **options)
        finally:
            await kinesis.aclose()
    finally:
        await ddb.aclose()
