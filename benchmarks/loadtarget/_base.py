"""The service core, sans-IO: dispatch, injected faults, shared helpers, reply types.

``respond(operation, body)`` returns a :class:`Reply`, :data:`CUT` (close the connection
without answering), or an awaitable of either (stalled shards, injected delays). The HTTP/1.1
and HTTP/2 front ends only move bytes; the operations live in ``_ops``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from ._config import MIB, Faults, TargetConfig
from ._limits import Clock, TokenBucket
from ._records import SyntheticSource
from ._stream import Shard, Stream

# The standard library's JSON, whatever else is installed: with orjson, picked up when present,
# the target's CPU for 500-record PutRecords of 10 KiB records doubled (56-59 against 26-29 us a
# record, four runs of each in turn; no change at 100 bytes), so its figures depended on an
# unrelated package.
loads: Callable[[bytes], Any] = json.loads
_encode = json.JSONEncoder(separators=(",", ":")).encode


def dumps(value: Any) -> bytes:
    return _encode(value).encode()


__all__ = [
    "CUT",
    "JSON_TYPE",
    "PTE",
    "Outcome",
    "Reply",
    "Result",
    "ServiceBase",
    "ServiceError",
    "Subscription",
    "dumps",
    "loads",
    "ok",
]

JSON_TYPE: Final = "application/x-amz-json-1.1"
CUT: Final = "cut"
PTE: Final = "ProvisionedThroughputExceededException"
_ITERATOR_TTL = 300.0
_TOKEN_TTL = 300.0
_MAX_GET_BYTES = 10 * MIB
_EVENT_BYTES = 1 * MIB


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = JSON_TYPE


Outcome = Reply | str
Result = Outcome | Awaitable[Outcome]


class ServiceError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass(slots=True)
class Subscription:
    """An open SubscribeToShard: where it reads next, and its fan-out byte budget."""

    shard: Shard
    counter: int
    bucket: TokenBucket | None
    deadline: float
    events: int = 0


def ok(document: dict[str, Any]) -> Reply:
    return Reply(200, dumps(document))


class ServiceBase:
    """The stream, its consumers, limits, faults and counters; dispatch and helpers."""

    def __init__(self, config: TargetConfig, cpu_clock: Callable[[], float] = time.process_time):
        self.config = config
        self.clock = Clock(config.manual_clock)
        self.stream = Stream(
            config.stream_name,
            config.shards,
            config.region,
            config.account,
            config.limits,
            self.clock,
            config.series_seconds,
        )
        self.synthetic = SyntheticSource(config.synthetic) if config.synthetic else None
        self.consumers: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.fault_counts: dict[str, int] = {}
        self.connections = {"opened": 0, "open": 0, "tls": 0, "h2": 0}
        self._cpu_clock = cpu_clock
        self._cpu_start = cpu_clock()
        self._max_record = config.max_record_size_kib * 1024
        self._faults_changed = asyncio.Event()
        self.set_faults(config.faults)
        self._handlers: dict[str, Callable[[dict[str, Any]], Result]] = {}

    # Faults --------------------------------------------------------------------------------

    def set_faults(self, faults: Faults) -> None:
        self.faults = faults
        self.random = random.Random(faults.seed)
        self.paused = frozenset(faults.paused_shards)
        changed, self._faults_changed = self._faults_changed, asyncio.Event()
        changed.set()

    def count_fault(self, name: str, amount: int = 1) -> None:
        self.fault_counts[name] = self.fault_counts.get(name, 0) + amount

    async def wait_resumed(self, shard_ids: Iterable[str]) -> None:
        wanted = frozenset(shard_ids)
        while wanted & self.paused:
            await self._faults_changed.wait()

    def _decide(self, operation: str) -> tuple[Outcome | None, float, bool]:
        """(early outcome, delay, cut after processing) for one call."""
        faults = self.faults
        if not (faults.any_call_fault and faults.applies_to(operation)):
            return None, 0.0, False
        draw = self.random.random
        if faults.cut_share and draw() < faults.cut_share:
            self.count_fault("cut")
            return CUT, 0.0, False
        if faults.call_throttle_share and draw() < faults.call_throttle_share:
            self.count_fault("call_throttle")
            return self._error(ServiceError(PTE, "Rate exceeded (injected)")), 0.0, False
        if faults.error_share and draw() < faults.error_share:
            self.count_fault("error")
            error = ServiceError("InternalFailure", "injected", status=500)
            return self._error(error), 0.0, False
        delay = 0.0
        if faults.delay_seconds and draw() < faults.delay_share:
            self.count_fault("delay")
            delay = faults.delay_seconds
        cut_after = bool(faults.cut_after_share) and draw() < faults.cut_after_share
        return None, delay, cut_after

    # Dispatch ------------------------------------------------------------------------------

    def respond(self, operation: str, body: bytes) -> Result:
        """The outcome of one call, with the injected faults applied."""
        self.requests[operation] = self.requests.get(operation, 0) + 1
        early, delay, cut_after = self._decide(operation)
        if early is not None:
            return early
        if delay or cut_after:
            return self._later(operation, body, delay, cut_after)
        return self.handle(operation, body)

    async def _later(self, operation: str, body: bytes, delay: float, cut_after: bool) -> Outcome:
        if delay:
            await asyncio.sleep(delay)
        result = self.handle(operation, body)
        outcome = result if isinstance(result, Reply | str) else await result
        if cut_after:
            self.count_fault("cut_after")
            return CUT
        return outcome

    def handle(self, operation: str, body: bytes) -> Result:
        handler = self._handlers.get(operation)
        if handler is None:
            return self._error(
                ServiceError("UnknownOperationException", f"unknown operation {operation!r}")
            )
        try:
            document = loads(body) if body else {}
            result = handler(document)
        except ServiceError as exc:
            return self._error(exc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return self._error(ServiceError("ValidationException", f"malformed request: {exc!r}"))
        if isinstance(result, Reply | str):
            return result
        return self._guarded(result)

    async def _guarded(self, result: Awaitable[Outcome]) -> Outcome:
        try:
            return await result
        except ServiceError as exc:
            return self._error(exc)

    def _error(self, exc: ServiceError) -> Reply:
        self.errors[exc.code] = self.errors.get(exc.code, 0) + 1
        return Reply(exc.status, dumps({"__type": exc.code, "message": exc.message}))

    # Helpers ---------------------------------------------------------------------------------

    def _check_stream(self, document: dict[str, Any]) -> None:
        name = document.get("StreamName")
        arn = document.get("StreamARN")
        stream = self.stream
        if (name is not None and name != stream.name) or (arn is not None and arn != stream.arn):
            raise ServiceError(
                "ResourceNotFoundException",
                f"Stream {name or arn} under account {self.config.account} not found.",
            )

    def _shard(self, shard_id: str) -> Shard:
        shard = self.stream.shard(shard_id)
        if shard is None:
            raise ServiceError(
                "ResourceNotFoundException",
                f"Shard {shard_id} in stream {self.stream.name} under account "
                f"{self.config.account} does not exist",
            )
        return shard

    def _position(self, shard: Shard, kind: str, sequence: Any, timestamp: Any) -> int:
        """The counter a reader at this starting position reads next."""
        if kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            try:
                counter = self.stream.counter_of(shard, str(sequence))
            except ValueError:
                raise ServiceError(
                    "InvalidArgumentException",
                    f"Invalid StartingSequenceNumber {sequence!r} for {shard.shard_id}",
                ) from None
            return counter + (kind == "AFTER_SEQUENCE_NUMBER")
        if kind == "TRIM_HORIZON":
            return 1 if self.synthetic else shard.first_counter
        if kind == "LATEST":
            return 1 if self.synthetic else shard.next_counter
        if kind == "AT_TIMESTAMP":
            if self.synthetic:
                return 1
            # In whole milliseconds, as the service keeps arrival times and as answers show
            # them ("%.3f"): a sub-millisecond compare skipped a record whose shown time
            # rounded up to T.
            when = round(float(timestamp) * 1000) if isinstance(timestamp, int | float) else 0
            records = shard.records
            low, high = 0, len(records)
            while low < high:
                middle = (low + high) // 2
                if round(records[middle][0] * 1000) < when:
                    low = middle + 1
                else:
                    high = middle
            return shard.first_counter + low
        raise ServiceError("InvalidArgumentException", f"bad ShardIteratorType {kind!r}")

    def _stalled(self, shard_ids: Iterable[str], then: Callable[[], Result]) -> Result:
        """Run ``then`` now, or once every shard in ``shard_ids`` is resumed."""
        if not (self.paused and self.paused.intersection(shard_ids)):
            return then()

        async def later() -> Outcome:
            self.count_fault("stalled")
            await self.wait_resumed(shard_ids)
            result = then()
            return result if isinstance(result, Reply | str) else await result

        return later()
