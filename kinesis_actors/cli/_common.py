"""What the commands share: the user-error type, the connection flags and their help, the
quick first call, opening a client with a one-line error when there are no credentials, and
the first call's failures (an unknown stream, an endpoint that does not answer, access denied)
turned into one line each."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable
from typing import Any, TypeVar

from .. import errors
from ..client import DynamoDBClient, KinesisClient, RetrySettings, stream_params

__all__ = [
    "CONNECTION_HELP",
    "PROBE_RETRY",
    "UsageError",
    "connection_flags",
    "describe",
    "first_call",
    "open_client",
    "unreachable_cause",
]

#: The first call of every command fails fast: a wrong endpoint should not take the library's
#: patient DescribeStreamSummary retries (minutes) to be reported.
PROBE_RETRY = RetrySettings(max_retries=2, base=0.2, max=1.0)

_Client = TypeVar("_Client", KinesisClient, DynamoDBClient)

CONNECTION_HELP = """\
connection: --endpoint-url URL (default: AWS's endpoint for --region), --region (default
  us-east-1), --no-verify (skip TLS verification, for the local server's self-signed
  certificate). Credentials come from botocore's usual chain (AWS_ACCESS_KEY_ID and
  AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ...); the local server accepts any, e.g. local/local.
"""


class UsageError(Exception):
    """A user error the command line reports in one line (exit status 2)."""


def connection_flags(parser: argparse.ArgumentParser) -> None:
    """``--endpoint-url``, ``--region`` and ``--no-verify``, as every command takes them."""
    parser.add_argument("--endpoint-url", help="the Kinesis endpoint (default: AWS for --region)")
    parser.add_argument("--region", default="us-east-1", help="AWS region (default us-east-1)")
    parser.add_argument(
        "--no-verify", action="store_true", help="do not verify TLS certificates (local servers)"
    )


async def open_client(client: _Client) -> _Client:
    """``client`` opened, or a usage error when there are no credentials."""
    try:
        await client.__aenter__()
    except errors.ConfigError as exc:
        if str(exc).startswith("credentials"):
            raise UsageError(
                "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "(or AWS_PROFILE); for a local server any values do, e.g. local and local"
            ) from exc
        raise
    return client


def unreachable_cause(exc: errors.TransportError) -> str:
    """Why the endpoint was not reached, in the client's words ("connection refused", "no
    answer within 3 s") when it gave up before first contact, else the error's message."""
    return exc.cause if isinstance(exc, errors.EndpointUnreachableError) else exc.message


async def first_call(client: KinesisClient, call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """``call``'s result, or a one-line usage error when the endpoint cannot be reached or
    refuses the credentials (the failures of a command's first call, which a person fixes)."""
    try:
        return await call
    except errors.TransportError as exc:
        hint = (
            "pass --no-verify for a self-signed certificate (the local server's)"
            if "CERTIFICATE_VERIFY_FAILED" in str(exc)
            else "is the server running? check --endpoint-url"
        )
        raise UsageError(
            f"cannot reach Kinesis at {client.endpoint_url} ({unreachable_cause(exc)}); {hint}"
        ) from None
    except errors.AccessDeniedError as exc:
        raise UsageError(
            f"access denied ({exc}); check the credentials and their permissions"
        ) from None


async def describe(client: KinesisClient, stream: str, region: str) -> dict[str, Any]:
    """The stream's ``StreamDescriptionSummary``, asked quickly (:data:`PROBE_RETRY`); a
    stream that does not exist is a one-line usage error saying how to create it."""
    try:
        reply = await first_call(
            client,
            client.call("DescribeStreamSummary", stream_params(stream), retry=PROBE_RETRY),
        )
    except errors.ResourceNotFoundError:
        raise UsageError(
            f"stream {stream!r} not found at {client.endpoint_url} (region {region}); create "
            f"it first ('kinesis-actors create-stream --stream {stream} --shard-count 1'), "
            "or check --stream, --region and --endpoint-url"
        ) from None
    summary: dict[str, Any] = reply["StreamDescriptionSummary"]
    return summary
