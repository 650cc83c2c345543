"""Shutdown: reverse order, draining with a deadline, bounded cleanup, exceptions pass through."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from kinesis_actors.runtime import (
    Actor,
    ActorContext,
    ChildSpec,
    DeadLetter,
    DropReason,
    Supervisor,
)

from .helpers import Journal, probe

pytestmark = pytest.mark.anyio


async def test_graceful_stop_drains_mailboxes_in_reverse_start_order() -> None:
    journal = Journal()
    gate = anyio.Event()
    async with Supervisor() as sup:
        for name in ("first", "second", "third"):
            ref = await sup.start_child(ChildSpec(name, probe(journal, name, gate), capacity=8))
            for i in range(3):
                await ref.send(i)
        gate.set()
    assert journal.of("stop") == [("third", 0), ("second", 0), ("first", 0)]
    handled = journal.of("handle")
    for name in ("first", "second", "third"):
        assert [event[2] for event in handled if event[0] == name] == [0, 1, 2]
    # Each child handled its whole queue before it stopped.
    for name in ("first", "second", "third"):
        own = [i for i, event in enumerate(journal.events) if event[1] == name]
        assert journal.events[own[-1]][0] == "stop"
        assert [journal.events[i][0] for i in own[-4:-1]] == ["handle"] * 3
    snapshot = sup.statistics()
    assert snapshot.state == "stopped"
    assert all(child.state == "stopped" and child.mailbox.closed for child in snapshot.children)


async def test_a_slow_drain_is_cancelled_at_the_deadline_and_nothing_is_lost_silently() -> None:
    letters: list[DeadLetter[int]] = []
    handled: list[int] = []

    class Slow(Actor[int]):
        async def handle(self, ctx: ActorContext[int], message: int) -> None:
            await anyio.sleep(0.02)
            handled.append(message)

    spec = ChildSpec("slow", Slow, capacity=32, shutdown_timeout=0.05, on_drop=letters.append)
    started = anyio.current_time()
    async with Supervisor() as sup:
        ref = await sup.start_child(spec)
        for i in range(20):
            await ref.send(i)
    elapsed = anyio.current_time() - started
    assert elapsed < 1.0
    lost = [d.item for d in letters if d.reason is DropReason.LOST_IN_FLIGHT]
    undelivered = [d.item for d in letters if d.reason is DropReason.UNDELIVERED]
    assert len(lost) == 1
    assert 0 < len(handled) < 20
    assert sorted(handled + lost + undelivered) == list(range(20))


async def test_shutdown_is_bounded_for_every_child_even_when_all_cleanups_hang() -> None:
    class Hangs(Actor[Any]):
        async def run(self, ctx: ActorContext[Any]) -> None:
            await anyio.sleep_forever()

        async def on_stop(self, ctx: ActorContext[Any]) -> None:
            await anyio.sleep_forever()

    started = anyio.current_time()
    async with Supervisor() as sup:
        for name in ("a", "b", "c"):
            await sup.start_child(
                ChildSpec(name, Hangs, shutdown_timeout=0.02, cleanup_timeout=0.02)
            )
    elapsed = anyio.current_time() - started
    assert 0.12 <= elapsed < 1.5


async def test_a_body_exception_stops_children_and_propagates_unchanged() -> None:
    journal = Journal()
    with pytest.raises(KeyError) as info:
        async with Supervisor() as sup:
            for name in ("a", "b"):
                await sup.start_child(ChildSpec(name, probe(journal, name)))
            raise KeyError("from the body")
    assert type(info.value) is KeyError
    assert journal.of("stop") == [("b", 0), ("a", 0)]


async def test_an_outer_cancellation_stops_children_with_their_cleanup() -> None:
    journal = Journal()
    with anyio.move_on_after(0.02) as outer:
        async with Supervisor() as sup:
            for name in ("a", "b"):
                await sup.start_child(ChildSpec(name, probe(journal, name)))
            await anyio.sleep_forever()
    assert outer.cancelled_caught
    assert journal.of("stop") == [("b", 0), ("a", 0)]


async def test_stop_child_drains_it_and_leaves_its_siblings_alone() -> None:
    journal = Journal()
    async with Supervisor() as sup:
        for name in ("a", "b", "c"):
            await sup.start_child(ChildSpec(name, probe(journal, name)))
        await sup.child("b").send("last words")
        await sup.stop_child("b")
        assert journal.of("handle") == [("b", 0, "last words")]
        assert journal.of("stop") == [("b", 0)]
        assert [child.name for child in sup.statistics().children] == ["a", "c"]
        with pytest.raises(KeyError):
            sup.child("b")
    assert journal.of("stop") == [("b", 0), ("c", 0), ("a", 0)]


async def test_a_supervisor_cannot_be_reused_or_used_after_stopping() -> None:
    sup = Supervisor()
    async with sup:
        pass
    with pytest.raises(RuntimeError, match="stopped"):
        await sup.start_child(ChildSpec("late", probe(Journal(), "late")))
    with pytest.raises(RuntimeError, match="once"):
        async with sup:
            pass


class ReadyLate(Actor[Any]):
    """Crashes on ``"boom"``; a restarted incarnation's ``on_start`` waits for ``gate``; its
    ``run`` waits for ``release``, journaling whether it was cancelled or released."""

    def __init__(self, journal: Journal, gate: anyio.Event, release: anyio.Event) -> None:
        self.journal = journal
        self.gate = gate
        self.release = release

    async def on_start(self, ctx: ActorContext[Any]) -> None:
        self.journal.add("on_start", ctx.incarnation)
        if ctx.incarnation > 0:
            await self.gate.wait()

    async def run(self, ctx: ActorContext[Any]) -> None:
        if ctx.incarnation == 0:
            async for message in ctx:
                if message == "boom":
                    raise RuntimeError("boom")
            return
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.journal.add("cancelled", ctx.incarnation)
            raise
        self.journal.add("released", ctx.incarnation)


async def test_a_restart_that_gets_ready_while_the_supervisor_stops_is_cancelled() -> None:
    """A restart's ``on_start`` returns just as the supervisor begins to stop: its decision
    loop, which is starting the child, is cancelled in the same step in which the child is
    woken. On trio a child started under a cancelled starter is not moved into the
    supervisor's task group; readied under a shield, it never saw the cancellation and the
    supervisor's exit waited on it forever (the suite once hung so, with nothing to time out).
    It must be cancelled and the exit return, without ``release`` ever being set."""
    journal = Journal()
    gate, release, exited = anyio.Event(), anyio.Event(), anyio.Event()
    spec = ChildSpec("late", lambda: ReadyLate(journal, gate, release), shutdown_timeout=1.0)

    async def supervise() -> None:
        async with Supervisor(name="late") as sup:
            await sup.start_child(spec)
            await sup.child("late").send("boom")
            await journal.wait_count("on_start", 2)  # the restart waits in its on_start
            await anyio.wait_all_tasks_blocked()
            gate.set()  # woken; the exit below cancels the decision loop before it runs
        exited.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(supervise)
        # Far longer than a correct exit takes (it cancels a waiting actor); past it, the
        # child is let go so that the failure is reported instead of hanging the suite.
        with anyio.move_on_after(30):
            await exited.wait()
        release.set()
    assert journal.of("cancelled") == [(1,)] and journal.of("released") == []
