"""Shard discovery: one paginated ListShards per stream (lessons 9 and 10).

ListShards, not DescribeStream (10 TPS per account, 100 shards per page). Every page is
followed with its NextToken, so any shard count works; an expired token starts the listing
over. The consumer calls this once per round for all of its streams, every
``shard_discovery_interval`` seconds with jitter, and early when a shard ends with children
it has not seen.
"""

from __future__ import annotations

from typing import Any

from .. import errors
from ..client import KinesisClient
from ._shards import ShardInfo

__all__ = ["list_shards"]

#: Restarts of a listing whose pagination token expired before giving up.
_MAX_TOKEN_RESTARTS = 3


async def list_shards(
    client: KinesisClient, stream: str, page_size: int
) -> tuple[list[ShardInfo], int]:
    """Every shard of ``stream`` (open and closed, still retained), and the calls it took."""
    calls = 0
    for attempt in range(_MAX_TOKEN_RESTARTS + 1):
        shards: list[ShardInfo] = []
        params: dict[str, Any] = {"StreamName": stream, "MaxResults": page_size}
        try:
            while True:
                calls += 1
                page = await client.call("ListShards", params)
                shards.extend(ShardInfo.from_listing(stream, shard) for shard in page["Shards"])
                token = page.get("NextToken")
                if not token:
                    return shards, calls
                params = {"NextToken": token, "MaxResults": page_size}
        except errors.ExpiredIteratorError:
            if attempt == _MAX_TOKEN_RESTARTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
