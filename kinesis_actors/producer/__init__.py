"""The producer: a bounded queue with backpressure, KPL aggregation, per-shard pacing, retries.

:class:`Producer` is the public face; :class:`ProducerConfig` its settings; ``put`` returns a
:class:`PutHandle` that settles to a :class:`PutResult`. The policies underneath are sans-IO:
:class:`Collector` limits, :class:`ShardRateLimiter` pacing, and the private pipeline that
turns accepted records into PutRecords calls.
"""

from ._collector import (
    DEFAULT_LINGER,
    DEFAULT_MAX_CALL_BYTES,
    PUT_RECORDS_MAX_BYTES,
    PUT_RECORDS_MAX_RECORDS,
    Batch,
    Collector,
)
from ._config import ProducerConfig
from ._handle import PutHandle, PutResult
from ._metrics import ProducerMetrics
from ._producer import Producer
from ._ratelimit import ShardRateLimiter, ShardStats, TokenBucket

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_CALL_BYTES",
    "PUT_RECORDS_MAX_BYTES",
    "PUT_RECORDS_MAX_RECORDS",
    "Batch",
    "Collector",
    "Producer",
    "ProducerConfig",
    "ProducerMetrics",
    "PutHandle",
    "PutResult",
    "ShardRateLimiter",
    "ShardStats",
    "TokenBucket",
]
