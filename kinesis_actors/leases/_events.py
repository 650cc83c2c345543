"""What the coordinator tells its user, and its statistics: frozen values."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LeaseAcquired", "LeaseEvent", "LeaseHandoff", "LeaseLost", "LeaseStats"]


@dataclass(frozen=True, slots=True)
class LeaseAcquired:
    """This worker holds the shard's lease and may read the shard now (its parents, if any,
    are finished).

    ``checkpoint`` and ``sub_sequence`` are the lease's checkpoint, the KCL's extended
    sequence number of the last processed user record: a sequence number (resume after it;
    with a ``sub_sequence`` above 0 inside a KPL aggregate, after that user record), or
    ``TRIM_HORIZON`` / ``LATEST`` / ``AT_TIMESTAMP`` for a shard not read yet (the timestamp
    is the consumer's own configuration, as in the KCL). Never ``SHARD_END``: finished
    shards are not handed out. ``parents`` are the shard's parents; ``previous_owner`` the
    worker it was taken from, if any.

    ``latest_pinned_at`` (epoch milliseconds) is set for a ``LATEST`` lease that an earlier
    owner started reading without checkpointing: read from that time (AT_TIMESTAMP), not
    the tip, or the records that arrived since are skipped. None for the lease's first
    reader (the coordinator pinned the lease to its start before handing it out).
    """

    stream: str
    shard_id: str
    checkpoint: str
    sub_sequence: int
    parents: tuple[str, ...] = ()
    previous_owner: str | None = None
    latest_pinned_at: int | None = None


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """This worker no longer holds the shard's lease: stop reading it at once.

    ``reason`` is ``"taken"`` (a renewal's or a checkpoint's condition failed: another worker
    took it), ``"expired"`` (no renewal succeeded for ``failover_time``: others may take it),
    ``"released"`` (handed over by :meth:`LeaseCoordinator.release_all`, or released by
    the coordinator when a :class:`LeaseHandoff` whose ask was withdrawn was not answered
    in time) or ``"handed over"`` (a :class:`LeaseHandoff` not answered in time).
    """

    stream: str
    shard_id: str
    reason: str = "taken"


@dataclass(frozen=True, slots=True)
class LeaseHandoff:
    """Another worker (``to``) asked for this lease, to even the shares: stop reading the
    shard, and once what was delivered is committed, hand it over with
    :meth:`LeaseCoordinator.hand_over` and its final checkpoint; the new owner resumes
    exactly there (no duplicate). Until then the lease is still held and renewed, and
    commits are noted as usual. Not handed over within ``LeaseConfig.handoff_timeout``, the
    coordinator hands it over with the last noted checkpoint and sends :class:`LeaseLost`
    (``"handed over"``). If the asker leaves first (its ``release_all`` withdraws the ask),
    the answer releases the lease at that checkpoint instead, for any worker to take."""

    stream: str
    shard_id: str
    to: str


LeaseEvent = LeaseAcquired | LeaseLost | LeaseHandoff


@dataclass(frozen=True, slots=True)
class LeaseStats:
    """A snapshot of one coordinator's lease protocol.

    ``held`` leases now (``ready`` of them handed to the reader, the others waiting on their
    parents); counts since start: ``taken`` (free or expired leases taken), ``stolen`` (taken
    from a live worker to balance), ``lost``, ``released``, ``renewals`` (successful),
    ``checkpoints`` (written), ``leases_created`` (by shard sync), ``shard_syncs``,
    ``table_calls`` (every DynamoDB request), ``replies_settled`` (writes whose condition
    failed on the client's retry and that a read showed had landed: a lost reply),
    ``restarts`` (of a loop that crashed on something unexpected), ``transient_errors``
    (table or stream calls that failed after the client's retries: the round ran again),
    ``table_retries`` / ``table_throttled`` (the DynamoDB client's own retries and throttled
    attempts), ``handoffs_asked`` / ``handoffs_received`` (asked of other workers / handed
    to us), ``handoffs_withdrawn`` (asks taken back, or leases handed over released, by
    ``release_all``) and ``handoffs_given``; ``released`` counts the leases released by
    ``release_all`` and those released because the ask for them was withdrawn;
    ``renewal_latency_last`` / ``_max`` in seconds (None before the first renewal);
    ``workers``: distinct live owners seen at the last scan, this worker included;
    ``leases``: unfinished leases of our streams at the last scan; ``listings``: full
    listings of the table by take rounds (a watcher lists it every other round, another worker
    about once a failover time); ``watching``: whether this worker is a watcher by its last
    listing.
    """

    worker_id: str
    held: int = 0
    ready: int = 0
    taken: int = 0
    stolen: int = 0
    lost: int = 0
    released: int = 0
    renewals: int = 0
    checkpoints: int = 0
    leases_created: int = 0
    shard_syncs: int = 0
    table_calls: int = 0
    replies_settled: int = 0
    restarts: int = 0
    transient_errors: int = 0
    table_retries: int = 0
    table_throttled: int = 0
    handoffs_asked: int = 0
    handoffs_withdrawn: int = 0
    handoffs_received: int = 0
    handoffs_given: int = 0
    renewal_latency_last: float | None = None
    renewal_latency_max: float | None = None
    workers: int = 1
    leases: int = 0
    listings: int = 0
    watching: bool = True
