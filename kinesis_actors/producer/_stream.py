"""What the producer learns about its stream at open and when a reshard is noticed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..client import stream_params
from ..records import ShardMap

if TYPE_CHECKING:
    from ..client import KinesisClient

__all__ = ["DEFAULT_MAX_RECORD_BYTES", "StreamInfo", "describe_stream", "list_open_shards"]

DEFAULT_MAX_RECORD_BYTES = 1024 * 1024


class StreamInfo(NamedTuple):
    """The stream's record limit, how it places records, and its open shard count."""

    max_record_bytes: int
    record_distribution: str
    open_shards: int


async def describe_stream(client: KinesisClient, stream: str) -> StreamInfo:
    """DescribeStreamSummary: raises ResourceNotFoundError for a stream that does not exist.

    ``MaxRecordSizeInKiB`` and ``RecordDistributionStrategy`` are absent on older endpoints
    (and on the local test server): then 1 MiB and ``USER_PARTITION_KEY``, the defaults.
    ``stream`` is a name or an ARN (checked by ``StreamRef.parse``).
    """
    response = await client.call("DescribeStreamSummary", stream_params(stream))
    summary = response["StreamDescriptionSummary"]
    max_kib = summary.get("MaxRecordSizeInKiB")
    max_bytes = max_kib * 1024 if isinstance(max_kib, int) and max_kib > 0 else None
    return StreamInfo(
        max_record_bytes=max_bytes or DEFAULT_MAX_RECORD_BYTES,
        record_distribution=summary.get("RecordDistributionStrategy") or "USER_PARTITION_KEY",
        open_shards=int(summary.get("OpenShardCount") or 1),
    )


async def list_open_shards(
    client: KinesisClient, stream: str, page_size: int | None = None
) -> ShardMap:
    """ListShards, every page, open shards only (``ShardFilter`` AT_LATEST)."""
    shards: list[dict[str, Any]] = []
    params: dict[str, Any] = {**stream_params(stream), "ShardFilter": {"Type": "AT_LATEST"}}
    paging = {} if page_size is None else {"MaxResults": page_size}
    params.update(paging)
    while True:
        page = await client.call("ListShards", params)
        shards.extend(page.get("Shards", []))
        token = page.get("NextToken")
        if not token:
            return ShardMap.from_shards(shards)
        params = {"NextToken": token, **paging}  # the service refuses StreamName with a token
