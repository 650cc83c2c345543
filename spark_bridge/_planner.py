"""The driver's planner: one trigger over every shard, on an event loop thread of its own.

Spark keeps one long-lived Python process per query for the reader's driver side. The
planner lives there with one :class:`KinesisClient` (pooled connections) on a blocking
portal. Per trigger it lists shards when due, checks each stream's identity once, and plans
every eligible shard concurrently (the calls for one shard are in ``_shard_reads``):

* **anchor mode** (no row or byte limit): probe, anchor, and a tail read only when there is
  no anchor (``_policy`` has the why). A busy shard costs two calls (its cut is before the
  record it anchored on, so no probe), a quiet one two or one, an idle one one call:
  iterators that end exactly at a cut are kept for the next trigger (they live 5 minutes).
  Outside ``Trigger.AvailableNow``, idle shards past a few dozen share a budget of probes
  (``_idle``); AvailableNow probes every shard, every trigger;
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
from datetime import datetime
from typing import Any

import anyio
from anyio.from_thread import start_blocking_portal

from kinesis_actors import KinesisClient
from kinesis_actors.client import is_retryable, stream_params
from kinesis_actors.errors import (
    KinesisError,
    MalformedReplyError,
    ResourceNotFoundError,
    ServiceError,
    ShardUnreadableError,
    TransportError,
    ValidationError,
)

from ._idle import IdleProbes
from ._offsets import Offset, ShardEntry, StreamIdentity, check_identity
from ._options import SourceOptions
from ._policy import (
    PlannerSettings,
    ShardInfo,
    add_new_shards,
    eligible,
    shares,
)
from ._shard_reads import Outcome, ShardReads

__all__ = ["Planner", "TriggerPlan"]

log = logging.getLogger("spark_bridge.source")

ShardKey = tuple[str, str]

_LIST_INTERVAL = 5.0
"""ListShards at most this often per stream, and whenever a shard is seen to end."""
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
class _State:
    listing: dict[ShardKey, ShardInfo] = field(default_factory=dict)
    listed_at: dict[str, float] = field(default_factory=dict)
    identities: dict[str, StreamIdentity] = field(default_factory=dict)
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
        self._idle = IdleProbes()
        self._reads = ShardReads(
            self._call,
            self._settings,
            clock,
            refs={stream: options.ref(stream) for stream in options.streams},
        )

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
        # Arrival times as epoch seconds: the planner turns them into milliseconds at once.
        reply = await self._client.call(operation, params, epoch_timestamps=True)
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
                    if isinstance(exc, TransportError) and not is_retryable(exc):
                        raise  # a certificate that fails verification: permanent
                    if stream in state.listed_at:
                        log.warning("listing %s failed (%s); using the last listing", stream, exc)
                        break
                    if attempt == _LIST_TRIES - 1:
                        raise
                    await anyio.sleep(0.2 * 2**attempt)

    async def _list_stream(self, stream: str, now: float) -> None:
        state = self._state
        if stream not in state.identities:
            reply = await self._call(
                "DescribeStreamSummary", stream_params(self._options.ref(stream))
            )
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
        params: dict[str, Any] = stream_params(self._options.ref(stream))
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
        outcomes: dict[ShardKey, Outcome | BaseException] = {}
        pace_idle = target_ms is None and max_rows is None and max_bytes is None
        if pace_idle:
            skipped = self._idle.skipped(todo, self._clock())
            todo = [key for key in todo if key not in skipped]
        if max_rows is None and max_bytes is None:
            # At most _CONCURRENCY tasks, each taking the next shard: a task and a limiter's
            # turn per shard cost the idle query's probes a tenth of its CPU.
            keys = iter(todo)

            async def worker() -> None:
                for key in keys:
                    outcomes[key] = await self._guarded(
                        self._reads.anchor_mode(key, end.shards[key], now_ms, target_ms)
                    )

            async with anyio.create_task_group() as group:
                for _ in range(min(_CONCURRENCY, len(todo))):
                    group.start_soon(worker)
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
            if pace_idle:
                if outcome.idle:
                    self._idle.found_idle(key, self._clock())
                else:
                    self._idle.found_busy(key)
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

    async def _guarded(self, work: Any) -> Outcome | BaseException:
        try:
            result: Outcome = await work
        except KinesisError as exc:
            return exc
        return result

    # -- reads ----------------------------------------------------------------------------------

    async def _limits_mode(
        self,
        *,
        todo: list[ShardKey],
        end: Offset,
        max_rows: int | None,
        max_bytes: int | None,
        target_ms: int | None,
        outcomes: dict[ShardKey, Outcome | BaseException],
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
                outcomes[key] = Outcome(final=False)
                continue
            nothing_before = rows_left == max_rows and bytes_left == max_bytes
            outcome = await self._guarded(
                self._reads.read_within(
                    key=key,
                    entry=end.shards[key],
                    rows_share=rows_share,
                    bytes_share=bytes_share,
                    target_ms=target_ms,
                    nothing_taken=nothing_before,
                )
            )
            outcomes[key] = outcome
            if isinstance(outcome, Outcome):
                if rows_left is not None:
                    rows_left -= outcome.rows
                if bytes_left is not None:
                    bytes_left -= outcome.nbytes
