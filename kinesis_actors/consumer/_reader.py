"""Shard readers: where raw Kinesis records come from, one shard at a time.

:class:`ShardReader` is the interface the consumer core drives; :class:`PollingReader`
implements it with GetShardIterator/GetRecords. An Enhanced Fan-Out reader (next issue)
implements the same interface over SubscribeToShard: every ``read()`` returns the records of
one response or event, the service's ``MillisBehindLatest``, and whether the shard ended
(with its children).

A reader owns its iterator and its read position, so the core never sees either: it only
decides *when* to ask for the next read (after taking a credit) and where to restart a reader
(from the positions it keeps).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio

from .. import errors
from ..client import KinesisClient
from ._config import StartingPosition
from ._metrics import ShardMetrics
from ._pacing import ReadPacer

__all__ = ["PollingReader", "ShardRead", "ShardReader"]

#: Transport or service failures in a row (after the client's retries) before a reader gives up.
_MAX_CONSECUTIVE_FAILURES = 5


@dataclass(frozen=True, slots=True)
class ShardRead:
    """One read: raw records in shard order (boto3 shapes), and what the service said."""

    records: Sequence[Mapping[str, Any]]
    millis_behind_latest: int | None = None
    finished: bool = False
    """The shard is closed and this read reached its end: never read it again."""
    child_shards: tuple[str, ...] = field(default=())
    size: int = 0
    """Bytes of record data in this read."""


class ShardReader(Protocol):
    """A source of :class:`ShardRead` for one shard, from a starting position.

    ``read`` may wait (pacing, backoff, a subscription's next event); it is called only when the
    consumer has room for the result. ``start`` is the position reading began at, resolved
    where it can be (LATEST becomes the moment of the first iterator), for positions of shards
    with nothing committed yet.
    """

    @property
    def start(self) -> StartingPosition: ...

    async def read(self) -> ShardRead: ...

    async def aclose(self) -> None: ...


class PollingReader:
    """GetRecords on one shard, paced by a :class:`ReadPacer`.

    Expired iterators are renewed from the position after the last record read; throttles
    (after the client's own retries) back the shard off. Each call returns one GetRecords
    answer, empty ones included, so the caller sees every read for its metrics.
    """

    def __init__(
        self,
        client: KinesisClient,
        stream: str,
        shard_id: str,
        start: StartingPosition,
        *,
        pacer: ReadPacer,
        metrics: ShardMetrics,
        limit: int,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self._client = client
        self._stream = stream
        self._shard_id = shard_id
        self._start = start
        self._position = start
        self._pacer = pacer
        self._metrics = metrics
        self._limit = limit
        self._clock = clock
        self._iterator: str | None = None
        self._finished = False
        self._failures = 0

    @property
    def start(self) -> StartingPosition:
        return self._start

    @property
    def position(self) -> StartingPosition:
        """Where a new iterator would start: after the last record read."""
        return self._position

    async def _new_iterator(self) -> str:
        position = self._position
        taken_at = datetime.now(UTC)
        result = await self._client.call(
            "GetShardIterator",
            {"StreamName": self._stream, "ShardId": self._shard_id, **position.iterator_params()},
        )
        self._metrics.iterators += 1
        if position.type == "LATEST":
            # Renewing "LATEST" later would skip what arrived meanwhile: pin it to a time.
            pinned = StartingPosition("AT_TIMESTAMP", timestamp=taken_at)
            self._position = pinned
            if self._start is position:
                self._start = pinned
        iterator: str = result["ShardIterator"]
        return iterator

    async def read(self) -> ShardRead:
        if self._finished:
            raise RuntimeError(f"{self._stream}/{self._shard_id} is finished; nothing to read")
        while True:
            delay = self._pacer.delay(self._clock())
            if delay > 0:
                await anyio.sleep(delay)
            if self._iterator is None:
                self._iterator = await self._new_iterator()
            started = self._clock()
            try:
                result = await self._client.call(
                    "GetRecords", {"ShardIterator": self._iterator, "Limit": self._limit}
                )
            except errors.ExpiredIteratorError:
                self._metrics.expired_iterators += 1
                self._iterator = None
                continue
            except errors.ThrottlingError:
                self._metrics.throttles += 1
                self._pacer.throttled(self._clock())
                continue
            except (errors.TransportError, errors.ServiceError):
                # The client already retried; back this shard off and try again, a bounded
                # number of times in a row, then let the supervisor decide.
                self._metrics.transient_errors += 1
                self._failures += 1
                if self._failures > _MAX_CONSECUTIVE_FAILURES:
                    raise
                self._iterator = None
                self._pacer.throttled(self._clock())
                continue
            self._failures = 0
            return self._accept(result, started)

    def _accept(self, result: Mapping[str, Any], started: float) -> ShardRead:
        records: list[Mapping[str, Any]] = result.get("Records", [])
        size = sum(len(record["Data"]) for record in records)
        self._pacer.read(started, len(records), size)
        if records:
            self._position = StartingPosition.after_sequence_number(records[-1]["SequenceNumber"])
        following = result.get("NextShardIterator")
        self._iterator = following or None
        self._finished = not following
        children = tuple(child["ShardId"] for child in result.get("ChildShards") or ())
        return ShardRead(
            records,
            millis_behind_latest=result.get("MillisBehindLatest"),
            finished=self._finished,
            child_shards=children,
            size=size,
        )

    async def aclose(self) -> None:
        self._iterator = None
