"""What the commands share: the user-error type, the connection flags and their help, the
quick first call, and opening a client with a one-line error when there are no credentials."""

from __future__ import annotations

import argparse
from typing import TypeVar

from .. import errors
from ..client import DynamoDBClient, KinesisClient, RetrySettings

__all__ = ["CONNECTION_HELP", "PROBE_RETRY", "UsageError", "connection_flags", "open_client"]

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
