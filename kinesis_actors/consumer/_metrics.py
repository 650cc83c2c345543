"""Per-shard counters, as plain data (``Consumer.metrics`` returns them as dicts)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ShardMetrics"]


@dataclass(slots=True)
class ShardMetrics:
    """What one shard's reader has done. Totals since the consumer opened.

    ``records`` counts Kinesis records and ``user_records`` what they expand to;
    ``aggregated_records`` the Kinesis records that were KPL aggregates. ``last_read_*`` describe
    the latest GetRecords. ``buffer_depth`` is filled in when the snapshot is taken.
    """

    state: str = "waiting"
    millis_behind_latest: int | None = None
    reads: int = 0
    empty_reads: int = 0
    throttles: int = 0
    transient_errors: int = 0
    expired_iterators: int = 0
    iterators: int = 0
    records: int = 0
    user_records: int = 0
    aggregated_records: int = 0
    bytes: int = 0
    last_read_records: int = 0
    last_read_bytes: int = 0
    batches: int = 0
    buffer_depth: int = 0
    restarts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
