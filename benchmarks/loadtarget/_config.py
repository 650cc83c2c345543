"""The load target's settings: stream shape, emulated service limits, injected faults.

Every setting is a frozen dataclass that round-trips through JSON (``to_dict`` /
``from_dict``), because the server runs in a process of its own and is configured, and
reconfigured at run time, over its admin endpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Self

__all__ = ["MIB", "Faults", "Limits", "Synthetic", "TargetConfig"]

MIB = 1024 * 1024


def _from_dict(cls: type[Any], data: dict[str, Any] | None) -> Any:
    if data is None:
        return None
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown settings {sorted(unknown)}")
    return cls(**data)


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-shard limits, emulated with token buckets (the service's figures by default).

    A bucket holds ``burst_seconds`` worth of its rate and starts full. Writes over the limit
    fail per record (``ProvisionedThroughputExceededException`` inside a PutRecords answer);
    GetRecords over its call or byte rate fails as a whole call (HTTP 400), as the service
    does. Byte budgets for reads may go into debt: a large answer is served, then the shard
    is throttled until the debt is repaid. ``None`` disables one limit.
    """

    write_records_per_s: float | None = 1000.0
    write_bytes_per_s: float | None = float(MIB)
    read_calls_per_s: float | None = 5.0
    read_bytes_per_s: float | None = 2.0 * MIB
    efo_bytes_per_s: float | None = 2.0 * MIB
    get_shard_iterator_per_s: float | None = 5.0
    burst_seconds: float = 1.0

    def __post_init__(self) -> None:
        if self.burst_seconds <= 0:
            raise ValueError("Limits.burst_seconds must be positive")
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value <= 0:
                raise ValueError(f"Limits.{f.name} must be positive or None, got {value!r}")

    @classmethod
    def kinesis(cls) -> Self:
        """The service's published per-shard limits."""
        return cls()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self | None:
        result: Self | None = _from_dict(cls, data)
        return result


@dataclass(frozen=True, slots=True)
class Faults:
    """Faults to inject, each drawn independently per request (or per record) from ``seed``.

    - ``throttle_share``: the fraction of PutRecords entries failed with
      ``ProvisionedThroughputExceededException`` (partial failure), and of PutRecord calls
      answered with it (HTTP 400).
    - ``call_throttle_share``: the fraction of calls (of ``operations``) answered with HTTP 400
      ``ProvisionedThroughputExceededException`` as a whole.
    - ``error_share``: the fraction of calls answered with HTTP 500 ``InternalFailure``.
    - ``cut_share``: the fraction of requests whose connection is closed after the request was
      read and before it was processed (nothing happened; the client sees a dropped connection).
    - ``cut_after_share``: the same, but after the request was processed (records were
      stored: a retry makes duplicates, as on the real service).
    - ``delay_seconds`` with ``delay_share``: stall that share of responses.
    - ``paused_shards``: shard ids whose traffic stalls (PutRecords calls that touch them,
      GetRecords on them, their subscriptions) until they are resumed.
    - ``stream_reset_share``: per SubscribeToShard event, the chance that the stream is reset
      (RST_STREAM) instead of sent.
    - ``operations``: which operations the per-call faults apply to (all when empty).
    """

    throttle_share: float = 0.0
    call_throttle_share: float = 0.0
    error_share: float = 0.0
    cut_share: float = 0.0
    cut_after_share: float = 0.0
    delay_seconds: float = 0.0
    delay_share: float = 1.0
    paused_shards: tuple[str, ...] = ()
    stream_reset_share: float = 0.0
    operations: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "throttle_share",
            "call_throttle_share",
            "error_share",
            "cut_share",
            "cut_after_share",
            "delay_share",
            "stream_reset_share",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"Faults.{name} must be in [0, 1], got {value!r}")
        if self.delay_seconds < 0:
            raise ValueError("Faults.delay_seconds must be >= 0")
        object.__setattr__(self, "paused_shards", tuple(self.paused_shards))
        object.__setattr__(self, "operations", tuple(self.operations))

    @property
    def any_call_fault(self) -> bool:
        return bool(
            self.call_throttle_share
            or self.error_share
            or self.cut_share
            or self.cut_after_share
            or (self.delay_seconds and self.delay_share)
        )

    def applies_to(self, operation: str) -> bool:
        return not self.operations or operation in self.operations

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["paused_shards"] = list(self.paused_shards)
        data["operations"] = list(self.operations)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self | None:
        result: Self | None = _from_dict(cls, data)
        return result


@dataclass(frozen=True, slots=True)
class Synthetic:
    """Endless pre-encoded records on every shard, for consumer decode benchmarks.

    Reads (GetRecords, SubscribeToShard) ignore what was put and serve records of
    ``record_size`` bytes with ``partition_keys`` distinct keys, cycling over ``variants``
    distinct payloads. GetRecords returns ``Limit`` records (``records_per_call`` when no
    Limit is given); each SubscribeToShard event carries ``records_per_event`` records.
    ``payloads`` (if given) are used as the records' data instead of random bytes: pass KPL
    aggregates to benchmark deaggregation.
    """

    record_size: int = 100
    records_per_call: int = 10_000
    records_per_event: int = 1_000
    partition_keys: int = 1000
    variants: int = 16
    payloads: tuple[bytes, ...] = ()
    millis_behind_latest: int = 0

    def __post_init__(self) -> None:
        if self.record_size < 1 or self.records_per_call < 1 or self.records_per_event < 1:
            raise ValueError("Synthetic sizes and counts must be positive")
        if self.partition_keys < 1 or self.variants < 1:
            raise ValueError("Synthetic.partition_keys and variants must be positive")
        object.__setattr__(self, "payloads", tuple(self.payloads))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["payloads"] = [p.hex() for p in self.payloads]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self | None:
        if data is None:
            return None
        data = dict(data)
        data["payloads"] = tuple(bytes.fromhex(p) for p in data.get("payloads", ()))
        result: Self | None = _from_dict(cls, data)
        return result


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """Everything the server process needs to start."""

    shards: int = 4
    stream_name: str = "bench"
    region: str = "us-east-1"
    account: str = "123456789012"
    retain_records: int = 0
    limits: Limits | None = None
    faults: Faults = field(default_factory=Faults)
    synthetic: Synthetic | None = None
    manual_clock: bool = False
    initial_response: bool = True
    subscription_seconds: float = 300.0
    heartbeat_seconds: float = 1.0
    max_record_size_kib: int = 1024
    series_seconds: int = 3600
    tls: bool = True
    cert_file: str = ""
    key_file: str = ""

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError("shards must be at least 1")
        if self.retain_records < 0:
            raise ValueError("retain_records must be >= 0")
        if self.tls and not (self.cert_file and self.key_file):
            raise ValueError("tls needs cert_file and key_file")

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["limits"] = self.limits.to_dict() if self.limits else None
        data["faults"] = self.faults.to_dict()
        data["synthetic"] = self.synthetic.to_dict() if self.synthetic else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        data = dict(data)
        data["limits"] = Limits.from_dict(data.get("limits"))
        data["faults"] = Faults.from_dict(data.get("faults")) or Faults()
        data["synthetic"] = Synthetic.from_dict(data.get("synthetic"))
        result: Self = _from_dict(cls, data)
        return result
