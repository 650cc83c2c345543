"""Building the producer's sans-IO pipeline from its configuration and its stream."""

from __future__ import annotations

from ._calls import PUT_RECORDS_MAX_RECORDS
from ._config import ProducerConfig, QueueLimits
from ._pipeline import Acknowledge, Pipeline, Settle
from ._ratelimit import ShardRateLimiter
from ._stream import StreamInfo

__all__ = ["new_pipeline"]


def new_pipeline(
    config: ProducerConfig,
    limits: QueueLimits,
    info: StreamInfo,
    settle: Settle,
    acknowledge: Acknowledge | None = None,
) -> Pipeline:
    """A pipeline paced for ``info``'s shards that settles records through ``settle``.

    ``limits`` are the queue's (see :func:`~._config.queue_limits`). A stream with ``AUTO``
    record distribution has one lane for the whole stream, paced at
    the sum of its open shards' limits. A call is "full" (sent without waiting for
    ``linger``) at half the queue limits, so that the queue keeps filling the next call.
    """
    scale = 1.0
    if info.record_distribution == "AUTO":
        scale = float(max(1, info.open_shards))
    limiter = ShardRateLimiter(
        records_per_s=1000 * scale,
        bytes_per_s=1_048_576 * scale,
        rate_limit=config.rate_limit,
        max_record_bytes=info.max_record_bytes,
    )
    max_call_bytes = max(config.max_call_bytes, info.max_record_bytes)
    full_records = max(1, limits.records // 2)
    if not config.aggregation:
        full_records = min(PUT_RECORDS_MAX_RECORDS, full_records)
    return Pipeline(
        limiter=limiter,
        settle=settle,
        acknowledge=acknowledge,
        aggregation=config.aggregation,
        aggregation_max_bytes=config.aggregation_max_bytes,
        max_call_records=PUT_RECORDS_MAX_RECORDS,
        max_call_bytes=max_call_bytes,
        full_records=full_records,
        full_bytes=max(1, min(max_call_bytes, limits.nbytes // 2)),
        linger=config.linger,
        preserve_order=config.preserve_order,
        retry_base=config.retry_base,
        retry_max=config.retry_max,
        record_ttl=config.record_ttl,
        max_unknown_outcomes=config.max_unknown_outcomes,
    )
