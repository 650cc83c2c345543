"""The EFO reader against the local server's TLS port (HTTP/2): faults, isolation, shard end.

Faults are injected by wrapping ``client.subscribe_to_shard`` (the only mock here): a
subscription cut mid-stream, an exception event, silence past the watchdog, ResourceInUse on
resubscribe, resets on every shard at once. Everything else is the real server.
"""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, errors
from kinesis_actors.consumer import Consumer, ConsumerConfig, RecordBatch, StartingPosition
from kinesis_actors.records import ShardMap

from .helpers import Row, assert_in_shard_order, by_data, consume, put_plain, rows, shard_map
from .test_resharding_local import KEYS, ROUNDS, check_per_key_order, produce_while_resharding

pytestmark = pytest.mark.anyio


def efo(**options: Any) -> ConsumerConfig:
    return ConsumerConfig(
        mode="efo", start=StartingPosition.trim_horizon(), shard_discovery_interval=0.5, **options
    )


class FaultySubscriptions:
    """Wraps ``client.subscribe_to_shard``; subscription *n* gets ``plan[n]``:

    ``"in_use"`` (ResourceInUse at open), ``"cut"`` (transport failure after its first event
    with records), ``"exception"`` (an exception event there), ``"stall"`` (silence there),
    anything else: untouched.
    """

    def __init__(self, client: KinesisClient, plan: list[str]) -> None:
        self._real = client.subscribe_to_shard
        self.plan = plan
        self.positions: list[Mapping[str, Any]] = []
        self.stalled = anyio.Event()

    @asynccontextmanager
    async def __call__(
        self, arn: str, shard_id: str, position: Mapping[str, Any], **options: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        fault = self.plan[len(self.positions)] if len(self.positions) < len(self.plan) else ""
        self.positions.append(dict(position))
        if fault == "in_use":
            raise errors.ResourceInUseError("injected", code="ResourceInUseException")
        async with self._real(arn, shard_id, position, **options) as subscription:
            yield self._events(subscription, fault)

    async def _events(
        self, subscription: AsyncIterable[dict[str, Any]], fault: str
    ) -> AsyncIterator[dict[str, Any]]:
        async for event in subscription:
            yield event
            if not event.get("Records"):
                continue
            if fault == "cut":
                raise errors.TransportError("injected: connection reset")
            if fault == "exception":
                raise errors.ServiceError("injected", code="InternalFailureException")
            if fault == "stall":
                self.stalled.set()
                await anyio.sleep_forever()


async def put_round(client: KinesisClient, stream: str, round_: int, keys: list[str]) -> None:
    records = [{"Data": f"{key}:{round_}".encode(), "PartitionKey": key} for key in keys]
    result = await client.call("PutRecords", {"StreamName": stream, "Records": records})
    assert result["FailedRecordCount"] == 0


@pytest.mark.slow
async def test_faults_resubscribe_from_the_right_position(
    client: KinesisClient, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cut, an exception event, ResourceInUse on resubscribe and a silence past the
    watchdog, one after the other on one shard: nothing lost, nothing twice. (Renewals:
    the isolation test below.)"""
    await client.create_stream(stream_name, 1)
    faults = FaultySubscriptions(client, ["cut", "exception", "in_use", "stall"])
    monkeypatch.setattr(client, "subscribe_to_shard", faults)
    config = efo(efo_watchdog_timeout=2.5)
    seen: list[Row] = []
    rounds = 0
    async with Consumer(client, stream_name, config) as consumer:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:

                async def produce() -> None:
                    nonlocal rounds
                    # Keep writing until every fault happened and a clean subscription followed.
                    while len(faults.positions) < 5:
                        await put_round(client, stream_name, rounds, ["a", "b"])
                        rounds += 1
                        await anyio.sleep(0.2)
                    tg.cancel_scope.cancel()

                tg.start_soon(produce)
                async for batch in consumer:
                    seen.extend(rows(batch))
                    consumer.commit(batch)
            while len(seen) < 2 * rounds:
                batch = await consumer.__anext__()
                seen.extend(rows(batch))
        metrics = consumer.statistics().shards[(stream_name, "shardId-000000000000")]
    assert len(seen) == 2 * rounds
    assert set(by_data(seen).values()) == {1}
    assert_in_shard_order(seen)
    causes = metrics.resubscriptions
    assert causes["error"] >= 2 and causes["watchdog"] >= 1, causes
    assert causes["resource_in_use"] >= 1, causes
    assert metrics.events >= metrics.batches
    # Every resubscription starts right after the last continuation the reader had.
    assert faults.positions[0] == {"Type": "TRIM_HORIZON"}
    assert all(p["Type"] == "AFTER_SEQUENCE_NUMBER" for p in faults.positions[1:])


class ResetEveryShard:
    """Wraps ``client.subscribe_to_shard``: each shard's first ``resets`` subscriptions are
    reset before they reach the server (a network blip drops every connection at once)."""

    def __init__(self, client: KinesisClient, resets: int) -> None:
        self._real = client.subscribe_to_shard
        self.resets = resets
        self.done: dict[str, int] = {}

    @asynccontextmanager
    async def __call__(
        self, arn: str, shard_id: str, position: Mapping[str, Any], **options: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        if self.done.get(shard_id, 0) < self.resets:
            self.done[shard_id] = self.done.get(shard_id, 0) + 1
            raise errors.TransportError("injected: connection reset")
        async with self._real(arn, shard_id, position, **options) as subscription:
            yield aiter(subscription)


async def test_a_burst_of_resets_on_many_shards_at_once_does_not_fail_the_consumer(
    client: KinesisClient,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """one restart budget (5 within 30 s) was shared by every shard's reader, so
    six readers giving up at once failed the consumer. Here all 8 shards' subscriptions are
    reset one more time in a row than a reader tolerates, at once: every reader gives up
    once and is restarted, each a warning without a traceback, and the consumer reads
    everything. (Pacing shortened to hundredths, as in ``test_hostile_efo_local``.)"""
    shards = 8
    await client.create_stream(stream_name, shards)
    expected = [(b"b%03d" % i, f"k{i}") for i in range(64)]  # every shard gets some
    await put_plain(client, stream_name, expected)
    consumer = Consumer(client, stream_name, efo())
    reader_maker = consumer._scheduler._reader_maker
    limit = reader_maker._efo.max_consecutive_failures
    reader_maker._efo = replace(
        reader_maker._efo,
        min_subscribe_interval=0.02,
        backoff_initial=0.02,
        backoff_max=0.05,
    )
    faults = ResetEveryShard(client, resets=limit + 1)
    monkeypatch.setattr(client, "subscribe_to_shard", faults)
    with caplog.at_level(logging.WARNING, "kinesis_actors"):
        async with consumer:
            with anyio.fail_after(60):
                seen = await consume(consumer, len(expected))
            [readers] = consumer.supervision
    assert sorted(row.data for row in seen) == sorted(data for data, _ in expected)
    assert len(faults.done) == shards and set(faults.done.values()) == {limit + 1}
    assert readers.state == "running" and readers.failure is None
    assert [child.restarts for child in readers.children] == [1] * shards
    gave_up = [r for r in caplog.records if "crashed on a recoverable error" in r.getMessage()]
    assert len(gave_up) == shards
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in gave_up)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.slow
async def test_a_stalled_shard_does_not_hold_back_the_others(
    client: KinesisClient, stream_name: str
) -> None:
    """FLINK-34071 isolation: 8 shards under a steady write load (a
    round of one record per shard every ``tick``); one shard's handler blocks for ``stall``
    seconds, longer than two subscription renewals (lifetime 3 s). During the stall, by counts:

    - rate floor: every other shard delivered every record written to it up to ``grace``
      (one renewal's gap on kinesis-mock) before the release, i.e. at least
      (stall - grace) / stall of the window's writes; the rate over the whole window is
      printed (0.65-0.85 measured: a renewal gap may fall at either end of the window);
    - every other shard renewed its subscription at least twice;
    - the blocked shard holds exactly 1 + prefetch batches and reads no further event;
    - memory: never more than 8 * prefetch batches buffered, and the Python heap allocated
      during the stall (tracemalloc peak, writer included) stays within
      8 * (prefetch + 1) * 4 * (largest event of the other shards) + 2 MiB (measured peak
      1.4-1.6 MiB, the writer's 32 KiB puts included), below the ~3 heap bytes per byte the
      blocked shard's unread records would cost if they were buffered.

    Released, the blocked shard catches up: all its records, once each, in order. Until the
    window opens its records are 128 KiB, so at the release its subscription is closed with
    megabytes in flight (the close must end the connection in order: kinesis-mock keeps the
    lease of a connection that was reset, and the shard then gets ResourceInUse for minutes);
    during the window they are 32 KiB, the size the heap bound above was measured with.
    """
    shards, prefetch, lifetime = 8, 1, 3.0
    tick, stall, grace = 0.2, 8.0, 5.0
    # The blocked shard's records are big, buffering them shows; bigger before the window.
    small, big, bigger = 512, 32 * 1024, 128 * 1024
    amplify, heap_constant = 4, 2 * 1024 * 1024
    await client.create_stream(stream_name, shards)
    smap: ShardMap = await shard_map(client, stream_name)
    keys: dict[str, str] = {}
    for i in range(1000):
        keys.setdefault(str(smap.shard_for(f"k{i}")), f"k{i}")
        if len(keys) == shards:
            break
    blocked = "shardId-000000000000"
    assert blocked in keys
    others = [shard for shard in keys if shard != blocked]
    clock = anyio.current_time
    written_at: list[float] = []  # round -> when its PutRecords returned
    got: dict[str, list[int]] = {shard: [] for shard in keys}  # rounds delivered per shard
    delivered_at: dict[str, list[float]] = {shard: [] for shard in keys}
    largest_event = 0
    blocked_entered = anyio.Event()
    release = anyio.Event()
    window_opens = anyio.Event()
    writer_switched = anyio.Event()  # no put of ``bigger`` records is in flight any more
    writing_done = anyio.Event()
    all_done = anyio.Event()

    def payload(key: str, round_: int, size: int) -> bytes:
        head = f"{key}:{round_}:".encode()
        return head + b"x" * (size - len(head))

    async def handler(batch: RecordBatch) -> None:
        nonlocal largest_event
        if batch.shard_id == blocked and not release.is_set():
            blocked_entered.set()
            await release.wait()
        data = batch.arrow.column("data").to_pylist()
        if batch.shard_id != blocked:
            largest_event = max(largest_event, sum(len(d) for d in data))
        now = clock()
        for item in data:
            got[batch.shard_id].append(int(item.split(b":", 2)[1]))
            delivered_at[batch.shard_id].append(now)
        if writing_done.is_set() and all(len(got[s]) == len(written_at) for s in keys):
            all_done.set()

    async def write() -> None:
        round_ = 0
        while not release.is_set():
            size = big if window_opens.is_set() else bigger
            if size == big:
                writer_switched.set()
            records = [
                {
                    "Data": payload(key, round_, size if shard == blocked else small),
                    "PartitionKey": key,
                }
                for shard, key in keys.items()
            ]
            result = await client.call(
                "PutRecords", {"StreamName": stream_name, "Records": records}
            )
            assert result["FailedRecordCount"] == 0
            written_at.append(clock())
            round_ += 1
            await anyio.sleep(tick)
        writing_done.set()

    def renewed(consumer: Consumer, before: Mapping[tuple[str, str], Any]) -> list[int]:
        now = consumer.statistics().shards
        return [
            now[(stream_name, shard)].resubscriptions.get("renewal", 0)
            - before[(stream_name, shard)].resubscriptions.get("renewal", 0)
            for shard in others
        ]

    min_settled = (stall - grace) / tick / 2

    def settled_so_far(start: float, until: float) -> int:
        return sum(1 for at in written_at if start <= at < until)

    config = efo(prefetch_batches=prefetch, efo_subscription_lifetime=lifetime)
    samples: list[int] = []
    async with Consumer(client, stream_name, config) as consumer:
        key = (stream_name, blocked)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(consumer.run, handler)
                tg.start_soon(write)
                await blocked_entered.wait()
                # Let every other shard's first subscription deliver before the window opens.
                while not all(got[s] for s in others) or (
                    consumer.statistics().shards[key].buffer_depth < prefetch
                ):
                    await anyio.sleep(0.05)
                window_opens.set()
                await writer_switched.wait()
                before = consumer.statistics().shards
                start = clock()
                tracemalloc.start()
                try:
                    # At least ``stall`` seconds, until every other shard renewed twice, and
                    # until the writer has put enough rounds that count (on a loaded machine
                    # it writes slower; the window then grows instead of the check failing).
                    while (
                        clock() - start < stall
                        or min(renewed(consumer, before)) < 2
                        or settled_so_far(start, clock() - grace) < min_settled
                    ):
                        if clock() - start > 4 * stall:
                            pytest.fail(
                                f"no valid window after {4 * stall:.0f} s: renewals "
                                f"{renewed(consumer, before)} (need 2 each), settled rounds "
                                f"{settled_so_far(start, clock() - grace)} (need "
                                f"{min_settled}); the machine is too loaded for this test"
                            )
                        samples.append(consumer.statistics().buffered_batches)
                        await anyio.sleep(0.1)
                    heap_peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                end = clock()
                during = consumer.statistics().shards
                release.set()
                await all_done.wait()
                consumer.stop()
        final = consumer.statistics().shards[key]
    rounds = len(written_at)
    window = [r for r, at in enumerate(written_at) if start <= at < end]
    settled = [r for r in window if written_at[r] < end - grace]
    stalled_bytes = len(window) * big
    bound = 8 * (prefetch + 1) * amplify * largest_event + heap_constant
    floors = {}
    for shard in others:
        in_window = [
            r for r, at in zip(got[shard], delivered_at[shard], strict=True) if start <= at < end
        ]
        # The delivery rate during the window, by counts (reported; kinesis-mock's renewal
        # gap of ~2-3 s can fall at either end of the window, so it is not the floor).
        floors[shard] = len(in_window) / len(window)
        # The floor: every record written up to ``grace`` (one renewal's gap) before the
        # release was delivered during the stall, i.e. a rate >= (stall - grace) / stall.
        in_window = [r for r, at in zip(got[shard], delivered_at[shard], strict=True) if at < end]
        assert set(settled) <= set(in_window), shard
    print(
        f"window {len(window)} rounds, settled {len(settled)}, floors {sorted(floors.values())}, "
        f"heap peak {heap_peak}, bound {bound}, largest event {largest_event}, "
        f"stalled bytes {stalled_bytes}, buffered max {max(samples)}"
    )
    renewals = {
        shard: during[(stream_name, shard)].resubscriptions.get("renewal", 0)
        - before[(stream_name, shard)].resubscriptions.get("renewal", 0)
        for shard in others
    }
    assert all(count >= 2 for count in renewals.values()), renewals
    stalled_before, stalled_during = before[key], during[key]
    assert stalled_during.buffer_depth == prefetch
    assert stalled_during.batches == 1 + prefetch
    assert stalled_during.events == stalled_before.events  # not one event read
    assert stalled_during.backpressured_seconds >= stall - 1
    assert max(samples) <= shards * prefetch
    # The blocked shard's unread records (stalled_bytes, ~1 MiB) would cost about 3 heap bytes
    # per byte if buffered (base64 text, decoded bytes, Arrow), more than the bound.
    assert heap_peak <= bound < 3 * stalled_bytes, (heap_peak, bound, stalled_bytes)
    assert final.events > stalled_during.events
    for shard in keys:
        assert got[shard] == list(range(rounds)), shard


async def test_a_split_parent_ends_with_its_children_and_is_never_resubscribed(
    client: KinesisClient, stream_name: str
) -> None:
    """Resharding in EFO mode: a split and a merge written before reading. Each parent's
    subscription ends with a null continuation (ChildShards): terminal, one subscription per
    parent; children are read after their parents, per-key order holds."""
    await client.create_stream(stream_name, 3)
    await produce_while_resharding(client, stream_name)
    total = len(KEYS) * ROUNDS
    seen: list[Row] = []
    async with Consumer(client, stream_name, efo()) as consumer:
        with anyio.fail_after(60):
            async for batch in consumer:
                seen.extend(rows(batch))
                consumer.commit(batch)
                if len(seen) >= total:
                    break
        metrics = consumer.statistics().shards
        positions = consumer.positions()["streams"][stream_name]
    check_per_key_order(seen)
    for parent in ("shardId-000000000000", "shardId-000000000001", "shardId-000000000002"):
        assert positions[parent] == {"finished": True}
        shard = metrics[(stream_name, parent)]
        assert shard.state in ("ended", "finished")
        assert shard.subscriptions == 1, shard
        assert shard.resubscriptions == {}, shard
