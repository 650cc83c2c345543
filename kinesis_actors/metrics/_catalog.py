"""Which instruments exist, and how a snapshot becomes their data points (sans-IO).

Every figure comes from a frozen snapshot the library already takes
(``Producer.statistics()``, ``Consumer.statistics()``, ``KinesisClient.statistics()``), read
as it is; nothing here reads a clock, awaits or imports OpenTelemetry, so an exporter for
another system can reuse the table, and the tests check it without one.

Names follow OpenTelemetry's conventions: dotted lowercase under ``kinesis_actors.``, no unit
in the name (the unit says it: ``s``, ``By``, or an annotation such as ``{record}``), no
name that is also the namespace of another, durations in seconds. Attributes: ``stream`` on
everything the producer and the consumer's shards report, ``shard`` on the consumer's
per-shard figures, ``cloud.region`` on the client's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from ..client import ClientStats
from ..consumer import ConsumerStatistics
from ..producer import ProducerMetrics

__all__ = [
    "ATTRIBUTES",
    "INSTRUMENTS",
    "InstrumentKind",
    "InstrumentSpec",
    "Point",
    "client_points",
    "consumer_points",
    "producer_points",
]

InstrumentKind = Literal["counter", "up_down_counter", "gauge"]
"""OpenTelemetry's asynchronous kinds: a monotonic total, an additive level, a sample."""


@dataclass(frozen=True, slots=True)
class InstrumentSpec:
    """One instrument: its name, kind, unit, what it means and the attributes it carries."""

    name: str
    kind: InstrumentKind
    unit: str
    description: str
    attributes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Point:
    """One observation: an instrument's value for one set of attributes."""

    name: str
    value: int | float
    attributes: Mapping[str, str]


_P = "kinesis_actors.producer."
_C = "kinesis_actors.consumer."
_K = "kinesis_actors.client."
_STREAM = ("stream",)
_SHARD = ("stream", "shard")
_REGION = ("cloud.region",)

# A snapshot field and its instrument's name (after the prefix), kind, unit and description.
_Row = tuple[str, str, InstrumentKind, str, str]


def _table(
    prefix: str, attributes: tuple[str, ...], *rows: _Row
) -> tuple[tuple[str, InstrumentSpec], ...]:
    return tuple(
        (field, InstrumentSpec(prefix + name, kind, unit, text, attributes))
        for field, name, kind, unit, text in rows
    )


# (snapshot field, instrument) for the snapshots whose fields map one to one.
_PRODUCER = _table(
    _P,
    _STREAM,
    ("outstanding_records", "queue.records", "up_down_counter", "{record}",
     "Records accepted by put and not yet settled (in flight included)."),
    ("outstanding_bytes", "queue.size", "up_down_counter", "By",
     "Bytes (data and partition keys) accepted and not yet settled."),
    ("peak_outstanding_records", "queue.peak_records", "gauge", "{record}",
     "The most records the queue has held at once."),
    ("peak_outstanding_bytes", "queue.peak_size", "gauge", "By",
     "The most bytes the queue has held at once."),
    ("backpressure_cycles", "backpressure.waits", "counter", "{put}",
     "put calls that waited for room in the queue."),
    ("backpressure_seconds", "backpressure.time", "counter", "s",
     "Time put calls spent waiting for room, in total."),
    ("records_put", "records.accepted", "counter", "{record}",
     "Records accepted by put."),
    ("records_sent", "records.sent", "counter", "{record}",
     "Records the service acknowledged."),
    ("records_failed", "records.failed", "counter", "{record}",
     "Records given up with an error (each one reached its handle)."),
    ("retries", "records.retried", "counter", "{record}",
     "Records sent again after a retryable failure."),
    ("throttled", "records.throttled", "counter", "{record}",
     "Kinesis records the service refused for rate (an aggregate counts once)."),
    ("mispredicted", "records.mispredicted", "counter", "{record}",
     "Acknowledgements that landed on another shard than predicted (a reshard)."),
    ("kinesis_records_sent", "kinesis_records.sent", "counter", "{record}",
     "Kinesis records acknowledged; a KPL aggregate counts once."),
    ("bytes_sent", "data.sent", "counter", "By",
     "Data and partition keys of the acknowledged Kinesis records (aggregates as encoded)."),
    ("calls", "put_records.calls", "counter", "{call}",
     "PutRecords calls answered."),
    ("failed_calls", "put_records.failures", "counter", "{call}",
     "PutRecords calls that failed as a whole."),
    ("in_flight_calls", "put_records.in_flight", "up_down_counter", "{call}",
     "PutRecords calls awaiting their answer."),
    ("shard_map_refreshes", "shard_map.refreshes", "counter", "{refresh}",
     "Shard listings after a misprediction."),
    ("sender_crashes", "senders.crashes", "counter", "{crash}",
     "PutRecords calls whose sender actor crashed; it was restarted, the records resent."),
    ("unreachable_seconds", "endpoint.unreachable_time", "gauge", "s",
     "How long no PutRecords call has got an answer from the endpoint; 0 while it answers."),
    ("misplaced_records", "records.misplaced", "counter", "{record}",
     "Records an aggregate in flight across a split put on a child not owning their key."),
)  # fmt: skip

_SHARD_FIELDS = _table(
    _C,
    _SHARD,
    ("reads", "reads", "counter", "{read}",
     "GetRecords calls answered, or SubscribeToShard events received."),
    ("empty_reads", "empty_reads", "counter", "{read}",
     "Reads that returned no records."),
    ("throttles", "throttles", "counter", "{throttle}",
     "Reads refused for rate after the client's own retries."),
    ("transient_errors", "transient_errors", "counter", "{error}",
     "Reads that failed and were tried again (5xx, transport, exception events)."),
    ("expired_iterators", "expired_iterators", "counter", "{iterator}",
     "Shard iterators that expired and were renewed."),
    ("iterators", "iterators", "counter", "{iterator}",
     "GetShardIterator calls."),
    ("records", "records", "counter", "{record}",
     "Kinesis records read; a KPL aggregate counts once."),
    ("user_records", "user_records", "counter", "{record}",
     "User records delivered, aggregates expanded."),
    ("aggregated_records", "aggregated_records", "counter", "{record}",
     "Kinesis records that were KPL aggregates."),
    ("bytes", "data.read", "counter", "By",
     "Data read."),
    ("last_read_records", "last_read.records", "gauge", "{record}",
     "Kinesis records in the latest read."),
    ("last_read_bytes", "last_read.size", "gauge", "By",
     "Data in the latest read."),
    ("batches", "batches", "counter", "{batch}",
     "Batches built for the application."),
    ("buffer_depth", "buffered_batches", "up_down_counter", "{batch}",
     "Batches read and not yet taken by the application."),
    ("restarts", "restarts", "counter", "{restart}",
     "Times the shard's reader was restarted by its supervisor."),
    ("events", "events", "counter", "{event}",
     "Enhanced Fan-Out: SubscribeToShard events, empty ones included."),
    ("subscriptions", "subscriptions", "counter", "{subscription}",
     "Enhanced Fan-Out: subscriptions opened."),
    ("backpressured_seconds", "backpressure.time", "counter", "s",
     "Time the reader waited because the application had not taken its batches."),
    ("not_found", "not_found", "counter", "{error}",
     "ResourceNotFound on a shard the listing still shows (each retried)."),
    ("poison_records", "poison_records", "counter", "{record}",
     "Malformed records skipped (poison_records='skip')."),
    ("starvations", "starvations", "counter", "{starvation}",
     "Enhanced Fan-Out: times the shard met only ResourceInUse for too long."),
    ("fallbacks", "fallbacks", "counter", "{fallback}",
     "Enhanced Fan-Out: times the shard was read by GetRecords while the service held it."),
    ("fallback_reads", "fallback.reads", "counter", "{read}",
     "Enhanced Fan-Out: GetRecords calls made while the service held the shard (also in reads)."),
    ("fallback_seconds", "fallback.time", "counter", "s",
     "Enhanced Fan-Out: time the shard was read by GetRecords while the service held it."),
)  # fmt: skip

_LAG = InstrumentSpec(
    _C + "lag",
    "gauge",
    "s",
    "How far the shard's latest read was behind the tip of the stream (Kinesis' "
    "MillisBehindLatest, in seconds); absent until the first read.",
    _SHARD,
)
_RESUBSCRIPTIONS = InstrumentSpec(
    _C + "resubscriptions",
    "counter",
    "{subscription}",
    "Enhanced Fan-Out: subscriptions opened again, by cause (renewal, end, error, watchdog, "
    "resource_in_use).",
    (*_SHARD, "cause"),
)
_STATE = InstrumentSpec(
    _C + "shards",
    "up_down_counter",
    "{shard}",
    "Shards read by this consumer, by state (a ShardState: waiting, reading, starved, polling, "
    "ended, finished, failed, lost); each shard counts 1 in its current state.",
    (*_SHARD, "state"),
)
_WAITING = InstrumentSpec(
    _C + "waiting_shards",
    "up_down_counter",
    "{shard}",
    "Shards listed but not yet readable (their parents are not finished).",
    _STREAM,
)
_CONSUMER_TOTALS: tuple[tuple[str, InstrumentSpec], ...] = (
    ("discoveries", InstrumentSpec(
        _C + "discoveries", "counter", "{discovery}", "Shard discovery rounds.", ())),
    ("list_shards_calls", InstrumentSpec(
        _C + "list_shards.calls", "counter", "{call}", "ListShards calls.", ())),
    ("discovery_failures", InstrumentSpec(
        _C + "discovery_failures", "counter", "{discovery}", "Discovery rounds that failed.",
        ())),
)  # fmt: skip

# ConsumerStatistics.leases (a LeaseStats) with a lease table; None without.
_LEASES = _table(
    _C + "leases.",
    (),
    ("held", "held", "up_down_counter", "{lease}",
     "Leases this worker holds."),
    ("ready", "ready", "up_down_counter", "{lease}",
     "Held leases whose shards are being read (the others wait on their parents)."),
    ("taken", "taken", "counter", "{lease}",
     "Free or expired leases this worker took."),
    ("stolen", "stolen", "counter", "{lease}",
     "Leases this worker took from a live worker to even the shares."),
    ("lost", "lost", "counter", "{lease}",
     "Leases this worker lost (taken by another worker, or not renewed in time)."),
    ("released", "released", "counter", "{lease}",
     "Leases this worker handed over (a clean stop, or a finished shard)."),
    ("renewals", "renewals", "counter", "{renewal}",
     "Successful lease renewals."),
    ("checkpoints", "checkpoints", "counter", "{checkpoint}",
     "Checkpoints written to the lease table."),
    ("leases_created", "created", "counter", "{lease}",
     "Leases this worker created for new shards (shard sync)."),
    ("shard_syncs", "shard_syncs", "counter", "{sync}",
     "Shard sync rounds (ListShards against the table)."),
    ("table_calls", "table.calls", "counter", "{call}",
     "DynamoDB requests to the lease table."),
    ("replies_settled", "replies_settled", "counter", "{write}",
     "Writes whose reply was lost, found landed by reading the lease back."),
    ("restarts", "restarts", "counter", "{restart}",
     "Restarts of a coordinator loop that crashed on something unexpected."),
    ("transient_errors", "transient_errors", "counter", "{error}",
     "Lease table or stream calls that failed after the client's retries (retried next round)."),
    ("table_retries", "table.retries", "counter", "{attempt}",
     "The lease table client's retried attempts."),
    ("table_throttled", "table.throttled_attempts", "counter", "{attempt}",
     "The lease table client's throttled attempts."),
    ("handoffs_asked", "handoffs.asked", "counter", "{lease}",
     "Leases this worker asked a live owner to hand over (to even the shares)."),
    ("handoffs_received", "handoffs.received", "counter", "{lease}",
     "Leases handed over to this worker at their owner's checkpoint."),
    ("handoffs_given", "handoffs.given", "counter", "{lease}",
     "Leases this worker handed over when another worker asked."),
    ("handoffs_withdrawn", "handoffs.withdrawn", "counter", "{lease}",
     "Handoffs this worker asked for and took back as it stopped (release_all)."),
    ("workers", "workers", "gauge", "{worker}",
     "Live workers seen in the table at the last scan, this one included."),
    ("leases", "unfinished", "gauge", "{lease}",
     "Unfinished leases of the consumer's streams at the last scan."),
    ("listings", "table.listings", "counter", "{listing}",
     "Full listings of the lease table by take rounds (every other round on a watcher)."),
    ("watching", "watching", "gauge", "{worker}",
     "1 while this worker is one of the two watchers (which list the table most often), else 0."),
)  # fmt: skip
_RENEWAL_LATENCY = (
    ("renewal_latency_last", InstrumentSpec(
        _C + "leases.renewal.latency", "gauge", "s",
        "The latest renewal round's time; absent before the first.", ())),
    ("renewal_latency_max", InstrumentSpec(
        _C + "leases.renewal.latency_max", "gauge", "s",
        "The longest renewal round so far; absent before the first.", ())),
)  # fmt: skip

_CLIENT = _table(
    _K,
    _REGION,
    ("calls", "calls", "counter", "{call}", "Operations called (each may take several attempts)."),
    ("attempts", "attempts", "counter", "{attempt}", "HTTP requests sent, retries included."),
    ("retries", "retries", "counter", "{attempt}", "Attempts that were retries."),
    ("throttled", "throttled_attempts", "counter", "{attempt}", "Attempts the service throttled."),
    ("transport_errors", "transport_errors", "counter", "{error}",
     "Attempts that failed in transport (connect, TLS, reset, timeout)."),
    ("subscriptions", "subscriptions", "counter", "{subscription}", "SubscribeToShard calls."),
    ("malformed_replies", "malformed_replies", "counter", "{reply}",
     "2xx replies or events that could not be believed (MalformedReplyError)."),
)  # fmt: skip

INSTRUMENTS: tuple[InstrumentSpec, ...] = (
    *(spec for _, spec in _PRODUCER),
    _LAG,
    *(spec for _, spec in _SHARD_FIELDS),
    _RESUBSCRIPTIONS,
    _STATE,
    _WAITING,
    *(spec for _, spec in _CONSUMER_TOTALS),
    *(spec for _, spec in _LEASES),
    *(spec for _, spec in _RENEWAL_LATENCY),
    *(spec for _, spec in _CLIENT),
)
"""Every instrument, in the order an exporter should create them."""

ATTRIBUTES = frozenset(key for spec in INSTRUMENTS for key in spec.attributes)
"""The attribute keys the instruments set themselves; a caller's extra ones must differ."""


def producer_points(metrics: ProducerMetrics, attributes: Mapping[str, str]) -> Iterator[Point]:
    """One point per producer instrument, tagged with the producer's stream."""
    for field, spec in _PRODUCER:
        yield Point(spec.name, getattr(metrics, field), attributes)


def client_points(stats: ClientStats, attributes: Mapping[str, str]) -> Iterator[Point]:
    """One point per client instrument."""
    for field, spec in _CLIENT:
        yield Point(spec.name, getattr(stats, field), attributes)


def consumer_points(
    statistics: ConsumerStatistics, attributes: Mapping[str, str]
) -> Iterator[Point]:
    """Points for ``Consumer.statistics()``: per shard, then per stream, then the consumer's.

    A shard that has not been read yet has no lag point rather than a made-up one. With a
    lease table, ``statistics.leases`` (a ``LeaseStats``) adds the lease protocol's figures.
    """
    for (stream, shard_id), shard in statistics.shards.items():
        tags = {**attributes, "stream": stream, "shard": shard_id}
        behind = shard.millis_behind_latest
        if behind is not None:
            yield Point(_LAG.name, behind / 1000, tags)
        for field, spec in _SHARD_FIELDS:
            yield Point(spec.name, getattr(shard, field), tags)
        for cause, count in shard.resubscriptions.items():
            yield Point(_RESUBSCRIPTIONS.name, count, {**tags, "cause": cause})
        yield Point(_STATE.name, 1, {**tags, "state": str(shard.state)})
    # Every stream the snapshot names gets a point, so a count that fell to 0 says 0.
    for stream, count in statistics.waiting_by_stream().items():
        yield Point(_WAITING.name, count, {**attributes, "stream": stream})
    for field, spec in _CONSUMER_TOTALS:
        yield Point(spec.name, getattr(statistics, field), attributes)
    leases = statistics.leases
    if leases is not None:
        for field, spec in _LEASES:
            value = getattr(leases, field)
            yield Point(spec.name, int(value) if isinstance(value, bool) else value, attributes)
        for field, spec in _RENEWAL_LATENCY:
            latency = getattr(leases, field)
            if latency is not None:
                yield Point(spec.name, latency, attributes)
