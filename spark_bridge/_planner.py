"""The driver's planner: the I/O around ``_policy``, on an event loop thread of its own.

Spark keeps one long-lived Python process per query for the reader's driver side. The
planner lives there with one :class:`KinesisClient` (pooled connections) on a blocking
portal. Per trigger it lists shards when due, checks each stream's identity once, and plans
every eligible shard concurrently:

* **anchor mode** (no row or byte limit): probe, anchor, and a tail read only when there is
  no anchor (``_policy`` has the why). A busy shard costs three calls, an idle one one call:
  iterators that end exactly at a cut are kept for the next trigger (they live 5 minutes);
* **limits mode** (``maxRecordsPerTrigger`` / ``maxBytesPerTrigger``, or a ``ReadMaxRows`` /
  ``ReadMaxBytes`` from the engine): the limits count user records, which only reading
  tells, so the driver reads pages from the start, deaggregates and cuts at the limit, even
  inside an aggregate. The rows are dropped: the tasks read them again.

A failure while planning a shard (a garbled reply after the client's retries, a passing
ResourceNotFound) holds that shard back for this trigger and never marks it finished; after
``_FAILURES_TO_RAISE`` plans in a row it fails the query, naming the shard.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
from anyio.from_thread import start_blocking_portal

from kinesis_actors import KinesisClient
from kinesis_actors.errors import (
    ExpiredIteratorError,
    KinesisError,
    MalformedReplyError,
    ResourceNotFoundError,
    ServiceError,
    ShardUnreadableError,
    TransportError,
    ValidationError,
)
from kinesis_actors.records import build_record_batch

from ._offsets import AFTER, BEFORE, Bound, Offset, ShardEntry, StreamIdentity, check_identity
from ._options import SourceOptions
from ._policy import (
    PlannerSettings,
    Records,
    Seen,
    ShardInfo,
    add_new_shards,
    after_tail,
    anchor_cut,
    check_records_reply,
    cut_time,
    eligible,
    row_bound,
    seen,
    shares,
    take_rows,
)

__all__ = ["Planner", "TriggerPlan"]

log = logging.getLogger("spark_bridge.source")

ShardKey = tuple[str, str]

_ITERATOR_LIFE = 240.0
"""Kept iterators are dropped after 4 minutes (the service expires them after 5)."""
_LIST_INTERVAL = 5.0
"""ListShards at most this often per stream, and whenever a shard is seen to end."""
_HOPS = 3
"""Empty pages followed (MillisBehindLatest > 0) to find the first record past a point."""
_TAIL_PAGES = 10
_TAIL_PEEK = 5
"""Records read after the first one before searching: a quiet shard's tail ends there."""
_TAIL_SPAN_MS = 100
_SEARCH_STEPS = 8
_LIMIT_PAGES = 20
_FAILURES_TO_RAISE = 10
_LIST_TRIES = 4
_CONCURRENCY = 16


@dataclass(slots=True)
class TriggerPlan:
    """One trigger's plan: the end offset, whether anything moved, and whether every shard
    was cut as late as the trigger allows (AvailableNow ends when nothing moved and all were)."""

    end: Offset
    moved: bool = False
    final: bool = True
    rows: int = 0
    nbytes: int = 0


@dataclass(slots=True)
class _Outcome:
    entry: ShardEntry | None = None
    final: bool = True
    behind_ms: int = 0
    rows: int = 0
    nbytes: int = 0
    stop: bool = False


@dataclass(slots=True)
class _Kept:
    """An iterator that starts exactly at ``entry``'s cut."""

    entry: str
    iterator: str
    since: float


@dataclass(slots=True)
class _State:
    listing: dict[ShardKey, ShardInfo] = field(default_factory=dict)
    listed_at: dict[str, float] = field(default_factory=dict)
    identities: dict[str, StreamIdentity] = field(default_factory=dict)
    kept: dict[ShardKey, _Kept] = field(default_factory=dict)
    failures: Counter[ShardKey] = field(default_factory=Counter)


class Planner:
    """Plans micro-batches for one query, from the driver; see the module docstring."""

    def __init__(
        self, options: SourceOptions, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._options = options
        self._settings = PlannerSettings(window_ms=options.window_ms, settle_ms=options.settle_ms)
        self._clock = clock
        self._state = _State()
        self._stack = ExitStack()
        self._portal = self._stack.enter_context(start_blocking_portal())
        self._client = KinesisClient(**options.connection.client_kwargs())
        self._portal.call(self._client.__aenter__)
        self.behind_ms: dict[ShardKey, int] = {}
        self.calls: Counter[str] = Counter()

    def close(self) -> None:
        try:
            self._portal.call(self._client.aclose)
        finally:
            self._stack.close()

    # -- sync entry points (the Spark thread) -------------------------------------------------

    def plan(
        self, start: Offset, *, max_rows: int | None, max_bytes: int | None, target_ms: int | None
    ) -> TriggerPlan:
        now_ms = int(time.time() * 1000)
        result: TriggerPlan = self._portal.call(
            self._plan, start, max_rows, max_bytes, target_ms, now_ms
        )
        return result

    def list_now(self) -> dict[ShardKey, ShardInfo]:
        self._portal.call(self._list, True)
        return dict(self._state.listing)

    # -- the loop thread ------------------------------------------------------------------------

    async def _call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        self.calls[operation] += 1
        reply = await self._client.call(operation, params)
        if not isinstance(reply, dict):
            raise MalformedReplyError(
                f"{operation}: the reply is not an object", operation=operation
            )
        return reply

    async def _list(self, force: bool = False) -> None:
        """Describe (once) and list every stream when due. A failure keeps the last listing
        (shards are then planned as they were) and is tried again at the next trigger; only
        a stream never listed fails the trigger, after a few tries."""
        state = self._state
        now = self._clock()
        for stream in self._options.streams:
            if not force and now - state.listed_at.get(stream, -1e9) < _LIST_INTERVAL:
                continue
            for attempt in range(_LIST_TRIES):
                try:
                    await self._list_stream(stream, now)
                    break
                except (
                    MalformedReplyError,
                    ServiceError,
                    TransportError,
                    ResourceNotFoundError,
                ) as exc:
                    if stream in state.listed_at:
                        log.warning("listing %s failed (%s); using the last listing", stream, exc)
                        break
                    if attempt == _LIST_TRIES - 1:
                        raise
                    await anyio.sleep(0.2 * 2**attempt)

    async def _list_stream(self, stream: str, now: float) -> None:
        state = self._state
        if stream not in state.identities:
            reply = await self._call("DescribeStreamSummary", {"StreamName": stream})
            summary = reply.get("StreamDescriptionSummary")
            if not isinstance(summary, dict) or not isinstance(summary.get("StreamARN"), str):
                raise MalformedReplyError(
                    "DescribeStreamSummary without a StreamARN",
                    operation="DescribeStreamSummary",
                )
            created = summary.get("StreamCreationTimestamp")
            if not isinstance(created, datetime):
                raise MalformedReplyError(
                    "DescribeStreamSummary without a creation time",
                    operation="DescribeStreamSummary",
                )
            state.identities[stream] = StreamIdentity(
                summary["StreamARN"], int(created.timestamp() * 1000 + 0.5)
            )
        listing: dict[ShardKey, ShardInfo] = {}
        params: dict[str, Any] = {"StreamName": stream}
        while True:
            reply = await self._call("ListShards", params)
            shards = reply.get("Shards")
            if not isinstance(shards, list):
                raise MalformedReplyError(
                    "ListShards without a Shards list", operation="ListShards"
                )
            for shard in shards:
                if not isinstance(shard, dict) or not isinstance(shard.get("ShardId"), str):
                    raise MalformedReplyError(
                        "ListShards: a shard without a ShardId", operation="ListShards"
                    )
                parents = tuple(
                    p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p
                )
                listing[(stream, shard["ShardId"])] = ShardInfo(parents)
            token = reply.get("NextToken")
            if not token:
                break
            params = {"NextToken": token}
        for key in [k for k in state.listing if k[0] == stream]:
            del state.listing[key]
        state.listing.update(listing)
        state.listed_at[stream] = now

    async def _plan(
        self,
        start: Offset,
        max_rows: int | None,
        max_bytes: int | None,
        target_ms: int | None,
        now_ms: int,
    ) -> TriggerPlan:
        state = self._state
        await self._list()
        for stream, identity in state.identities.items():
            check_identity(stream, start.identities.get(stream), identity)
        end = Offset(shards=dict(start.shards), identities=dict(state.identities))
        add_new_shards(end, state.listing, self._options.streams)
        plan = TriggerPlan(end=end)
        listed_streams = set(state.listed_at)
        for key, entry in sorted(end.shards.items()):
            if key[0] in listed_streams and key not in state.listing and not entry.finished:
                log.warning("%s/%s is no longer listed (expired past retention): finished", *key)
                end.shards[key] = ShardEntry(finished=True)
                plan.moved = True
        todo = [
            key
            for key, entry in sorted(end.shards.items())
            if not entry.finished and eligible(key, state.listing, end)
        ]
        outcomes: dict[ShardKey, _Outcome | BaseException] = {}
        if max_rows is None and max_bytes is None:
            limiter = anyio.CapacityLimiter(_CONCURRENCY)

            async def one(key: ShardKey) -> None:
                async with limiter:
                    outcomes[key] = await self._guarded(
                        self._anchor_mode(key, end.shards[key], now_ms, target_ms)
                    )

            async with anyio.create_task_group() as group:
                for key in todo:
                    group.start_soon(one, key)
        else:
            await self._limits_mode(
                todo=todo,
                end=end,
                max_rows=max_rows,
                max_bytes=max_bytes,
                target_ms=target_ms,
                outcomes=outcomes,
            )
        ended = False
        for key, outcome in outcomes.items():
            if isinstance(outcome, BaseException):
                plan.final = False
                state.failures[key] += 1
                log.warning(
                    "planning %s/%s failed (%s); the shard waits for the next trigger",
                    *key,
                    outcome,
                )
                # The service refusing a stored position (a sequence number of another shard)
                # is not cured by asking again: fail at once.
                if state.failures[key] >= _FAILURES_TO_RAISE or isinstance(
                    outcome, ValidationError
                ):
                    raise ShardUnreadableError(
                        f"{key[0]}/{key[1]}: planning failed {state.failures[key]} times in a "
                        f"row: {outcome}",
                        stream=key[0],
                        shard_id=key[1],
                        position=end.shards[key].describe(),
                    ) from outcome
                continue
            state.failures.pop(key, None)
            self.behind_ms[key] = outcome.behind_ms
            plan.final = plan.final and outcome.final
            plan.rows += outcome.rows
            plan.nbytes += outcome.nbytes
            if outcome.entry is not None:
                end.shards[key] = outcome.entry
                plan.moved = True
                ended = ended or outcome.entry.finished
        if ended:
            state.listed_at.clear()  # children to discover
        return plan

    async def _guarded(self, work: Any) -> _Outcome | BaseException:
        try:
            result: _Outcome = await work
        except KinesisError as exc:
            return exc
        return result

    # -- reads ----------------------------------------------------------------------------------

    async def _iterator(self, key: ShardKey, params: dict[str, Any]) -> str:
        reply = await self._call(
            "GetShardIterator", {"StreamName": key[0], "ShardId": key[1], **params}
        )
        iterator = reply.get("ShardIterator")
        if not isinstance(iterator, str):
            raise MalformedReplyError(
                "GetShardIterator without a ShardIterator", operation="GetShardIterator"
            )
        return iterator

    async def _records(self, key: ShardKey, iterator: str, limit: int) -> Records:
        reply = await self._call("GetRecords", {"ShardIterator": iterator, "Limit": limit})
        return check_records_reply(reply, where=f"{key[0]}/{key[1]}")

    def _keep(self, key: ShardKey, entry: ShardEntry, iterator: str | None) -> None:
        if iterator is None:
            self._state.kept.pop(key, None)
        else:
            self._state.kept[key] = _Kept(entry.describe(), iterator, self._clock())

    async def _from(self, key: ShardKey, entry: ShardEntry, limit: int) -> tuple[str, Records]:
        """A page from ``entry``'s cut: through the kept iterator when there is one."""
        kept = self._state.kept.pop(key, None)
        if (
            kept is not None
            and kept.entry == entry.describe()
            and self._clock() - kept.since < _ITERATOR_LIFE
        ):
            try:
                return kept.iterator, await self._records(key, kept.iterator, limit)
            except ExpiredIteratorError:
                pass
        iterator = await self._iterator(key, entry.iterator_params())
        return iterator, await self._records(key, iterator, limit)

    async def _first(self, key: ShardKey, iterator: str, page: Records) -> tuple[str, Records]:
        """Follow empty pages that are behind the tip, to the first record (bounded)."""
        hops = 0
        while not page.records and not page.ended and page.millis_behind > 0 and hops < _HOPS:
            assert page.next_iterator is not None
            iterator = page.next_iterator
            page = await self._records(key, iterator, 1)
            hops += 1
        return iterator, page

    async def _anchor_mode(
        self, key: ShardKey, entry: ShardEntry, now_ms: int, target_ms: int | None
    ) -> _Outcome:
        iterator, probe = await self._from(key, entry, 1)
        iterator, probe = await self._first(key, iterator, probe)
        if not probe.records:
            if probe.ended:
                return _Outcome(ShardEntry(finished=True))
            if probe.millis_behind > 0:
                return _Outcome(final=False)  # empty pages past the hops: look again next time
            self._keep(key, entry, probe.next_iterator)  # idle: one call next time too
            return _Outcome()
        first = seen(probe.records[0])
        when = cut_time(self._settings, now_ms=now_ms, first=first, target_ms=target_ms)
        anchor, anchor_iterator, ended, behind = await self._anchor(key, when.ms)
        if anchor is not None:
            cut = anchor_cut(entry, first, anchor)
            if cut is not None:
                self._keep(key, cut, anchor_iterator)
                return _Outcome(cut, when.final, behind)
            if when.final:  # the anchor is the first record: it arrived within the settle lag
                self._keep(key, entry, iterator)
                return _Outcome(None, True, behind)
            # A window past the first record found the first record or one before it: the
            # arrival times are out of order here. Read on instead, so the shard moves.
        elif ended:
            return _Outcome(ShardEntry(finished=True), when.final)
        cut, following = await self._tail(key, entry, first, probe, when.ms)
        self._keep(key, cut or entry, following)
        return _Outcome(cut, when.final)

    async def _anchor(
        self, key: ShardKey, when_ms: int
    ) -> tuple[Seen | None, str | None, bool, int]:
        """The first record at or after ``when_ms``: (record, its iterator, shard ended, behind)."""
        try:
            iterator = await self._iterator(
                key,
                {
                    "ShardIteratorType": "AT_TIMESTAMP",
                    "Timestamp": datetime.fromtimestamp(when_ms / 1000, UTC),
                },
            )
        except ValidationError:
            return None, None, False, 0  # T is in the service's future (clock skew): no anchor
        page = await self._records(key, iterator, 1)
        found_at, page = await self._first(key, iterator, page)
        if page.records:
            return seen(page.records[0]), found_at, False, page.millis_behind
        return None, None, page.ended, 0

    async def _tail(
        self, key: ShardKey, entry: ShardEntry, first: Seen, probe: Records, when_ms: int
    ) -> tuple[ShardEntry | None, str | None]:
        """No anchor: cut after the shard's last record (or just before one that arrived at or
        after ``when_ms`` meanwhile). The driver must see the last record, not read up to it:

        1. a small page after the first record: a quiet shard's few records end there;
        2. otherwise a binary search on arrival time for a record within ``_TAIL_SPAN_MS`` of
           ``when_ms`` (two calls a step, at most ``_SEARCH_STEPS``), then the pages from it.

        So the driver reads about ``_TAIL_SPAN_MS`` of the stream, not a window of it.
        """
        if probe.ended:
            return ShardEntry(finished=True), None
        assert probe.next_iterator is not None
        page = await self._records(key, probe.next_iterator, _TAIL_PEEK)
        last, cut = self._scan(entry, first, first, page, when_ms)
        if cut is not None:
            return cut, None
        if page.ended:
            return ShardEntry(finished=True), None
        if len(page.records) < _TAIL_PEEK and page.millis_behind == 0:
            return after_tail(entry, last), page.next_iterator
        iterator = page.next_iterator
        low, high = last, when_ms
        for _ in range(_SEARCH_STEPS):
            if high - low.arrival_ms <= _TAIL_SPAN_MS:
                break
            middle = (low.arrival_ms + high) // 2
            found, found_at, _, _ = await self._anchor(key, middle)
            if found is not None and found.sequence > low.sequence and found_at is not None:
                low, iterator = found, found_at
                last = found
            else:
                high = middle
        for _ in range(_TAIL_PAGES):
            assert iterator is not None
            page = await self._records(key, iterator, 10_000)
            last, cut = self._scan(entry, first, last, page, when_ms)
            if cut is not None:
                return cut, None
            if page.ended:
                return ShardEntry(finished=True), None
            iterator = page.next_iterator
            if not page.records and page.millis_behind == 0:
                break
        return after_tail(entry, last), iterator

    @staticmethod
    def _scan(
        entry: ShardEntry, first: Seen, last: Seen, page: Records, when_ms: int
    ) -> tuple[Seen, ShardEntry | None]:
        """The page's last record, or the cut before its first record at or after ``when_ms``."""
        for record in page.records:
            this = seen(record)
            if this.arrival_ms >= when_ms:
                return last, anchor_cut(entry, first, this)
            last = this
        return last, None

    async def _limits_mode(
        self,
        *,
        todo: list[ShardKey],
        end: Offset,
        max_rows: int | None,
        max_bytes: int | None,
        target_ms: int | None,
        outcomes: dict[ShardKey, _Outcome | BaseException],
    ) -> None:
        """Read from each shard's start within its share of the limits, in turn (the first
        shard rotates per trigger, so no shard is always last)."""
        if not todo:
            return
        turn = int(self._clock() * 10) % len(todo)
        order = todo[turn:] + todo[:turn]
        rows_left, bytes_left = max_rows, max_bytes
        for index, key in enumerate(order):
            remaining = len(order) - index
            rows_share = None if rows_left is None else max(shares(rows_left, remaining)[0], 0)
            bytes_share = None if bytes_left is None else max(shares(bytes_left, remaining)[0], 0)
            if (rows_share is not None and rows_share <= 0) or (
                bytes_share is not None and bytes_share <= 0
            ):
                outcomes[key] = _Outcome(final=False)
                continue
            nothing_before = rows_left == max_rows and bytes_left == max_bytes
            outcome = await self._guarded(
                self._read_within(
                    key=key,
                    entry=end.shards[key],
                    rows_share=rows_share,
                    bytes_share=bytes_share,
                    target_ms=target_ms,
                    nothing_taken=nothing_before,
                )
            )
            outcomes[key] = outcome
            if isinstance(outcome, _Outcome):
                if rows_left is not None:
                    rows_left -= outcome.rows
                if bytes_left is not None:
                    bytes_left -= outcome.nbytes

    async def _read_within(
        self,
        *,
        key: ShardKey,
        entry: ShardEntry,
        rows_share: int | None,
        bytes_share: int | None,
        target_ms: int | None,
        nothing_taken: bool,
    ) -> _Outcome:
        rows_room, bytes_room = rows_share, bytes_share
        skip = None
        bound = entry.bound
        if bound is not None and BEFORE < bound.sub < AFTER:
            skip = (str(bound.sequence), bound.sub)
        outcome = _Outcome(final=True)
        current = entry
        limit = 10_000 if rows_room is None else min(10_000, rows_room)
        iterator, page = await self._from(key, entry, limit)
        for _ in range(_LIMIT_PAGES):
            if not page.records:
                if page.ended:
                    outcome.entry = ShardEntry(finished=True)
                    self._keep(key, entry, None)
                    return outcome
                if page.millis_behind == 0:
                    self._keep(key, current, page.next_iterator)
                    break
            else:
                batch = build_record_batch(key[0], key[1], page.records, after=skip).batch
                skip = None
                take = take_rows(
                    batch,
                    rows_room=None if rows_room is None else rows_room - outcome.rows,
                    bytes_room=None if bytes_room is None else bytes_room - outcome.nbytes,
                    nothing_taken=nothing_taken and outcome.rows == 0,
                    target_ms=target_ms,
                )
                outcome.rows += take.rows
                outcome.nbytes += take.nbytes
                if take.rows == batch.num_rows and not take.stop:
                    last = seen(page.records[-1])
                    current = ShardEntry(
                        bound=Bound(last.sequence, AFTER), arrival_ms=last.arrival_ms
                    )
                    outcome.entry = current
                else:
                    if take.rows:
                        outcome.entry = ShardEntry(bound=row_bound(batch, take.rows - 1))
                    self._keep(key, entry, None)
                    outcome.stop = True
                    return outcome
            if page.next_iterator is None:
                break
            iterator = page.next_iterator
            if rows_room is not None and outcome.rows >= rows_room:
                self._keep(key, current, iterator)
                break
            left = 10_000 if rows_room is None else min(10_000, rows_room - outcome.rows)
            page = await self._records(key, iterator, left)
        return outcome
