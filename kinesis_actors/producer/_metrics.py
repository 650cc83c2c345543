"""The producer's counters, as a frozen snapshot a caller can log or export."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..runtime import SupervisorSnapshot

__all__ = ["ProducerMetrics"]


@dataclass(frozen=True, slots=True)
class ProducerMetrics:
    """A point-in-time copy of the producer's counters: what ``Producer.statistics()`` and
    ``Producer.metrics`` (the same snapshot) return.

    Queue: ``outstanding_records``/``outstanding_bytes`` are accepted and not yet settled
    (never above the queue limits, except one oversized record alone), ``peak_*`` their
    maxima, ``backpressure_cycles`` the ``put`` calls that had to wait for room and
    ``backpressure_seconds`` how long they waited in total.

    Outcomes: ``records_put`` accepted, ``records_sent`` acknowledged, ``records_failed`` given
    up with an error (never silently), ``retries`` user records sent again, ``throttled``
    Kinesis records the service refused for rate, ``mispredicted`` acknowledgements that landed
    on another shard than predicted, ``shard_map_refreshes`` the listings that followed,
    ``misplaced_records`` user records that an aggregate in flight across a split put on a
    child shard that does not own their key (the split's point fell inside the aggregate;
    their keys have records in both children, see ``docs/producer.md``, "Resharding and key
    order"), counted once the next listing shows the children.

    Calls: ``calls`` PutRecords calls answered, ``kinesis_records_sent`` Kinesis records
    acknowledged (aggregates count once), ``bytes_sent`` their data plus partition keys;
    ``records_per_kinesis_record`` and ``records_per_call`` are the averages.

    Endpoint: ``unreachable_seconds`` how long no PutRecords call has got an answer (a
    refused, reset or timed-out connection is none; any reply, even an error, is one), 0.0
    while the endpoint answers.

    Supervision: ``sender_crashes`` the calls whose sender actor crashed (a bug, not a failed
    call); each sender was restarted and the call's records sent again. ``supervision`` is
    the whole tree at the time of the snapshot (``Producer.supervision``: a tuple of one
    :class:`~kinesis_actors.runtime.SupervisorSnapshot`, empty before the producer opened).
    """

    outstanding_records: int
    outstanding_bytes: int
    peak_outstanding_records: int
    peak_outstanding_bytes: int
    backpressure_cycles: int
    backpressure_seconds: float
    records_put: int
    records_sent: int
    records_failed: int
    retries: int
    throttled: int
    calls: int
    failed_calls: int
    kinesis_records_sent: int
    bytes_sent: int
    mispredicted: int
    shard_map_refreshes: int
    in_flight_calls: int
    sender_crashes: int = 0
    unreachable_seconds: float = 0.0
    misplaced_records: int = 0
    supervision: tuple[SupervisorSnapshot, ...] = ()

    @property
    def records_per_kinesis_record(self) -> float:
        """Average user records per acknowledged Kinesis record (the aggregation factor)."""
        return self.records_sent / self.kinesis_records_sent if self.kinesis_records_sent else 0.0

    @property
    def records_per_call(self) -> float:
        """Average user records acknowledged per PutRecords call."""
        return self.records_sent / self.calls if self.calls else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Every counter and both averages as plain data (for JSON and logs); the supervision
        tree has its own ``to_dict``."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "supervision"}
        data["records_per_kinesis_record"] = self.records_per_kinesis_record
        data["records_per_call"] = self.records_per_call
        return data
