"""Stop order: independent siblings stop concurrently, and every stop's deadline nests."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from kinesis_actors.runtime import (
    Actor,
    ActorContext,
    ChildSpec,
    Restart,
    RestartIntensityExceeded,
    StopOrder,
    Strategy,
    Supervisor,
    stop_bound,
    supervisor_spec,
)

from .helpers import Journal

pytestmark = pytest.mark.anyio

CHILDREN = 8


class Barrier:
    """Opens once ``parties`` cleanups are waiting on it at the same time."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.waiting = 0
        self.open = anyio.Event()

    async def wait(self) -> None:
        self.waiting += 1
        if self.waiting == self.parties:
            self.open.set()
        await self.open.wait()


class MeetsOnStop(Actor[Any]):
    """Runs until stopped; its cleanup finishes only when every sibling's cleanup has begun,
    so a supervisor that stops one child at a time never gets past the first."""

    def __init__(self, journal: Journal, name: str, barrier: Barrier) -> None:
        self.journal = journal
        self.name = name
        self.barrier = barrier
        self.crashed = False

    async def run(self, ctx: ActorContext[Any]) -> None:
        async for message in ctx:
            if message == "boom":
                self.crashed = True
                raise RuntimeError(f"{self.name} boom")
            ctx.done()

    async def on_stop(self, ctx: ActorContext[Any]) -> None:
        if self.crashed:
            self.journal.add("crashed", self.name)
            return
        await self.barrier.wait()
        self.journal.add("stopped", self.name)


def meeting(journal: Journal, barrier: Barrier, name: str) -> ChildSpec[Any]:
    return ChildSpec(
        name,
        lambda: MeetsOnStop(journal, name, barrier),
        restart=Restart.PERMANENT,
        shutdown_timeout=1.0,
        cleanup_timeout=1.0,
    )


async def test_a_graceful_concurrent_stop_runs_every_cleanup_at_once() -> None:
    journal = Journal()
    barrier = Barrier(CHILDREN)
    async with Supervisor(stop_order=StopOrder.CONCURRENT) as sup:
        for i in range(CHILDREN):
            await sup.start_child(meeting(journal, barrier, f"c{i}"))
    assert sorted(event[0] for event in journal.of("stopped")) == [f"c{i}" for i in range(8)]
    assert sup.statistics().state == "stopped"


async def test_leaving_with_an_exception_stops_concurrently_and_raises_it_unchanged() -> None:
    journal = Journal()
    barrier = Barrier(CHILDREN)
    with pytest.raises(KeyError) as caught:
        async with Supervisor(stop_order=StopOrder.CONCURRENT) as sup:
            for i in range(CHILDREN):
                await sup.start_child(meeting(journal, barrier, f"c{i}"))
            raise KeyError("the body's own")
    assert type(caught.value) is KeyError
    assert len(journal.of("stopped")) == CHILDREN


async def test_giving_up_stops_the_children_concurrently_then_raises_one_typed_error() -> None:
    journal = Journal()
    barrier = Barrier(CHILDREN - 1)
    with pytest.raises(RestartIntensityExceeded) as caught:
        async with Supervisor(intensity=(0, 5.0), stop_order=StopOrder.CONCURRENT) as sup:
            for i in range(CHILDREN):
                await sup.start_child(meeting(journal, barrier, f"c{i}"))
            await sup.child("c3").send("boom")
            await anyio.sleep_forever()
    assert isinstance(caught.value.__cause__, RuntimeError)
    # c3 crashed; the seven others stopped together.
    assert journal.of("crashed") == [("c3",)]
    assert len(journal.of("stopped")) == CHILDREN - 1


async def test_reverse_order_stays_the_default_and_stops_one_at_a_time() -> None:
    journal = Journal()
    barrier = Barrier(2)
    started = anyio.current_time()
    async with Supervisor() as sup:
        for name in ("a", "b"):
            spec = meeting(journal, barrier, name)
            await sup.start_child(
                ChildSpec(name, spec.factory, shutdown_timeout=0.0, cleanup_timeout=0.1)
            )
    # One at a time: the first cleanup waits alone for the second until its deadline.
    assert journal.of("stopped") == [("a",)]
    assert anyio.current_time() - started >= 0.1


class Hangs(Actor[Any]):
    async def run(self, ctx: ActorContext[Any]) -> None:
        await anyio.sleep_forever()

    async def on_stop(self, ctx: ActorContext[Any]) -> None:
        await anyio.sleep_forever()


class HangsInStop(Actor[Any]):
    """Hangs in ``on_stop`` until its cleanup deadline, saying when it entered and left."""

    def __init__(self, events: list[str]) -> None:
        self._events = events

    async def run(self, ctx: ActorContext[Any]) -> None:
        await anyio.sleep_forever()

    async def on_stop(self, ctx: ActorContext[Any]) -> None:
        self._events.append("entered")
        try:
            await anyio.sleep_forever()
        finally:
            self._events.append("left")


async def test_a_concurrent_stop_takes_the_slowest_child_not_the_sum() -> None:
    """Checked by the order of events, not by a clock: every child's cleanup has begun
    before the first one's deadline ends it (one at a time, they would alternate)."""
    events: list[str] = []
    specs = [
        ChildSpec(
            f"h{i}",
            lambda: HangsInStop(events),
            shutdown_timeout=0.0,
            cleanup_timeout=0.1,
        )
        for i in range(10)
    ]
    async with Supervisor(stop_order=StopOrder.CONCURRENT) as sup:
        for spec in specs:
            await sup.start_child(spec)
    assert events == ["entered"] * 10 + ["left"] * 10


def test_the_stop_bound_is_the_sum_in_reverse_order_and_the_slowest_when_concurrent() -> None:
    specs = [
        ChildSpec("a", Hangs, cleanup_timeout=1.0),
        ChildSpec("b", Hangs, cleanup_timeout=3.0),
        ChildSpec("c", Hangs, cleanup_timeout=2.0),
    ]
    assert stop_bound(specs, StopOrder.REVERSE) == pytest.approx(1.5 + 3.5 + 2.5 + 0.5)
    assert stop_bound(specs, StopOrder.CONCURRENT) == pytest.approx(3.5 + 0.5)
    assert stop_bound([], StopOrder.CONCURRENT) == pytest.approx(0.5)


def test_a_nested_supervisors_deadline_holds_its_subtrees_stop() -> None:
    children = [ChildSpec(f"c{i}", Hangs, cleanup_timeout=2.0) for i in range(16)]
    concurrent = supervisor_spec("shards", children, stop_order=StopOrder.CONCURRENT)
    reverse = supervisor_spec("ordered", children)
    assert concurrent.cleanup_timeout > stop_bound(children, StopOrder.CONCURRENT)
    assert concurrent.cleanup_timeout < 5.0  # not 16 children's worth
    assert reverse.cleanup_timeout > stop_bound(children, StopOrder.REVERSE)


async def test_a_nested_concurrent_subtree_stops_its_children_together() -> None:
    journal = Journal()
    barrier = Barrier(CHILDREN)
    children = [meeting(journal, barrier, f"c{i}") for i in range(CHILDREN)]
    async with Supervisor() as sup:
        await sup.start_child(supervisor_spec("shards", children, stop_order=StopOrder.CONCURRENT))
        assert len(sup.statistics().children[0].subtree.children) == CHILDREN  # type: ignore[union-attr]
    assert len(journal.of("stopped")) == CHILDREN


def test_rest_for_one_children_cannot_stop_concurrently() -> None:
    with pytest.raises(ValueError, match="rest_for_one"):
        Supervisor(Strategy.REST_FOR_ONE, stop_order=StopOrder.CONCURRENT)


async def test_a_one_for_all_restart_stops_the_siblings_concurrently() -> None:
    journal = Journal()
    barrier = Barrier(CHILDREN - 1)
    async with Supervisor(
        Strategy.ONE_FOR_ALL, intensity=(1, 5.0), stop_order=StopOrder.CONCURRENT
    ) as sup:
        for i in range(CHILDREN):
            await sup.start_child(meeting(journal, barrier, f"c{i}"))
        await sup.child("c0").send("boom")
        # The seven siblings' cleanups met, so the restart went through.
        await journal.wait_count("stopped", CHILDREN - 1)
        assert journal.of("crashed") == [("c0",)]
        assert "c0" not in [event[0] for event in journal.of("stopped")]


class CountsTasksOnStop(Actor[Any]):
    """Notes how many tasks are running when its cleanup runs."""

    def __init__(self, seen: list[int]) -> None:
        self._seen = seen

    async def run(self, ctx: ActorContext[Any]) -> None:
        await anyio.sleep_forever()

    async def on_stop(self, ctx: ActorContext[Any]) -> None:
        self._seen.append(len(anyio.get_running_tasks()))


async def test_a_concurrent_stop_by_cancellation_starts_no_task_per_child() -> None:
    """Cancelled side by side, the children are waited on together under one deadline: a
    stop task (and a timer) each was most of what closing a consumer of thousands of shards
    cost."""
    seen: list[int] = []
    children = 50
    with pytest.raises(KeyError):
        async with Supervisor(stop_order=StopOrder.CONCURRENT) as sup:
            for i in range(children):
                await sup.start_child(
                    ChildSpec(
                        f"c{i}",
                        lambda: CountsTasksOnStop(seen),
                        shutdown_timeout=0.0,
                        cleanup_timeout=1.0,
                    )
                )
            running = len(anyio.get_running_tasks())
            raise KeyError("leave by cancellation")
    assert len(seen) == children
    assert max(seen) <= running  # a task per child would make it running + 50
