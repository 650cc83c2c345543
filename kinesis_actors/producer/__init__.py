"""The producer: a bounded queue with backpressure, KPL aggregation, per-shard pacing, retries.

:class:`Producer` is the public face; :class:`ProducerConfig` its settings; ``put`` returns a
:class:`PutHandle` that settles to a :class:`PutResult`, ``put_many`` :class:`PutHandles`, one
per record (:func:`arrow_records` turns Arrow columns into its records). The policies
underneath are sans-IO: :class:`ShardRateLimiter` paces each shard, and the private pipeline
turns accepted records into PutRecords calls (ordering domains per key, lanes per shard,
aggregates per lane).
"""

from ._arrow import arrow_records
from ._calls import (
    DEFAULT_LINGER,
    DEFAULT_MAX_CALL_BYTES,
    PUT_RECORDS_MAX_BYTES,
    PUT_RECORDS_MAX_RECORDS,
)
from ._config import ProducerConfig
from ._handle import PutHandle, PutHandles, PutResult, fail_unsent
from ._metrics import ProducerMetrics
from ._producer import Producer
from ._ratelimit import ShardRateLimiter, ShardStats, TokenBucket
from ._stream import StreamInfo, describe_stream

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_CALL_BYTES",
    "PUT_RECORDS_MAX_BYTES",
    "PUT_RECORDS_MAX_RECORDS",
    "Producer",
    "ProducerConfig",
    "ProducerMetrics",
    "PutHandle",
    "PutHandles",
    "PutResult",
    "ShardRateLimiter",
    "ShardStats",
    "StreamInfo",
    "TokenBucket",
    "arrow_records",
    "describe_stream",
    "fail_unsent",
]
