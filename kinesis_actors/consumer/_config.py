"""What a consumer reads and how: :class:`StartingPosition` and :class:`ConsumerConfig`.

Everything is validated on construction (or, for what depends on the stream names, by
:meth:`ConsumerConfig.check_for`), so a bad configuration fails with a
:class:`~kinesis_actors.errors.ConfigError` naming the option, before any network call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from .._validate import (
    check_choice,
    check_non_negative,
    check_positive,
    check_sequence_number,
    check_type,
)
from ..client import StreamRef
from ..errors import ConfigError

if TYPE_CHECKING:  # the leases package builds on the consumer: no import cycle at run time
    from ..leases import LeaseConfig

__all__ = ["MAX_RECORDS_PER_CALL", "ConsumerConfig", "StartingPosition"]

#: GetRecords' own limit on ``Limit``.
MAX_RECORDS_PER_CALL = 10_000

_TYPES = (
    "TRIM_HORIZON",
    "LATEST",
    "AT_TIMESTAMP",
    "AT_SEQUENCE_NUMBER",
    "AFTER_SEQUENCE_NUMBER",
)
#: How far in the future an AT_TIMESTAMP may be before it is refused (clock skew allowance).
_FUTURE_TOLERANCE = timedelta(seconds=5)
#: DynamoDB's rule for table names: 3-255 of these characters.
_TABLE_NAME = re.compile(r"[a-zA-Z0-9_.-]{3,255}")
#: A worker id is the lease's owner attribute: any string, bounded so that an item stays small.
_WORKER_ID_MAX = 256


@dataclass(frozen=True, slots=True)
class StartingPosition:
    """Where a shard is read from when there is no committed position for it.

    Use :meth:`trim_horizon`, :meth:`latest` or :meth:`at_timestamp`. The sequence-number forms
    (:meth:`at_sequence_number`, :meth:`after_sequence_number`) exist for resuming; they are
    what positions turn into.
    """

    type: str
    timestamp: datetime | None = None
    sequence_number: str | None = None

    def __post_init__(self) -> None:
        check_choice("StartingPosition.type", self.type, _TYPES)
        if self.type == "AT_TIMESTAMP":
            check_type("StartingPosition.timestamp", self.timestamp, datetime, "a datetime")
        elif self.timestamp is not None:
            raise ConfigError(
                f"StartingPosition.timestamp is only for AT_TIMESTAMP, not {self.type}"
            )
        if self.type.endswith("SEQUENCE_NUMBER"):
            check_sequence_number("StartingPosition.sequence_number", self.sequence_number)
        elif self.sequence_number is not None:
            raise ConfigError(
                f"StartingPosition.sequence_number is only for *_SEQUENCE_NUMBER, not {self.type}"
            )

    @classmethod
    def trim_horizon(cls) -> StartingPosition:
        """The oldest record still retained."""
        return cls("TRIM_HORIZON")

    @classmethod
    def latest(cls) -> StartingPosition:
        """Only records that arrive after the shard's iterator is taken."""
        return cls("LATEST")

    @classmethod
    def at_timestamp(cls, timestamp: datetime) -> StartingPosition:
        """Records that arrived at or after ``timestamp`` (naive datetimes are UTC).

        A timestamp in the future is a :class:`ConfigError`: the service would quietly
        return nothing until then, which is never what a user meant.
        """
        check_type("StartingPosition.at_timestamp", timestamp, datetime, "a datetime")
        stamp = timestamp if timestamp.tzinfo is not None else timestamp.replace(tzinfo=UTC)
        if stamp > datetime.now(UTC) + _FUTURE_TOLERANCE:
            raise ConfigError(
                f"StartingPosition.at_timestamp must not be in the future, got {stamp.isoformat()}"
            )
        return cls("AT_TIMESTAMP", timestamp=stamp)

    @classmethod
    def at_sequence_number(cls, sequence_number: str) -> StartingPosition:
        return cls("AT_SEQUENCE_NUMBER", sequence_number=sequence_number)

    @classmethod
    def after_sequence_number(cls, sequence_number: str) -> StartingPosition:
        return cls("AFTER_SEQUENCE_NUMBER", sequence_number=sequence_number)

    def iterator_params(self) -> dict[str, Any]:
        """The GetShardIterator parameters for this position (without stream and shard)."""
        params: dict[str, Any] = {"ShardIteratorType": self.type}
        if self.timestamp is not None:
            params["Timestamp"] = self.timestamp
        if self.sequence_number is not None:
            params["StartingSequenceNumber"] = self.sequence_number
        return params

    def subscribe_params(self) -> dict[str, Any]:
        """SubscribeToShard's ``StartingPosition`` for this position."""
        params: dict[str, Any] = {"Type": self.type}
        if self.timestamp is not None:
            params["Timestamp"] = self.timestamp
        if self.sequence_number is not None:
            params["SequenceNumber"] = self.sequence_number
        return params

    def to_dict(self) -> dict[str, str]:
        """JSON-serializable form (used inside ``positions()``)."""
        out = {"type": self.type}
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp.isoformat()
        if self.sequence_number is not None:
            out["sequence_number"] = self.sequence_number
        return out

    @classmethod
    def from_dict(cls, data: Any, *, option: str = "positions") -> StartingPosition:
        """Parse :meth:`to_dict`'s output; anything else is a :class:`ConfigError`."""
        if not isinstance(data, Mapping) or not isinstance(data.get("type"), str):
            raise ConfigError(f"{option}: a start must be a dict with a 'type', got {data!r}")
        stamp = data.get("timestamp")
        try:
            when = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
        except ValueError:
            raise ConfigError(f"{option}: bad timestamp {stamp!r}") from None
        if when is not None and when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return cls(data["type"], timestamp=when, sequence_number=data.get("sequence_number"))


Mode = Literal["polling", "efo"]
Registration = Literal["lazy", "eager", "none"]
PoisonPolicy = Literal["fail", "skip"]


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """How a :class:`~kinesis_actors.consumer.Consumer` reads.

    - ``mode``: ``"polling"`` (GetRecords) or ``"efo"`` (Enhanced Fan-Out, SubscribeToShard).
      ``consumer_name``, ``registration`` (``"lazy"``, ``"eager"`` or ``"none"``) and
      ``consumer_arns`` (stream → consumer ARN, for ``"none"``) belong to EFO.
    - ``start``: where shards without a committed position begin. ``positions``, what
      :meth:`Consumer.positions` returned, overrides it for every shard it names; shards it does
      not name are new since then and are read from the trim horizon.
    - ``shard_discovery_interval``: seconds between ListShards rounds (jittered ±20 %);
      ``list_shards_page_size`` is ListShards' ``MaxResults``.
    - ``worker_index`` / ``worker_count``: static assignment of shards to workers (see
      ``docs/consumer.md``).
    - ``prefetch_batches``: batches read ahead per shard; memory is O(shards x prefetch).
    - ``max_records_per_call``: GetRecords' ``Limit`` (at most 10,000).
    - ``max_calls_per_second`` and ``max_bytes_per_second``: the per-shard read budget,
      the service's 5 calls/s and 2 MiB/s by default.
    - ``idle_backoff_initial`` / ``idle_backoff_max``: the wait after an empty read, doubling
      per consecutive empty read (idle shards are not hammered).
      ``idle_reads_per_second`` caps the empty reads of all idle shards together (a shared
      calendar of read slots), so a large consumer's idle cost stays flat; an idle shard
      then waits up to ``idle_backoff_max + shards / idle_reads_per_second`` (1,000 shards:
      12 s). None: no cap. See ``docs/consumer.md``.
    - ``throttle_backoff_initial`` / ``throttle_backoff_max``: the same after a throttle.
    - ``caught_up_millis_behind`` (None: off) and ``caught_up_read_interval``: a polled shard
      less than that many milliseconds behind its tip is read at most once per that interval
      (the KCL 3.1's ``millisBehindLatestThresholdForReducedTps``): fewer calls for a
      trickling shard, that much more latency. ``max_bytes_per_second`` is the read-rate cap
      for a shard shared with other readers.
    - ``restart_intensity``: (restarts, seconds) allowed to each shard's reader, and, under
      :meth:`Consumer.run`, to the handlers' processors all together, before the consumer
      gives up (``_supervision`` says why: a burst on many shards must not fail it).
    - EFO: ``efo_watchdog_timeout`` (seconds without an event, while asking, before a
      resubscription), ``efo_subscription_lifetime`` (renew a subscription after this long;
      the service ends them after 5 minutes), ``deregister_on_close`` (None: only ``lazy``
      with ``worker_count == 1`` and no lease table deregisters on a clean close),
      ``registration_timeout`` (registering / waiting for ACTIVE at open),
      ``efo_starvation_warning`` (seconds of nothing but ResourceInUse before a warning and
      the shard's state ``starved``), ``efo_fallback_after`` (seconds of nothing but
      ResourceInUse before the shard is read by GetRecords, within its polling budget, until
      a subscription is accepted again; None: never).
    - ``poison_records``: a malformed record from the server is a ``PoisonRecordError``
      naming it (``"fail"``, the default: nothing is skipped) or is skipped, counted and
      logged (``"skip"``); see ``docs/consumer.md``.
    - ``lease_table``: share the streams' shards with other workers through this DynamoDB
      table (the KCL's lease format) instead of ``worker_index`` / ``worker_count``; commits
      become the leases' checkpoints, so ``positions`` does not apply. ``worker_id`` names this
      worker in the table (None: host, process id and a random suffix, unique per process);
      ``dynamodb_endpoint_url`` is DynamoDB's endpoint (None: the region's);
      ``leases`` tunes the protocol (failover time, intervals, creating the table). See
      ``docs/leases.md``.
    """

    mode: Mode = "polling"
    consumer_name: str | None = None
    registration: Registration = "lazy"
    consumer_arns: Mapping[str, str] = field(default_factory=dict)
    start: StartingPosition = field(default_factory=StartingPosition.latest)
    positions: Mapping[str, Any] | None = None
    shard_discovery_interval: float = 10.0
    list_shards_page_size: int = 1000
    worker_index: int = 0
    worker_count: int = 1
    prefetch_batches: int = 2
    max_records_per_call: int = MAX_RECORDS_PER_CALL
    max_calls_per_second: float = 5.0
    max_bytes_per_second: float = 2 * 1024 * 1024
    idle_backoff_initial: float = 0.25
    idle_backoff_max: float = 2.0
    idle_reads_per_second: float | None = 100.0
    caught_up_millis_behind: int | None = None
    caught_up_read_interval: float = 1.5
    throttle_backoff_initial: float = 0.5
    throttle_backoff_max: float = 5.0
    restart_intensity: tuple[int, float] = (5, 30.0)
    efo_watchdog_timeout: float = 30.0
    efo_subscription_lifetime: float = 300.0
    deregister_on_close: bool | None = None
    registration_timeout: float = 120.0
    efo_starvation_warning: float = 30.0
    efo_fallback_after: float | None = 30.0
    poison_records: PoisonPolicy = "fail"
    lease_table: str | None = None
    worker_id: str | None = None
    dynamodb_endpoint_url: str | None = None
    leases: LeaseConfig | None = None

    def __post_init__(self) -> None:
        check_choice("ConsumerConfig.mode", self.mode, ("polling", "efo"))
        check_choice("ConsumerConfig.registration", self.registration, ("lazy", "eager", "none"))
        check_choice("ConsumerConfig.poison_records", self.poison_records, ("fail", "skip"))
        if self.consumer_name is not None and (
            not isinstance(self.consumer_name, str) or not 1 <= len(self.consumer_name) <= 128
        ):
            raise ConfigError(
                "ConsumerConfig.consumer_name must be None or a string of 1 to 128 characters, "
                f"got {self.consumer_name!r}"
            )
        check_type("ConsumerConfig.consumer_arns", self.consumer_arns, Mapping, "a dict")
        for stream, arn in self.consumer_arns.items():
            if not isinstance(stream, str) or not isinstance(arn, str) or not arn:
                raise ConfigError(
                    "ConsumerConfig.consumer_arns must map stream names to ARNs, "
                    f"got {stream!r}: {arn!r}"
                )
        if self.mode == "efo" and self.registration != "lazy" and not self.consumer_arns:
            raise ConfigError(
                f'ConsumerConfig.consumer_arns is required with registration="{self.registration}"'
            )
        for name in (
            "efo_watchdog_timeout",
            "efo_subscription_lifetime",
            "registration_timeout",
            "efo_starvation_warning",
        ):
            check_positive(f"ConsumerConfig.{name}", getattr(self, name))
        if self.efo_fallback_after is not None:
            check_positive("ConsumerConfig.efo_fallback_after", self.efo_fallback_after)
        if self.deregister_on_close is not None:
            check_type(
                "ConsumerConfig.deregister_on_close", self.deregister_on_close, bool, "a bool"
            )
        check_type("ConsumerConfig.start", self.start, StartingPosition, "a StartingPosition")
        if self.start.type.endswith("SEQUENCE_NUMBER"):
            raise ConfigError(
                "ConsumerConfig.start must be trim_horizon(), latest() or at_timestamp(); "
                "resume from a sequence number with ConsumerConfig.positions"
            )
        if self.positions is not None:
            check_type(
                "ConsumerConfig.positions", self.positions, Mapping, "what positions() returned"
            )
        check_positive("ConsumerConfig.shard_discovery_interval", self.shard_discovery_interval)
        check_positive(
            "ConsumerConfig.list_shards_page_size", self.list_shards_page_size, integer=True
        )
        if self.list_shards_page_size > 10_000:
            raise ConfigError(
                "ConsumerConfig.list_shards_page_size must be at most 10000, "
                f"got {self.list_shards_page_size!r}"
            )
        check_positive("ConsumerConfig.worker_count", self.worker_count, integer=True)
        check_non_negative("ConsumerConfig.worker_index", self.worker_index, integer=True)
        if self.worker_index >= self.worker_count:
            raise ConfigError(
                f"ConsumerConfig.worker_index must be below worker_count ({self.worker_count}), "
                f"got {self.worker_index!r}"
            )
        check_positive("ConsumerConfig.prefetch_batches", self.prefetch_batches, integer=True)
        check_positive(
            "ConsumerConfig.max_records_per_call", self.max_records_per_call, integer=True
        )
        if self.max_records_per_call > MAX_RECORDS_PER_CALL:
            raise ConfigError(
                f"ConsumerConfig.max_records_per_call must be at most {MAX_RECORDS_PER_CALL}, "
                f"got {self.max_records_per_call!r}"
            )
        check_positive("ConsumerConfig.max_calls_per_second", self.max_calls_per_second)
        if self.max_calls_per_second > 5:
            raise ConfigError(
                "ConsumerConfig.max_calls_per_second must be at most 5 (the service's limit per "
                f"shard), got {self.max_calls_per_second!r}"
            )
        check_positive("ConsumerConfig.max_bytes_per_second", self.max_bytes_per_second)
        for name in (
            "idle_backoff_initial",
            "idle_backoff_max",
            "throttle_backoff_initial",
            "throttle_backoff_max",
        ):
            check_positive(f"ConsumerConfig.{name}", getattr(self, name))
        if self.idle_reads_per_second is not None:
            check_positive("ConsumerConfig.idle_reads_per_second", self.idle_reads_per_second)
        if self.caught_up_millis_behind is not None:
            check_positive(
                "ConsumerConfig.caught_up_millis_behind", self.caught_up_millis_behind, integer=True
            )
        check_positive("ConsumerConfig.caught_up_read_interval", self.caught_up_read_interval)
        for low, high in (
            ("idle_backoff_initial", "idle_backoff_max"),
            ("throttle_backoff_initial", "throttle_backoff_max"),
        ):
            if getattr(self, high) < getattr(self, low):
                raise ConfigError(f"ConsumerConfig.{high} must be at least {low}")
        intensity = self.restart_intensity
        if (
            not isinstance(intensity, tuple)
            or len(intensity) != 2
            or isinstance(intensity[0], bool)
            or not isinstance(intensity[0], int)
            or intensity[0] < 0
            or not isinstance(intensity[1], int | float)
            or intensity[1] <= 0
        ):
            raise ConfigError(
                "ConsumerConfig.restart_intensity must be (max_restarts >= 0, period > 0), "
                f"got {intensity!r}"
            )
        self._check_leases()

    def _check_leases(self) -> None:
        """The lease-table options: well-formed, and not mixed with what they replace."""
        table = self.lease_table
        if table is not None and (not isinstance(table, str) or not _TABLE_NAME.fullmatch(table)):
            raise ConfigError(
                "ConsumerConfig.lease_table must be None or a DynamoDB table name (3 to 255 "
                f"letters, digits, '_', '-' or '.'), got {table!r}"
            )
        worker = self.worker_id
        if worker is not None and (
            not isinstance(worker, str) or not worker.strip() or len(worker) > _WORKER_ID_MAX
        ):
            raise ConfigError(
                f"ConsumerConfig.worker_id must be None or a non-blank string of at most "
                f"{_WORKER_ID_MAX} characters, got {worker!r}"
            )
        url = self.dynamodb_endpoint_url
        if url is not None:
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(
                    "ConsumerConfig.dynamodb_endpoint_url must be None or an http:// or "
                    f"https:// URL, got {url!r}"
                )
        if self.leases is not None:
            from ..leases import LeaseConfig  # noqa: PLC0415 - leases may build on the consumer

            check_type("ConsumerConfig.leases", self.leases, LeaseConfig, "a LeaseConfig")
        if table is not None:
            if self.worker_count != 1 or self.worker_index != 0:
                raise ConfigError(
                    "ConsumerConfig.lease_table replaces worker_index / worker_count: leave "
                    f"them at 0 / 1 (got {self.worker_index} / {self.worker_count})"
                )
            if self.positions is not None:
                raise ConfigError(
                    "ConsumerConfig.lease_table keeps checkpoints in the table: "
                    "ConsumerConfig.positions must be None with it"
                )
            return
        for name in ("worker_id", "dynamodb_endpoint_url", "leases"):
            if getattr(self, name) is not None:
                raise ConfigError(f"ConsumerConfig.{name} needs ConsumerConfig.lease_table")


def stream_names(streams: Any, region: str | None = None) -> dict[str, str]:
    """The ``streams`` a Consumer was given: each stream's name (the consumer's key for it, in
    batches, positions and metrics) → its name or ARN as given (what its calls send).

    Names and stream ARNs are checked by ``StreamRef.parse`` (an ARN of another region than
    ``region``, the client's, is refused); two entries naming one stream name are refused too.
    """
    given = [streams] if isinstance(streams, str) else streams
    if not isinstance(given, list | tuple) or not given:
        raise ConfigError(
            f"streams must be a stream name or ARN, or a non-empty list of them, got {streams!r}"
        )
    out: dict[str, str] = {}
    for value in given:
        name = StreamRef.parse(value, option="streams", region=region).name
        if name in out:
            raise ConfigError(
                f"streams must not repeat a stream, got {list(given)!r} ({name!r} twice: a "
                "consumer knows a stream by its name, so it reads one stream of each name)"
            )
        out[name] = value
    return out
