"""The sans-IO parts, without a server: pacing, lineage and assignment, positions, a pipeline."""

from __future__ import annotations

import heapq
import json
import random
import weakref
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_actors.consumer import EfoSettings, RecordBatch, ShardRead, StartingPosition
from kinesis_actors.consumer._actors import ReaderActor
from kinesis_actors.consumer._efo_policy import HeldShard, SubscribeBackoff
from kinesis_actors.consumer._pacing import IdleBudget, PacingSettings, ReadPacer
from kinesis_actors.consumer._pipeline import ShardPipeline
from kinesis_actors.consumer._positions import (
    SavedShard,
    encode_positions,
    parse_positions,
    resume_from,
)
from kinesis_actors.consumer._shards import ShardGraph, ShardInfo, owner
from kinesis_actors.records import RECORD_SCHEMA, Aggregator, Position

# -- pacing ----------------------------------------------------------------------------------


def test_reads_never_exceed_five_per_second() -> None:
    pacer = ReadPacer(PacingSettings())
    pacer.read(10.0, records=100, size=1000)
    assert pacer.next_read_at() == pytest.approx(10.2)
    assert pacer.delay(10.1) == pytest.approx(0.1)
    assert pacer.delay(11.0) == 0.0


def test_a_large_answer_costs_its_share_of_two_mib_per_second() -> None:
    pacer = ReadPacer(PacingSettings())
    pacer.read(0.0, records=10_000, size=10 * 1024 * 1024)
    assert pacer.next_read_at() == pytest.approx(5.0)  # as the service itself enforces


def test_a_read_cap_paces_a_backlog_at_the_cap() -> None:
    """``max_bytes_per_second`` caps a shard shared with other readers: a backlog read in
    1 MiB answers under a 0.5 MiB/s cap goes at 0.5 MiB/s, not at the service's 2 MiB/s."""
    pacer = ReadPacer(PacingSettings(max_bytes_per_second=512 * 1024))
    now, read = 0.0, 0
    for _ in range(20):
        pacer.read(now, records=1000, size=1024 * 1024)
        read += 1024 * 1024
        now = pacer.next_read_at()
    assert read / now == pytest.approx(512 * 1024)


def test_a_caught_up_shard_is_read_once_per_interval_and_a_lagging_one_at_full_rate() -> None:
    settings = PacingSettings(caught_up_millis=1_000, caught_up_interval=1.5)
    pacer = ReadPacer(settings)
    pacer.read(0.0, records=3, size=300, millis_behind=200)  # near the tip
    assert pacer.next_read_at() == pytest.approx(1.5)
    pacer.read(1.5, records=3, size=300, millis_behind=60_000)  # a backlog: full rate
    assert pacer.next_read_at() == pytest.approx(1.7)
    pacer.read(1.7, records=3, size=300, millis_behind=None)  # not said: full rate
    assert pacer.next_read_at() == pytest.approx(1.9)
    off = ReadPacer(PacingSettings())  # the default changes nothing
    off.read(0.0, records=3, size=300, millis_behind=0)
    assert off.next_read_at() == pytest.approx(0.2)


def test_empty_reads_back_off_doubling_to_the_maximum_and_data_resets() -> None:
    pacer = ReadPacer(PacingSettings(idle_initial=0.25, idle_max=2.0), rng=lambda: 0.0)
    waits = []
    now = 0.0
    for _ in range(6):
        pacer.read(now, records=0, size=0)
        waits.append(pacer.next_read_at() - now)
        now = pacer.next_read_at()
    assert waits == pytest.approx([0.25, 0.5, 1.0, 2.0, 2.0, 2.0])
    pacer.read(now, records=1, size=10)
    assert pacer.next_read_at() - now == pytest.approx(0.2)
    assert pacer.empty_streak == 0


def test_idle_waits_are_spread_below_the_bound_never_above() -> None:
    settings = PacingSettings(idle_initial=0.25, idle_max=2.0, idle_jitter=0.2)
    for draw, expected in ((0.0, 2.0), (0.5, 1.8), (0.999, 1.6)):
        pacer = ReadPacer(settings, rng=lambda draw=draw: draw)
        for _ in range(5):
            pacer.read(0.0, records=0, size=0)
        assert pacer.next_read_at() == pytest.approx(expected, abs=1e-3)


def test_idle_reads_take_free_slots_of_the_shared_calendar() -> None:
    budget = IdleBudget(reads_per_second=10.0, group=2)  # two slots every 0.2 s
    assert budget.reserve(1.0, now=0.0) == pytest.approx(1.0)
    assert budget.reserve(1.0, now=0.0) == pytest.approx(1.0)
    assert budget.reserve(1.0, now=0.0) == pytest.approx(1.2)  # full: the next tick
    assert budget.reserve(1.05, now=0.0) == pytest.approx(1.2)
    assert budget.reserve(0.5, now=0.0) == pytest.approx(0.5)  # earlier ticks stay free
    assert budget.reserved == 5
    budget.reserve(3.0, now=2.0)  # the past ticks are forgotten
    assert budget.reserved == 1


def test_a_shard_on_a_budget_backs_off_as_alone_while_the_calendar_is_free() -> None:
    pacer = ReadPacer(
        PacingSettings(idle_initial=0.25, idle_max=2.0), IdleBudget(100.0), rng=lambda: 0.0
    )
    now, waits = 0.0, []
    for _ in range(6):
        pacer.read(now, records=0, size=0)
        waits.append(pacer.next_read_at() - now)
        now = pacer.next_read_at()
    assert waits == pytest.approx([0.25, 0.5, 1.0, 2.0, 2.0, 2.0])
    pacer.read(now, records=1, size=1)  # data: no slot, back to 5 reads a second
    assert pacer.next_read_at() - now == pytest.approx(0.2)


@settings(deadline=None, max_examples=20)  # simulated time: no wall clock
@given(
    shards=st.integers(min_value=1, max_value=200),
    rate=st.sampled_from([5.0, 50.0, 100.0]),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_idle_shards_together_stay_within_the_budget_and_the_wait_is_bounded(
    shards: int, rate: float, seed: int
) -> None:
    """Every shard idle from the same moment (a consumer just opened), each on its own pacer
    and one shared calendar: in no second are there more empty reads than the budget, and no
    shard waits longer than its own bound plus a slot for every shard (shards / rate)."""
    rng = random.Random(seed)
    budget = IdleBudget(reads_per_second=rate)
    settings_ = PacingSettings(idle_initial=0.25, idle_max=2.0)
    pacers = [ReadPacer(settings_, budget, rng=rng.random) for _ in range(shards)]
    due = [(0.0, index) for index in range(shards)]
    heapq.heapify(due)
    per_second: dict[int, int] = {}
    longest = 0.0
    while due[0][0] < 60.0:
        now, index = heapq.heappop(due)
        if now > 0:
            per_second[int(now)] = per_second.get(int(now), 0) + 1
        pacers[index].read(now, records=0, size=0)
        following = pacers[index].next_read_at()
        longest = max(longest, following - now)
        heapq.heappush(due, (following, index))
    assert max(per_second.values()) <= rate + 10  # a tick of 10 at each end of a second
    assert longest <= 2.0 + (shards + 10) / rate


def test_throttles_back_off_and_a_read_resets_them() -> None:
    pacer = ReadPacer(PacingSettings(throttle_initial=0.5, throttle_max=2.0))
    waits = []
    for _ in range(4):
        pacer.throttled(0.0)
        waits.append(pacer.next_read_at())
    assert waits == pytest.approx([0.5, 1.0, 2.0, 2.0])
    pacer.read(0.0, records=5, size=5)
    pacer.throttled(0.0)
    assert pacer.next_read_at() == pytest.approx(0.5)


# -- EFO subscriptions -----------------------------------------------------------------------


def test_resource_in_use_waits_then_one_reset_do_not_reach_the_failure_limit() -> None:
    """The fault: the waits counted as failures, so the first reset after a long
    ResourceInUse crashed the reader. Waiting is not failing."""
    backoff = SubscribeBackoff(EfoSettings(max_consecutive_failures=5), random=lambda: 0.5)
    now = 0.0
    for _ in range(50):  # minutes of a shard held by another subscription
        backoff.in_use(now)
        now = backoff.not_before
    assert backoff.failures == 0
    assert backoff.failed(now) is False  # the reset after it: one failure, not 51
    assert backoff.failures == 1


def test_errors_in_a_row_give_up_past_the_limit_and_waits_between_them_do_not_break_the_row() -> (
    None
):
    backoff = SubscribeBackoff(EfoSettings(max_consecutive_failures=2), random=lambda: 0.0)
    assert backoff.failed(0.0) is False
    backoff.in_use(1.0)
    assert backoff.failed(2.0) is False
    backoff.in_use(3.0)
    assert backoff.failed(4.0) is True  # the third error without an event
    backoff.delivered()
    assert (backoff.failures, backoff.attempts) == (0, 0)
    assert backoff.failed(5.0) is False


def test_waits_and_errors_back_off_together_doubling_to_the_maximum_and_an_event_resets() -> None:
    settings = EfoSettings(min_subscribe_interval=1.0, backoff_initial=1.0, backoff_max=10.0)
    highest = SubscribeBackoff(settings, random=lambda: 1.0)  # the top of each jittered draw
    ceilings = []
    for turn in range(6):
        if turn % 2:
            highest.failed(0.0)
        else:
            highest.in_use(0.0)
        ceilings.append(highest.delay(0.0))
        highest.not_before = 0.0
    assert ceilings == pytest.approx([1.0, 2.0, 4.0, 8.0, 10.0, 10.0])
    highest.delivered()
    highest.in_use(0.0)
    assert highest.delay(0.0) == pytest.approx(1.0)
    lowest = SubscribeBackoff(settings, random=lambda: 0.0)
    for _ in range(6):
        lowest.in_use(0.0)
        assert lowest.delay(0.0) == pytest.approx(1.0)  # never below the service's interval
        lowest.not_before = 0.0


def test_no_two_subscriptions_of_a_shard_are_less_than_the_service_interval_apart() -> None:
    backoff = SubscribeBackoff(EfoSettings(min_subscribe_interval=1.0))
    assert backoff.delay(10.0) == 0.0
    backoff.subscribing(10.0)
    assert backoff.delay(10.25) == pytest.approx(0.75)
    assert backoff.delay(11.0) == 0.0


def test_a_hold_falls_back_to_get_records_at_its_bound_and_an_event_ends_both() -> None:
    """A shard held past ``fallback_after`` is read by GetRecords; the
    first event ends the hold and the polling, and the time polled is kept."""
    held = HeldShard(starvation_warning=30.0, fallback_after=10.0)
    assert held.fallback_at() is None  # not held
    held.refused(100.0)
    held.refused(104.0)  # the hold's clock runs from its first refusal
    assert held.fallback_at() == 110.0
    held.fell_back(110.0)
    assert held.polling and held.fallbacks == 1
    assert held.fallback_at() is None  # polling already
    assert held.refused(130.0) is True  # the starvation warning, once, while polling
    assert held.refused(131.0) is False
    assert held.polled_seconds(125.0) == 15.0
    held.released(140.0)
    assert not held.polling and held.held_since is None and not held.starved
    assert held.polled_seconds(1000.0) == 30.0  # stopped counting at the event
    held.refused(200.0)
    assert held.fallback_at() == 210.0  # a new hold, a new clock
    held.fell_back(210.0)
    held.released(215.0)
    assert (held.fallbacks, held.polled_seconds(300.0)) == (2, 35.0)


def test_a_hold_never_falls_back_when_the_bound_is_none() -> None:
    held = HeldShard(starvation_warning=1.0, fallback_after=None)
    for now in range(1000):  # the local server's 300 s hold and more
        held.refused(float(now))
    assert held.fallback_at() is None and held.starved and held.fallbacks == 0


# -- lineage and assignment ------------------------------------------------------------------


def _listing(shards: list[tuple[str, tuple[str, ...], bool]]) -> list[ShardInfo]:
    return [ShardInfo("s", shard_id, parents, closed) for shard_id, parents, closed in shards]


def test_a_child_waits_for_all_its_parents() -> None:
    graph = ShardGraph()
    graph.update(
        "s",
        _listing(
            [
                ("p0", (), True),
                ("p1", (), True),
                ("split-a", ("p0",), False),
                ("merged", ("p0", "p1"), False),
            ]
        ),
    )
    released: set[tuple[str, str]] = set()
    shards = {shard.shard_id: shard for shard in graph.shards()}
    assert graph.ready(shards["p0"], released.__contains__)
    assert not graph.ready(shards["split-a"], released.__contains__)
    released.add(("s", "p0"))
    assert graph.ready(shards["split-a"], released.__contains__)
    assert not graph.ready(shards["merged"], released.__contains__)  # p1 still open
    released.add(("s", "p1"))
    assert graph.ready(shards["merged"], released.__contains__)


def test_an_expired_parent_counts_as_finished() -> None:
    graph = ShardGraph()
    graph.update("s", _listing([("child", ("gone",), False)]))
    (child,) = graph.shards()
    assert graph.ready(child, lambda key: False)
    assert not graph.has_parents(child)


@given(st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=50, unique=True))
def test_workers_partition_the_shards_with_no_overlap_and_no_gap(shard_ids: list[str]) -> None:
    for count in (1, 2, 3, 7):
        graphs = [ShardGraph(index, count) for index in range(count)]
        for graph in graphs:
            graph.update("s", [ShardInfo("s", shard_id) for shard_id in shard_ids])
        owned = [{shard.shard_id for shard in graph.shards()} for graph in graphs]
        assert sum(len(ids) for ids in owned) == len(shard_ids)
        assert set().union(*owned) == set(shard_ids)


def test_assignment_is_a_pure_function_of_the_names() -> None:
    # Pinned values: a change here reassigns shards between running workers.
    assert [owner("orders", f"shardId-{i:012d}", 2) for i in range(6)] == [
        owner("orders", f"shardId-{i:012d}", 2) for i in range(6)
    ]
    spread = {owner("orders", f"shardId-{i:012d}", 4) for i in range(64)}
    assert spread == {0, 1, 2, 3}


# -- positions -------------------------------------------------------------------------------

SEQ = "49590338271490256608559692538361571095921575989136588898"


def test_positions_round_trip_through_json() -> None:
    entries = {
        ("s", "shardId-0"): SavedShard(committed=Position(SEQ, 3)),
        ("s", "shardId-1"): SavedShard(finished=True),
        ("s", "shardId-2"): SavedShard(
            start=StartingPosition("AT_TIMESTAMP", timestamp=datetime(2024, 5, 1, tzinfo=UTC))
        ),
        ("t", "shardId-0"): SavedShard(start=StartingPosition.trim_horizon()),
    }
    document = json.loads(json.dumps(encode_positions(entries, ["s", "t"])))
    assert document["version"] == 1
    assert parse_positions(document, ["s", "t"]) == entries


def test_a_committed_position_resumes_at_its_sequence_number_dropping_through_it() -> None:
    start, skip = resume_from(SavedShard(committed=Position(SEQ, 7)))
    assert start.iterator_params() == {
        "ShardIteratorType": "AT_SEQUENCE_NUMBER",
        "StartingSequenceNumber": SEQ,
    }
    assert skip == Position(SEQ, 7)


def test_a_position_names_the_same_start_to_get_shard_iterator_and_subscribe_to_shard() -> None:
    at = StartingPosition.at_sequence_number(SEQ)
    assert at.subscribe_params() == {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": SEQ}
    assert StartingPosition.trim_horizon().subscribe_params() == {"Type": "TRIM_HORIZON"}
    when = datetime(2026, 1, 1, tzinfo=UTC)
    assert StartingPosition.at_timestamp(when).subscribe_params() == {
        "Type": "AT_TIMESTAMP",
        "Timestamp": when,
    }


# -- one pipeline ----------------------------------------------------------------------------


def _records(sequence_numbers: list[int], aggregate_of: int = 0) -> list[dict[str, Any]]:
    out = []
    for number in sequence_numbers:
        data = b"plain-%d" % number
        if aggregate_of:
            aggregator = Aggregator(2**20)
            for i in range(aggregate_of):
                assert aggregator.add(b"u%d-%d" % (number, i), f"k{i}", None)
            data = aggregator.build_container()
        out.append(
            {
                "SequenceNumber": str(number),
                "ApproximateArrivalTimestamp": datetime(2024, 1, 1, tzinfo=UTC),
                "Data": data,
                "PartitionKey": "k",
            }
        )
    return out


@pytest.mark.anyio
async def test_a_pipeline_delivers_under_credit_and_finishes_when_committed() -> None:
    pipeline = ShardPipeline(("s", "shard"), SavedShard(start=StartingPosition.trim_horizon()), 2)
    assert pipeline.try_credit()
    pipeline.accept(ShardRead(_records([1, 2])), None, pipeline.generation)
    assert pipeline.try_credit()
    pipeline.accept(ShardRead(_records([3], aggregate_of=4), finished=True), None, 0)
    assert not pipeline.try_credit()  # two batches buffered: no credit left
    assert pipeline.end_reached and not pipeline.released and not pipeline.finished
    first = pipeline.take_nowait()
    second = pipeline.take_nowait()
    assert isinstance(first, RecordBatch) and first.arrow.schema == RECORD_SCHEMA
    assert second.last_position == Position("3", 3)
    assert pipeline.released  # iterated: everything taken
    pipeline.commit(first.last_position)
    assert not pipeline.finished
    assert pipeline.saved() == SavedShard(committed=Position("2", 0))
    pipeline.commit(second.slice(0, 2).last_position)
    assert pipeline.saved() == SavedShard(committed=Position("3", 1))
    pipeline.commit(second.last_position)
    assert pipeline.finished and pipeline.reader_may_end
    assert pipeline.saved() == SavedShard(finished=True)
    assert await pipeline.take() is None


@pytest.mark.anyio
async def test_a_rewind_drops_the_buffer_and_resumes_after_the_commit() -> None:
    pipeline = ShardPipeline(("s", "shard"), SavedShard(start=StartingPosition.latest()), 2)
    pipeline.try_credit()
    pipeline.accept(ShardRead(_records([5], aggregate_of=3)), None, 0)
    batch = pipeline.take_nowait()
    pipeline.commit(batch.slice(0, 2).last_position)
    pipeline.try_credit()
    stale_generation = pipeline.generation
    pipeline.rewind()
    # A read that was in flight during the rewind is ignored.
    pipeline.accept(ShardRead(_records([6])), None, stale_generation)
    assert pipeline.depth == 0
    start, skip = pipeline.cursor()
    assert start == StartingPosition.at_sequence_number("5")
    assert skip == Position("5", 1)
    assert pipeline.counters.restarts == 1
    assert pipeline.try_credit()  # the new generation's credits are all free


@pytest.mark.anyio
async def test_under_run_a_shard_is_released_only_once_committed() -> None:
    pipeline = ShardPipeline(("s", "shard"), SavedShard(), 1)
    pipeline.set_mode("run")
    pipeline.try_credit()
    pipeline.accept(ShardRead(_records([1]), finished=True, child_shards=("c",)), None, 0)
    batch = await pipeline.take()
    assert batch is not None
    assert not pipeline.released
    pipeline.commit(batch.last_position)
    assert pipeline.released and pipeline.children == ("c",)


class _EndingReader:
    """A reader whose first read meets the shard's end while ``meanwhile`` runs (a rewind or a
    lease lost); like the real readers, it refuses to be read again once it ended."""

    def __init__(self, meanwhile: Any) -> None:
        self.meanwhile = meanwhile
        self.reads = 0
        self.start = StartingPosition.trim_horizon()

    async def read(self) -> ShardRead:
        self.reads += 1
        if self.reads > 1:
            raise RuntimeError("finished; nothing to read")
        self.meanwhile()
        return ShardRead(_records([1]), finished=True, child_shards=("c",))

    async def aclose(self) -> None:
        pass


@pytest.mark.anyio
@pytest.mark.parametrize("meanwhile", ["rewind", "drop"])
async def test_a_rewind_or_a_lost_lease_while_a_read_meets_the_end_does_not_read_it_again(
    meanwhile: str,
) -> None:
    """Seen in the pipeline soak: a group worker's reader crashed with "is finished; nothing
    to read" (restarted by its supervisor) when its lease was lost, or the shard rewound,
    while the read that met the shard's end was out. The read is ignored (a new generation)
    and the old generation's reading ends with its cancellation, not a second read."""
    pipeline = ShardPipeline(("s", "shard"), SavedShard(), 2)
    reader = _EndingReader(getattr(pipeline, meanwhile))
    actor = ReaderActor(pipeline, lambda _pipeline, _start: reader)
    with anyio.fail_after(5), anyio.CancelScope() as scope:
        await actor._read_to_end(pipeline, scope)
    assert scope.cancelled_caught and reader.reads == 1
    assert not pipeline.end_reached and pipeline.depth == 0  # the read was ignored


class _Records(list[dict[str, Any]]):
    """A read's records that a weak reference can follow."""


class _WaitingReader:
    """Answers one read with records, then waits on ``release`` for the next."""

    def __init__(self) -> None:
        self.start = StartingPosition.trim_horizon()
        self.first: weakref.ref[_Records] | None = None
        self.waiting = anyio.Event()
        self.release = anyio.Event()

    async def read(self) -> ShardRead:
        if self.first is None:
            records = _Records(_records([1, 2]))
            self.first = weakref.ref(records)
            return ShardRead(records)
        self.waiting.set()
        await self.release.wait()
        return ShardRead([])

    async def aclose(self) -> None:
        pass


@pytest.mark.anyio
async def test_a_shard_waiting_for_its_next_read_holds_no_records_of_its_last() -> None:
    """Every shard kept its last answer's decoded records (a dict a record) alive until its
    next read came back, beside the batch built from them: memory outside the prefetch
    bound, and at a thousand shards objects the collector's full passes walked. Once the
    batch is built, nothing holds them."""
    pipeline = ShardPipeline(("s", "shard"), SavedShard(), 2)
    reader = _WaitingReader()
    actor = ReaderActor(pipeline, lambda _pipeline, _start: reader)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(actor._read_to_end, pipeline, tg.cancel_scope)
            await reader.waiting.wait()
            assert pipeline.depth == 1  # the batch was built and buffered
            assert reader.first is not None and reader.first() is None
            tg.cancel_scope.cancel()
