"""A shard's live counters, written by its reader and pipeline (``Consumer.statistics()``
gives frozen copies of them, ``ShardStatistics``)."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ShardMetrics", "ShardState"]


class ShardState(enum.StrEnum):
    """Where one shard's reading is; ``ShardStatistics.state`` carries it. A ``str`` whose
    value is the lower-case name, so it compares equal to it and exports as it."""

    WAITING = "waiting"
    """Not read yet: its parents are unfinished, or (in a group) its lease is not held."""
    READING = "reading"
    """Read by its reader (GetRecords, or its Enhanced Fan-Out subscription)."""
    STARVED = "starved"
    """EFO: every subscription met ResourceInUse for ``efo_starvation_warning`` seconds."""
    POLLING = "polling"
    """EFO: held by another subscription, read by GetRecords meanwhile."""
    ENDED = "ended"
    """The shard's end was read; its last batches are not all acknowledged yet."""
    FINISHED = "finished"
    """Read to its end and every batch acknowledged (or finished in the saved positions)."""
    FAILED = "failed"
    """It stopped the consumer with a typed, final error."""
    LOST = "lost"
    """Its lease went to another worker; what it buffered was dropped."""


@dataclass(slots=True)
class ShardMetrics:
    """What one shard's reader has done. Totals since the consumer opened.

    ``records`` counts Kinesis records and ``user_records`` what they expand to;
    ``aggregated_records`` the Kinesis records that were KPL aggregates. ``last_read_*`` describe
    the latest GetRecords. ``buffer_depth`` is filled in by the snapshot (``ShardStatistics``).

    Enhanced Fan-Out adds ``events`` (SubscribeToShard events, empty ones included; each is
    also a read), ``subscriptions`` (opened) and ``resubscriptions`` by cause: ``renewal``
    (the subscription's lifetime was up), ``end`` (the server ended the stream), ``error``
    (exception event or transport failure), ``watchdog`` (silence), ``resource_in_use``.
    ``backpressured_seconds`` (both modes) is the time the reader waited for a credit because
    the application had not taken the shard's batches.

    Hostile-server counters: ``not_found`` (ResourceNotFound on a shard the list
    still shows, each retried), ``poison_records`` (malformed records skipped under
    ``poison_records="skip"``), ``starvations`` (EFO: times the shard met nothing but
    ResourceInUse for ``efo_starvation_warning`` seconds). ``state`` is ``failed`` when the
    shard stopped the consumer with a typed error, ``starved`` while EFO resubscriptions keep
    meeting ResourceInUse, ``polling`` while such a shard is read by GetRecords.

    A held shard, EFO: ``fallbacks`` (times it was read by GetRecords
    after ``efo_fallback_after`` seconds of ResourceInUse), ``fallback_reads`` (those
    GetRecords calls; also in ``reads``), ``fallback_seconds`` (time so read, as of the last
    read).
    """

    state: ShardState = ShardState.WAITING
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
    events: int = 0
    subscriptions: int = 0
    resubscriptions: dict[str, int] = field(default_factory=dict)
    backpressured_seconds: float = 0.0
    not_found: int = 0
    poison_records: int = 0
    starvations: int = 0
    fallbacks: int = 0
    fallback_reads: int = 0
    fallback_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
