"""Shard readers: where raw Kinesis records come from, one shard at a time.

:class:`ShardReader` is the interface the consumer core drives; :class:`PollingReader`
implements it with GetShardIterator/GetRecords; :class:`~kinesis_actors.consumer.EfoReader`
(``_efo``) implements the same interface over SubscribeToShard. Every ``read()`` returns the
records of one response or event, the service's ``MillisBehindLatest``, and whether the shard
ended (with its children).

A reader owns its iterator and its read position, so the core never sees either: it only
decides *when* to ask for the next read (after taking a credit) and where to restart a reader
(from the positions it keeps).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from .. import errors
from ..client import KinesisClient, StreamRef, is_retryable, service_now, stream_params
from ._config import StartingPosition
from ._metrics import ShardMetrics
from ._pacing import ReadPacer
from ._poison import screen
from ._proof import NotFoundPolicy, check_resumed_at, judge_not_found, unreadable
from ._replies import BadRecord, GetRecordsReply, get_records_reply, shard_iterator

__all__ = ["PollingReader", "ShardRead", "ShardReader"]

log = logging.getLogger("kinesis_actors.consumer")

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

    Expired iterators are renewed from the position after the last record read, paced (at most 5
    GetShardIterator calls a second); throttles (after the client's own retries) back the shard
    off. Each call returns one GetRecords answer, empty ones included, so the caller sees every
    read for its metrics. The shard ends only on proof: a whole reply without a next iterator,
    or the shard gone from the list after a ResourceNotFound (``_proof``); an open shard that
    cannot be read raises :class:`~kinesis_actors.errors.ShardUnreadableError`. Malformed
    records follow ``poison`` (``_poison``).
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
        poison: str = "fail",
        not_found: NotFoundPolicy | None = None,
    ) -> None:
        self._client = client
        ref = StreamRef.parse(stream)
        self._stream = ref.name  # its identity, in batches and errors
        self._ref = stream  # what its calls name: StreamARN for a stream given by ARN
        # GetRecords takes the stream's ARN too; a caller of another account sends it (KCL).
        self._records_params = {} if ref.arn is None else {"StreamARN": ref.arn}
        self._shard_id = shard_id
        self._start = start
        self._position = start
        self._pacer = pacer
        self._metrics = metrics
        self._limit = limit
        self._clock = clock
        self._poison = poison
        self._not_found = not_found if not_found is not None else NotFoundPolicy()
        self._iterator: str | None = None
        self._resumed_at: StartingPosition | None = None  # checked on the first records
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
        delay = self._pacer.iterator_delay(self._clock())
        if delay > 0:
            await anyio.sleep(delay)
        position = self._position
        taken_at = service_now(self._client)  # the service's clock: see service_now
        self._pacer.iterator_taken(self._clock())
        try:
            result = await self._client.call(
                "GetShardIterator",
                {
                    **stream_params(self._ref),
                    "ShardId": self._shard_id,
                    **position.iterator_params(),
                },
            )
        except errors.ValidationError as exc:
            if position.sequence_number is None:
                raise
            # InvalidArgument for a sequence number: not this shard's (a mixed-up document).
            raise unreadable(self._stream, self._shard_id, position, str(exc), exc) from exc
        iterator = shard_iterator(result)
        self._metrics.iterators += 1
        self._resumed_at = position if position.type == "AT_SEQUENCE_NUMBER" else None
        if position.type == "LATEST":
            # Renewing "LATEST" later would skip what arrived meanwhile: pin it to a time.
            pinned = StartingPosition("AT_TIMESTAMP", timestamp=taken_at)
            self._position = pinned
            if self._start is position:
                self._start = pinned
        return iterator

    async def read(self) -> ShardRead:
        if self._finished:
            raise RuntimeError(f"{self._stream}/{self._shard_id} is finished; nothing to read")
        while True:
            delay = self._pacer.delay(self._clock())
            if delay > 0:
                await anyio.sleep(delay)
            started = self._clock()
            try:
                if self._iterator is None:
                    self._iterator = await self._new_iterator()
                started = self._clock()
                result = await self._client.call(
                    "GetRecords",
                    {
                        "ShardIterator": self._iterator,
                        "Limit": self._limit,
                        **self._records_params,
                    },
                    epoch_timestamps=True,  # the Arrow batch wants milliseconds, not datetimes
                )
                reply = get_records_reply(result)
            except errors.ExpiredIteratorError:
                self._metrics.expired_iterators += 1
                self._iterator = None
                self._pacer.expired(self._clock())
                continue
            except errors.ThrottlingError:
                self._metrics.throttles += 1
                self._pacer.throttled(self._clock())
                continue
            except errors.ResourceNotFoundError as exc:
                if await self._expired(exc):
                    self._finished = True
                    return ShardRead((), finished=True)
                continue
            except errors.MalformedReplyError as exc:
                if not exc.bad_records or exc.reply is None:
                    self._transient(exc)
                    continue
                # A whole reply but for some records (the client's contract): the poison path.
                reply = get_records_reply(exc.reply)
                self._failures = 0
                self._not_found.read_succeeded()
                return self._accept(reply, exc.bad_records, started, removed=True)
            except (errors.TransportError, errors.ServiceError) as exc:
                if not is_retryable(exc):
                    raise  # a certificate that failed verification: the same next time
                self._transient(exc)
                continue
            self._failures = 0
            self._not_found.read_succeeded()
            # The client decoded every record (or raised MalformedReplyError, above).
            return self._accept(reply, (), started)

    def _transient(self, exc: errors.KinesisError) -> None:
        """The client already retried; back this shard off and try again, a bounded number
        of times in a row, then let the supervisor decide."""
        self._metrics.transient_errors += 1
        self._failures += 1
        if self._failures > _MAX_CONSECUTIVE_FAILURES:
            raise exc
        self._iterator = None
        self._pacer.throttled(self._clock())

    async def _expired(self, exc: errors.ResourceNotFoundError) -> bool:
        """ResourceNotFound: True if the shard is gone from the list (it expired), False to
        retry (paced); ShardUnreadableError once an open shard has failed too often."""
        self._metrics.not_found += 1
        self._iterator = None
        if await judge_not_found(
            self._client,
            self._ref,
            self._shard_id,
            self._position,
            policy=self._not_found,
            exc=exc,
        ):
            return True
        self._pacer.throttled(self._clock())
        return False

    def _accept(
        self,
        reply: GetRecordsReply,
        bad: Sequence[BadRecord],
        started: float,
        *,
        removed: bool = False,
    ) -> ShardRead:
        records, last = screen(
            self._stream,
            self._shard_id,
            reply.records,
            bad,
            policy=self._poison,
            metrics=self._metrics,
            operation="GetRecords",
            removed=removed,
        )
        if self._resumed_at is not None and check_resumed_at(
            self._stream, self._shard_id, self._resumed_at, records
        ):
            self._resumed_at = None
        size = sum(len(record["Data"]) for record in records)
        self._pacer.read(started, len(records), size, reply.millis_behind_latest)
        if last is not None:
            self._position = StartingPosition.after_sequence_number(last)
        self._iterator = reply.next_iterator
        self._finished = reply.finished
        return ShardRead(
            records,
            millis_behind_latest=reply.millis_behind_latest,
            finished=self._finished,
            child_shards=reply.child_shards,
            size=size,
        )

    async def aclose(self) -> None:
        self._iterator = None
