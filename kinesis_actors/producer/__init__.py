"""The producer: sans-IO policies for now; the Producer facade comes in a later issue.

:class:`Collector` groups records into PutRecords calls; :class:`ShardRateLimiter` keeps each
predicted shard within its write limits and slows only the shards that are throttled.
"""

from ._collector import (
    DEFAULT_LINGER,
    DEFAULT_MAX_CALL_BYTES,
    PUT_RECORDS_MAX_BYTES,
    PUT_RECORDS_MAX_RECORDS,
    Batch,
    Collector,
)
from ._ratelimit import ShardRateLimiter, ShardStats, TokenBucket

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_CALL_BYTES",
    "PUT_RECORDS_MAX_BYTES",
    "PUT_RECORDS_MAX_RECORDS",
    "Batch",
    "Collector",
    "ShardRateLimiter",
    "ShardStats",
    "TokenBucket",
]
