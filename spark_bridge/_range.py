"""Reading a task's shard ranges of a micro-batch on an executor, exactly, as they stream in.

Every task of the source does this, whatever ran before it: first runs, task retries,
speculative copies and replays after a restart all read ``[start, end)`` of their shard with
GetRecords and yield what they read as Arrow batches as it comes (memory is a page per shard
read at once, at most 64 of a task's shards, and one combined batch of at most 10,000 rows
or 8 MiB, not the range). The end is a record the driver saw, so it is readable: at the tip
the reader waits (records may become visible a little after the driver saw them), up to
``replayTimeout`` without progress. A range that cannot be read exactly (the start record
was trimmed past retention, the offsets do not match the stream, the shard ended early)
fails the task with :class:`RangeReadError` naming the shard, never yields other rows.

Why GetRecords in both consumer modes: see docs/spark.md ("EFO").
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.compute as pc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from kinesis_actors import KinesisClient
from kinesis_actors.client import StreamRef, stream_params
from kinesis_actors.errors import (
    ExpiredIteratorError,
    KinesisError,
    MalformedReplyError,
    ResourceNotFoundError,
    ShardUnreadableError,
    ValidationError,
)
from kinesis_actors.records import build_record_batch

from ._offsets import AFTER, BEFORE, ShardEntry
from ._options import Connection
from ._policy import check_records_reply
from ._worker import shared_loop

__all__ = ["RangeReadError", "RangeReader", "ShardRange", "read_ranges"]

_PAGE = 10_000
_MIN_CALL_INTERVAL = 0.2
"""At most 5 GetRecords a second per reader, the service's budget for a shard."""
_IDLE_INITIAL, _IDLE_MAX = 0.05, 0.5
_SHARDS_AT_ONCE = 64
"""Shards of one task read at once (a task holds at most this many pages)."""
_COALESCE_ROWS = 10_000
"""Pages waiting when the task asks are taken together up to this many rows (Spark's own
``maxRecordsPerBatch`` default) and handed on as one batch: a task of many small shards
otherwise pays a crossing from the loop and a conversion per page."""
_COALESCE_BYTES = 8 * 1024 * 1024
_RETRIES = 5
"""Replies retried after the client's own retries gave up: a garbled reply or a passing
ResourceNotFound must not fail a task that a second look would complete."""


class RangeReadError(KinesisError):
    """A micro-batch's range of a shard cannot be read exactly."""


class RangeReader:
    """Reads the user records of one shard after ``start`` up to ``end`` (see ``_offsets``)."""

    def __init__(
        self,
        client: KinesisClient,
        stream: str,
        shard_id: str,
        start: ShardEntry,
        end: ShardEntry,
        *,
        wait_timeout: float,
        max_bytes_per_second: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._client = client
        self._max_bytes_per_second = max_bytes_per_second
        ref = StreamRef.parse(stream)
        self._stream = ref.name  # the rows' stream column, whichever way it was given
        self._params = stream_params(stream)
        self._records_params = {} if ref.arn is None else {"StreamARN": ref.arn}
        self._shard_id = shard_id
        self._start = start
        self._end = end
        self._wait_timeout = wait_timeout
        self._clock = clock
        self._sleep = sleep
        self._where = f"{ref.name}/{shard_id}"
        self._iterator: str | None = None
        self._last_sequence: str | None = None
        self._skip: tuple[str, int] | None = None
        bound = start.bound
        if bound is not None and BEFORE < bound.sub < AFTER:
            self._skip = (str(bound.sequence), bound.sub)
        self._done = start.finished
        self._next_call_at = -1e9
        self.calls = 0
        self.rows = 0

    async def _get_iterator(self) -> str:
        if self._last_sequence is not None:
            params: dict[str, Any] = {
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": self._last_sequence,
            }
        else:
            params = self._start.iterator_params()
        reply = await self._client.call(
            "GetShardIterator", {**self._params, "ShardId": self._shard_id, **params}
        )
        self.calls += 1
        iterator = reply.get("ShardIterator") if isinstance(reply, dict) else None
        if not isinstance(iterator, str):
            raise MalformedReplyError(
                f"{self._where}: no ShardIterator", operation="GetShardIterator"
            )
        return iterator

    def _charged(self, started: float, page: Any) -> Any:
        """``page``, its bytes charged to ``maxFetchRate``: a page of *b* bytes is worth
        *b* / rate seconds of the shard's reading, from the call's start (as the consumer's
        pacer counts)."""
        rate = self._max_bytes_per_second
        if rate is not None:
            size = sum(len(record["Data"]) for record in page.records)
            self._next_call_at = max(self._next_call_at, started + size / rate)
        return page

    async def _page(self) -> Any:
        """One checked GetRecords reply, retrying what a second look may cure."""
        failures = 0
        while True:
            try:
                if self._iterator is None:
                    self._iterator = await self._get_iterator()
                wait = self._next_call_at - self._clock()
                if wait > 0:
                    await self._sleep(wait)
                started = self._clock()
                self._next_call_at = started + _MIN_CALL_INTERVAL
                self.calls += 1
                reply = await self._client.call(
                    "GetRecords",
                    {"ShardIterator": self._iterator, "Limit": _PAGE, **self._records_params},
                    epoch_timestamps=True,  # the Arrow batch wants milliseconds, not datetimes
                )
                return self._charged(started, check_records_reply(reply, where=self._where))
            except ExpiredIteratorError:
                self._iterator = None  # a new one from the last record read
                failures += 1
            except ValidationError as exc:
                # The service refuses the position: a sequence number of another shard or
                # stream (offsets mixed up), never something a retry cures.
                raise ShardUnreadableError(
                    f"{self._where}: the service refuses to read from "
                    f"{self._last_sequence or self._start.describe()} ({exc}); the offsets do "
                    "not belong to this shard",
                    stream=self._stream,
                    shard_id=self._shard_id,
                    position=self._last_sequence or self._start.describe(),
                ) from exc
            except (MalformedReplyError, ResourceNotFoundError) as exc:
                failures += 1
                if failures > _RETRIES:
                    if isinstance(exc, ResourceNotFoundError):
                        raise ShardUnreadableError(
                            f"{self._where}: the shard cannot be read ({exc}); nothing was "
                            "marked finished, the task fails so the range can be read again",
                            stream=self._stream,
                            shard_id=self._shard_id,
                            position=self._last_sequence or self._start.describe(),
                        ) from exc
                    raise
                self._iterator = None
            if failures > _RETRIES:
                raise RangeReadError(f"{self._where}: iterators keep expiring")
            await self._sleep(min(_IDLE_MAX, _IDLE_INITIAL * 2**failures))

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next rows of the range (``RECORD_SCHEMA``), or None once it is complete."""
        idle = _IDLE_INITIAL
        stalled_since = self._clock()
        while not self._done:
            page = await self._page()
            self._iterator = page.next_iterator
            records = page.records
            if records:
                stalled_since = self._clock()
                idle = _IDLE_INITIAL
                batch = self._rows(records)
                if batch is not None and batch.num_rows:
                    self.rows += batch.num_rows
                    return batch
                continue
            if page.ended:
                if self._end.finished:
                    self._done = True
                    break
                raise RangeReadError(
                    f"{self._where}: the shard ended before the micro-batch's end "
                    f"{self._end.describe()}; the offsets do not match the stream"
                )
            if self._clock() - stalled_since > self._wait_timeout:
                raise RangeReadError(
                    f"{self._where}: waited {self._wait_timeout:g} s (option replayTimeout) at "
                    f"the shard's tip for records up to {self._end.describe()}, which the "
                    "driver saw; were they trimmed past the retention period?"
                )
            if page.millis_behind == 0:
                await self._sleep(idle)
                idle = min(idle * 2, _IDLE_MAX)
        return None

    def _check_start(self, first: dict[str, Any]) -> None:
        bound = self._start.bound
        if bound is None or bound.sub >= AFTER or self._last_sequence is not None:
            return
        if int(first["SequenceNumber"]) != bound.sequence:
            raise RangeReadError(
                f"{self._where}: the micro-batch starts at record {bound.sequence} but the "
                f"shard's first record there is {first['SequenceNumber']}: it was trimmed "
                "past the retention period, or the offsets do not match the stream"
            )

    def _rows(self, records: list[dict[str, Any]]) -> pa.RecordBatch | None:
        """The page's rows inside the range; marks the range done at its end record."""
        self._check_start(records[0])
        end = self._end.bound
        keep = len(records)
        boundary: dict[str, Any] | None = None
        if end is not None:
            for index, record in enumerate(records):
                sequence = int(record["SequenceNumber"])
                if sequence >= end.sequence:
                    if sequence != end.sequence:
                        raise RangeReadError(
                            f"{self._where}: the micro-batch ends at record {end.sequence}, "
                            f"which the shard does not have (next is {sequence}); the offsets "
                            "do not match the stream"
                        )
                    keep, boundary = index, record
                    self._done = True
                    break
        built = build_record_batch(self._stream, self._shard_id, records[:keep], after=self._skip)
        batches = [built.batch] if built.batch.num_rows else []
        if boundary is not None and end is not None and end.sub > BEFORE:
            last = build_record_batch(self._stream, self._shard_id, [boundary], after=self._skip)
            tail = last.batch
            if end.sub < AFTER:
                tail = tail.filter(pc.less_equal(tail.column(3), end.sub))
            if tail.num_rows:
                batches.append(tail)
        self._last_sequence = (
            str(records[keep - 1]["SequenceNumber"]) if keep else self._last_sequence
        )
        if keep:
            self._skip = None
        if not batches:
            return None
        if len(batches) == 1:
            return batches[0]
        return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


@dataclass(frozen=True, slots=True)
class ShardRange:
    """One shard's range of a micro-batch: what a task reads of it."""

    stream: str
    """The stream's name or ARN, as the calls send it."""
    shard_id: str
    start: ShardEntry
    end: ShardEntry

    def empty(self) -> bool:
        return self.start.finished or (self.end.bound is None and not self.end.finished)


async def _read_all(
    client: KinesisClient,
    ranges: Sequence[ShardRange],
    send: MemoryObjectSendStream[pa.RecordBatch],
    wait_timeout: float,
    max_bytes_per_second: float | None = None,
) -> None:
    """Read every range concurrently (at most ``_SHARDS_AT_ONCE`` at a time) into ``send``.

    One failure cancels the rest and is raised as itself, not in a group: the task fails
    with the error that names the shard.
    """
    limiter = anyio.CapacityLimiter(_SHARDS_AT_ONCE)
    failures: list[BaseException] = []

    async def one(shard: ShardRange) -> None:
        try:
            async with limiter:
                reader = RangeReader(
                    client,
                    shard.stream,
                    shard.shard_id,
                    shard.start,
                    shard.end,
                    wait_timeout=wait_timeout,
                    max_bytes_per_second=max_bytes_per_second,
                )
                while (batch := await reader.next_batch()) is not None:
                    await send.send(batch)
        except Exception as exc:
            failures.append(exc)
            group.cancel_scope.cancel()

    # ``send`` is closed once every reader is done (or cancelled): the task's end of stream.
    async with send, anyio.create_task_group() as group:
        for shard in ranges:
            group.start_soon(one, shard)
    if failures:
        raise failures[0]


async def _receive_some(
    receive: MemoryObjectReceiveStream[pa.RecordBatch],
) -> list[pa.RecordBatch]:
    """The next page, and those already waiting after it, up to the coalescing bounds.

    Raises :class:`anyio.EndOfStream` only when nothing was taken."""
    batches = [await receive.receive()]
    rows, nbytes = batches[0].num_rows, batches[0].nbytes
    while rows < _COALESCE_ROWS and nbytes < _COALESCE_BYTES:
        try:
            batch = receive.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            break
        batches.append(batch)
        rows += batch.num_rows
        nbytes += batch.nbytes
    return batches


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of ``batches``' rows, in order (``pa.concat_batches`` is pyarrow 19's)."""
    combined: pa.RecordBatch = pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    return combined


def read_ranges(
    connection: Connection,
    ranges: Sequence[ShardRange],
    *,
    timeout: float,
    max_bytes_per_second: float | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of every range (sync, for ``read`` on an executor): the shards are read
    concurrently on the process's shared loop (``_worker``), each shard's pages in order.

    Memory: the batches go through an unbuffered channel, so each shard being read holds at
    most one page while it waits for the task to take it (``_SHARDS_AT_ONCE`` pages). Pages
    waiting together are handed on as one batch (``_COALESCE_ROWS``, ``_COALESCE_BYTES``):
    the task holds at most that much more.
    """
    todo = [shard for shard in ranges if not shard.empty()]
    if not todo:
        return
    loop = shared_loop(connection)
    portal = loop.portal
    send, receive = anyio.create_memory_object_stream[pa.RecordBatch](0)
    future = portal.start_task_soon(
        _read_all, loop.client, todo, send, timeout, max_bytes_per_second
    )
    try:
        while True:
            try:
                batches = portal.call(_receive_some, receive)
            except anyio.EndOfStream:
                break
            yield batches[0] if len(batches) == 1 else _concat(batches)
        future.result()
    finally:
        if not future.done():
            future.cancel()  # the task was stopped early (a limit, a failure elsewhere)
        portal.call(receive.aclose)
