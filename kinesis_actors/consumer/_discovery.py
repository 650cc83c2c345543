"""Shard discovery: one paginated ListShards per stream.

ListShards, not DescribeStream (10 TPS per account, 100 shards per page). Every page is
followed with its NextToken, so any shard count works; an expired token starts the listing
over. The consumer calls this once per round for all of its streams, every
``shard_discovery_interval`` seconds with jitter, and early when a shard ends with children
it has not seen. Each page is checked (``_replies``): a garbled one is a typed
``MalformedReplyError``, never a ``KeyError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import errors
from ..client import KinesisClient, StreamRef, stream_params
from ._replies import malformed
from ._shards import ShardInfo

__all__ = ["DiscoveryFailures", "list_shards", "list_shards_page"]

#: Periodic discovery rounds that may fail in a row before the consumer fails.
MAX_DISCOVERY_FAILURES = 5


class DiscoveryFailures:
    """The policy for a failed periodic discovery round (after the client's retries).

    A failed round is a warning, and the next round tries again: the shards being read need
    no discovery, only new children do, so one bad ListShards must not stop a consumer. But
    ``limit`` rounds failed in a row fail the consumer with the last error: a consumer that
    can no longer see its streams must not go on quietly, never reading their new shards.
    """

    def __init__(self, limit: int = MAX_DISCOVERY_FAILURES) -> None:
        self.limit = limit
        self.total = 0
        self._streak = 0

    def failed(self) -> bool:
        """One more failed round: True if the consumer should give up."""
        self.total += 1
        self._streak += 1
        return self._streak >= self.limit

    @property
    def streak(self) -> int:
        return self._streak

    def succeeded(self) -> None:
        self._streak = 0


#: Restarts of a listing whose pagination token expired before giving up.
_MAX_TOKEN_RESTARTS = 3


def list_shards_page(stream: str, reply: Any) -> tuple[list[ShardInfo], str | None]:
    """One ListShards page: its shards (each with a ``ShardId``) and the next token."""
    operation = "ListShards"
    shards = reply.get("Shards") if isinstance(reply, Mapping) else None
    if not isinstance(shards, list):
        raise malformed(operation, "no 'Shards' list", reply)
    infos: list[ShardInfo] = []
    for shard in shards:
        shard_id = shard.get("ShardId") if isinstance(shard, Mapping) else None
        if not isinstance(shard_id, str) or not shard_id:
            raise malformed(operation, "a shard without a 'ShardId'", reply)
        if not isinstance(shard.get("SequenceNumberRange", {}), Mapping):
            raise malformed(operation, f"{shard_id}: a 'SequenceNumberRange' not an object", reply)
        infos.append(ShardInfo.from_listing(stream, shard))
    token = reply.get("NextToken")
    if token is not None and not isinstance(token, str):
        raise malformed(operation, "a 'NextToken' that is not a string", reply)
    return infos, token or None


async def list_shards(
    client: KinesisClient, stream: str, page_size: int
) -> tuple[list[ShardInfo], int]:
    """Every shard of ``stream`` (open and closed, still retained), and the calls it took.

    ``stream`` is a name or an ARN (listed with ``StreamARN``); the shards carry its name.
    """
    name = StreamRef.parse(stream).name
    calls = 0
    for attempt in range(_MAX_TOKEN_RESTARTS + 1):
        shards: list[ShardInfo] = []
        params: dict[str, Any] = {**stream_params(stream), "MaxResults": page_size}
        try:
            while True:
                calls += 1
                page, token = list_shards_page(name, await client.call("ListShards", params))
                shards.extend(page)
                if token is None:
                    return shards, calls
                params = {"NextToken": token, "MaxResults": page_size}
        except errors.ExpiredIteratorError:
            if attempt == _MAX_TOKEN_RESTARTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
