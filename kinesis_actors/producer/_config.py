"""How a :class:`Producer` buffers, aggregates, paces and retries. Validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .._validate import check_non_negative, check_positive, check_type
from ..errors import ConfigError
from ..records import DEFAULT_AGGREGATION_MAX_BYTES
from ._calls import DEFAULT_LINGER, DEFAULT_MAX_CALL_BYTES, PUT_RECORDS_MAX_BYTES

__all__ = ["ProducerConfig", "QueueLimits", "queue_limits"]

_MAX_AGGREGATE_BYTES = 10 * 1024 * 1024  # the largest record any stream accepts

QUEUE_RECORDS_PER_SHARD = 80
"""The default queue's records a shard: what makes aggregates of a few dozen records when
the producer runs flat out over 1,024 shards (measured in benchmarks.producer_cpu)."""
QUEUE_BYTES_PER_SHARD = 64 * 1024
MIN_QUEUE_RECORDS = 10_000
MIN_QUEUE_BYTES = 8 * 1024 * 1024
QUEUE_SIZED_UP_TO_SHARDS = 2_048
"""The default queue stops growing here: 163,840 records, 128 MiB."""


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Every knob of the producer, with defaults sized for one 1 MiB/s, 1,000 records/s shard.

    Queue (the backpressure):

    - ``queue_limit_records`` and ``queue_limit_bytes`` bound what has been accepted by
      ``put`` and not yet acknowledged or failed. ``None`` (the default) sizes them when the
      producer opens, from the stream's open shards: 80 records and 64 KiB a shard, at least
      10,000 records and 8 MiB (up to 125 and 128 shards), at most 163,840 records and
      128 MiB (from 2,048 shards); ``Producer.config`` then shows the numbers. At the floor
      they hold eight to ten seconds of one shard's write capacity (1,000 records/s,
      1 MiB/s) of records sent alone: enough to keep a shard busy through retries, small
      enough that a stalled stream costs megabytes, not gigabytes. They grow with the
      shards because an aggregate holds one shard's records: 10,000 records over 1,024
      shards made aggregates of 8 records and cost 2.27x the client CPU a record of 16
      shards, 80 a shard 1.31x, run flat out (docs/producer.md, "The queue sized by the
      shards"). Past 2,048 shards one process cannot fill its shards anyway, and the bound
      stays put. Sized once, at open: a reshard does not resize them. ``put`` waits while
      either is reached; a record larger than ``queue_limit_bytes`` is admitted into an
      empty queue only. With aggregation and small records the records bound is the one
      reached, and it also sizes calls: a call goes once half the queue is ready, so 10,000
      records of 100 bytes make calls of about 600 KB, not 5 MiB.
    - ``backpressure_warning_after`` (1 s): a ``put`` that waited this long logs a warning,
      at most one per ``backpressure_warning_interval`` (10 s).

    Aggregation and collection:

    - ``aggregation`` (on): pack user records predicted for the same shard into KPL aggregates
      of at most ``aggregation_max_bytes`` (51,200, the KPL default).
    - ``linger`` (0.1 s): how long a record waits for a fuller call when the stream keeps up.
    - ``max_call_bytes`` (5 MiB, like the KPL; the service allows 10 MiB) and at most 500
      records per PutRecords call.
    - ``max_in_flight_calls`` (8): PutRecords calls outstanding at once.

    Pacing and retries:

    - ``rate_limit`` (1.0): fraction of each shard's limits (1,000 records/s, 1 MiB/s) the
      client allows itself. The KPL uses 1.5 so that the service has the final say; measured
      here against an emulation of the limits, 1.5 kept 43 % of attempts throttled for no
      gain in throughput, while 1.0 reached the same 100 % of capacity with almost no
      throttles. The per-shard factor still adapts to throttles from other writers.
    - ``preserve_order`` (on): at most one Kinesis record per partition key is in flight, so a
      retried record is never overtaken by a later record of its key. With aggregation a key's
      records travel together in one aggregate and this costs little; without aggregation it
      caps each key at one record per round trip. Off, records go as fast as the limits allow
      and a retry can land after a later record of its key, as with the KPL.
    - ``retry_base`` (0.1 s) and ``retry_max`` (5 s): full-jitter backoff of a failed record
      before it is sent again. Retryable failures (throttling, 5xx, dropped connections) are
      retried until ``record_ttl``. The producer alone retries PutRecords: the client makes
      one attempt per call, whatever its retry policy says for PutRecords.
    - ``record_ttl`` (None: never give up): a record not acknowledged within this many seconds
      of ``put`` fails with :class:`~kinesis_actors.errors.RecordExpiredError`, which says how
      many attempts were made; its ``__cause__`` is the last failure. The deadline is checked
      before every attempt and while backing off, so it holds to within one call's timeout
      (a call already in flight may finish).
    - ``max_unknown_outcomes`` (3): a PutRecords call answered by a 2xx reply that cannot be
      believed (no ``Records``, a different entry count, an entry with neither a position nor
      an error) has an unknown outcome: its records may have been written. They are sent again
      (at-least-once: a consumer may see such a record more than once), until a record has met
      this many unknown outcomes; then it fails with
      :class:`~kinesis_actors.errors.MalformedReplyError`. 1 never resends an unknown outcome.
    - ``fail_on_error`` (on): a record that fails for good also fails the producer, so the next
      ``put`` or ``flush`` raises :class:`~kinesis_actors.errors.ProducerFailedError` (it
      takes no more records, so none is written after a failed one). Leaving the block
      raises it only for failures nobody retrieved: a record's error that its handle gave to
      the caller (``await handle``, ``handle.result()``, ``handle.exception()``) before the
      exit is handled, and leaves the exit alone. Off, the failure reaches only that
      record's handle and the ``records_failed`` metric, and nothing else raises.
    - ``shard_map_min_refresh_interval`` (1 s): the shard map is listed again when a record
      lands on a shard other than the predicted one, at most this often.

    Leaving:

    - ``exit_grace`` (1 s): leaving the block because of an exception (the user's, or a
      typed error of ours such as ProducerFailedError) stops taking records at once and gives
      what was accepted at most this long to be acknowledged (waiting records are sent at
      once, as by ``flush``); then every record not settled fails with
      :class:`~kinesis_actors.errors.ProducerClosedError` and the exception leaves as itself.
      A second is a round trip or more of a healthy stream, so a block that fails for a
      reason of its own loses nothing it put; a stream that throttles every call cannot hold
      the exception back (unbounded, it waited past 60 s). 0 fails them at once, as
      ``KeyboardInterrupt``, ``SystemExit`` and cancellation always do. A normal exit waits
      for every record, however long.

    Supervision:

    - ``restart_intensity`` ((5, 30.0)): the senders are supervised actors; one that crashes
      (a bug, not a failed call) is restarted and its call's records are sent again as an
      unknown outcome. More than this many restarts within this many seconds fails the
      producer with :class:`~kinesis_actors.errors.ProducerFailedError`, caused by the
      :class:`~kinesis_actors.runtime.RestartIntensityExceeded` that lists the crashes.
    """

    queue_limit_records: int | None = None
    queue_limit_bytes: int | None = None
    aggregation: bool = True
    aggregation_max_bytes: int = DEFAULT_AGGREGATION_MAX_BYTES
    linger: float = DEFAULT_LINGER
    max_call_bytes: int = DEFAULT_MAX_CALL_BYTES
    max_in_flight_calls: int = 8
    rate_limit: float = 1.0
    preserve_order: bool = True
    retry_base: float = 0.1
    retry_max: float = 5.0
    record_ttl: float | None = None
    max_unknown_outcomes: int = 3
    fail_on_error: bool = True
    backpressure_warning_after: float = 1.0
    backpressure_warning_interval: float = 10.0
    shard_map_min_refresh_interval: float = 1.0
    exit_grace: float = 1.0
    restart_intensity: tuple[int, float] = (5, 30.0)

    def __post_init__(self) -> None:
        if self.queue_limit_records is not None:
            check_positive(
                "ProducerConfig.queue_limit_records", self.queue_limit_records, integer=True
            )
        if self.queue_limit_bytes is not None:
            check_positive("ProducerConfig.queue_limit_bytes", self.queue_limit_bytes, integer=True)
        check_type("ProducerConfig.aggregation", self.aggregation, bool, "True or False")
        check_positive(
            "ProducerConfig.aggregation_max_bytes", self.aggregation_max_bytes, integer=True
        )
        if not 64 <= self.aggregation_max_bytes <= _MAX_AGGREGATE_BYTES:
            raise ConfigError(
                "ProducerConfig.aggregation_max_bytes must be between 64 and "
                f"{_MAX_AGGREGATE_BYTES}, got {self.aggregation_max_bytes!r}"
            )
        check_non_negative("ProducerConfig.linger", self.linger)
        check_positive("ProducerConfig.max_call_bytes", self.max_call_bytes, integer=True)
        if self.max_call_bytes > PUT_RECORDS_MAX_BYTES:
            raise ConfigError(
                "ProducerConfig.max_call_bytes must be at most "
                f"{PUT_RECORDS_MAX_BYTES} (the PutRecords limit), got {self.max_call_bytes!r}"
            )
        check_positive("ProducerConfig.max_in_flight_calls", self.max_in_flight_calls, integer=True)
        check_positive("ProducerConfig.rate_limit", self.rate_limit)
        check_type("ProducerConfig.preserve_order", self.preserve_order, bool, "True or False")
        check_positive("ProducerConfig.retry_base", self.retry_base)
        check_positive("ProducerConfig.retry_max", self.retry_max)
        if self.retry_max < self.retry_base:
            raise ConfigError(
                f"ProducerConfig.retry_max ({self.retry_max!r}) must be at least retry_base "
                f"({self.retry_base!r})"
            )
        if self.record_ttl is not None:
            check_positive("ProducerConfig.record_ttl", self.record_ttl)
        check_positive(
            "ProducerConfig.max_unknown_outcomes", self.max_unknown_outcomes, integer=True
        )
        check_type("ProducerConfig.fail_on_error", self.fail_on_error, bool, "True or False")
        check_positive("ProducerConfig.backpressure_warning_after", self.backpressure_warning_after)
        check_non_negative(
            "ProducerConfig.backpressure_warning_interval", self.backpressure_warning_interval
        )
        check_non_negative(
            "ProducerConfig.shard_map_min_refresh_interval", self.shard_map_min_refresh_interval
        )
        check_non_negative("ProducerConfig.exit_grace", self.exit_grace)
        intensity = self.restart_intensity
        if (
            not isinstance(intensity, tuple)
            or len(intensity) != 2
            or isinstance(intensity[0], bool)
            or not isinstance(intensity[0], int)
            or intensity[0] < 0
            or isinstance(intensity[1], bool)
            or not isinstance(intensity[1], int | float)
            or not intensity[1] > 0
        ):
            raise ConfigError(
                "ProducerConfig.restart_intensity must be (max_restarts >= 0, period > 0), "
                f"got {intensity!r}"
            )


class QueueLimits(NamedTuple):
    """The queue's bounds in use: records and bytes accepted and not yet settled."""

    records: int
    nbytes: int


def queue_limits(config: ProducerConfig, open_shards: int) -> QueueLimits:
    """``config``'s queue limits, the defaults (``None``) sized for ``open_shards`` (see
    ``queue_limit_records``); limits the caller set are kept."""
    shards = min(max(1, open_shards), QUEUE_SIZED_UP_TO_SHARDS)
    records = config.queue_limit_records
    if records is None:
        records = max(MIN_QUEUE_RECORDS, QUEUE_RECORDS_PER_SHARD * shards)
    nbytes = config.queue_limit_bytes
    if nbytes is None:
        nbytes = max(MIN_QUEUE_BYTES, QUEUE_BYTES_PER_SHARD * shards)
    return QueueLimits(records, nbytes)
