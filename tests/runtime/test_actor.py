"""Actors: ready-before-continue start, in-flight tracking, bounded cleanup, functional form."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from kinesis_actors.runtime import (
    Actor,
    ActorContext,
    Backoff,
    ChildSpec,
    DeadLetter,
    DropReason,
    RestartIntensityExceeded,
    Supervisor,
    actor,
)

from .helpers import Journal

pytestmark = pytest.mark.anyio


async def test_start_child_returns_only_once_the_actor_is_ready() -> None:
    ready = []

    class Slow(Actor[int]):
        async def on_start(self, ctx: ActorContext[int]) -> None:
            await anyio.sleep(0.01)
            ready.append(ctx.path)

        async def handle(self, ctx: ActorContext[int], message: int) -> None:
            pass

    async with Supervisor(name="root") as sup:
        ref = await sup.start_child(ChildSpec("slow", Slow))
        assert ready == ["root/slow"]
        assert ref.path == "root/slow"
        assert ref.name == "slow"


async def test_a_failing_start_raises_to_the_starter_and_adds_nothing() -> None:
    class Broken(Actor[int]):
        async def on_start(self, ctx: ActorContext[int]) -> None:
            raise ConnectionError("no stream")

    async with Supervisor() as sup:
        with pytest.raises(ConnectionError, match="no stream"):
            await sup.start_child(ChildSpec("broken", Broken))
        assert sup.statistics().children == ()
        # The name is free again.
        await sup.start_child(ChildSpec("broken", actor(_ignore)))


async def _ignore(message: object) -> None:
    pass


async def test_functional_actor_handles_messages_in_order() -> None:
    seen: list[int] = []
    journal = Journal()

    async def handler(message: int) -> None:
        seen.append(message)
        journal.add("seen", message)

    async with Supervisor() as sup:
        ref = await sup.start_child(ChildSpec("fn", actor(handler), capacity=4))
        for i in range(10):
            await ref.send(i)
        await journal.wait_count("seen", 10)
    assert seen == list(range(10))


async def test_the_message_being_handled_when_a_crash_happens_is_reported_with_the_error() -> None:
    letters: list[DeadLetter[str]] = []
    journal = Journal()

    class Fragile(Actor[str]):
        async def handle(self, ctx: ActorContext[str], message: str) -> None:
            assert ctx.in_flight == (message,)
            if message == "poison":
                raise ValueError("bad record")
            journal.add("ok", message)

    spec = ChildSpec("fragile", Fragile, on_drop=letters.append)
    async with Supervisor(backoff=Backoff.none()) as sup:
        ref = await sup.start_child(spec)
        await ref.send("poison")
        await ref.send("after")
        await journal.wait_count("ok", 1)
    assert [(d.item, d.reason, type(d.error)) for d in letters] == [
        ("poison", DropReason.LOST_IN_FLIGHT, ValueError)
    ]


async def test_a_message_marked_done_is_not_reported_as_lost() -> None:
    letters: list[DeadLetter[str]] = []

    class DoneThenCrash(Actor[str]):
        async def run(self, ctx: ActorContext[str]) -> None:
            await ctx.receive()
            ctx.done()
            raise RuntimeError("after the message was handled")

    async with Supervisor(backoff=Backoff.none(), intensity=(10, 1.0)) as sup:
        ref = await sup.start_child(ChildSpec("d", DoneThenCrash, on_drop=letters.append))
        await ref.send("handled")
    assert letters == []


async def test_on_stop_runs_shielded_and_bounded_by_the_cleanup_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopped = []

    class Stubborn(Actor[Any]):
        async def run(self, ctx: ActorContext[Any]) -> None:
            await anyio.sleep_forever()

        async def on_stop(self, ctx: ActorContext[Any]) -> None:
            stopped.append("begun")
            await anyio.sleep_forever()

    spec = ChildSpec("stubborn", Stubborn, shutdown_timeout=0.01, cleanup_timeout=0.05)
    with caplog.at_level(logging.WARNING, "kinesis_actors.runtime"):
        started = anyio.current_time()
        async with Supervisor(name="s") as sup:
            await sup.start_child(spec)
        elapsed = anyio.current_time() - started
    assert stopped == ["begun"]
    assert 0.05 <= elapsed < 1.0
    assert "[s/stubborn] on_stop did not finish within 0.050 s" in caplog.text


async def test_an_on_stop_failure_after_a_clean_run_counts_as_a_crash() -> None:
    journal = Journal()

    class BadCleanup(Actor[Any]):
        async def on_start(self, ctx: ActorContext[Any]) -> None:
            journal.add("start", ctx.incarnation)

        async def run(self, ctx: ActorContext[Any]) -> None:
            if ctx.incarnation == 0:
                return

        async def on_stop(self, ctx: ActorContext[Any]) -> None:
            if ctx.incarnation == 0:
                raise OSError("could not close")

    async with Supervisor(backoff=Backoff.none()) as sup:
        await sup.start_child(ChildSpec("c", BadCleanup))
        await journal.wait_count("start", 2)
        assert sup.statistics().child("c").last_failure == "OSError('could not close')"


async def test_manual_readiness_and_its_absence() -> None:
    class Manual(Actor[Any]):
        ready_after_start = False

        def __init__(self, forget: bool) -> None:
            self.forget = forget

        async def run(self, ctx: ActorContext[Any]) -> None:
            await anyio.sleep(0.01)
            if self.forget:
                return
            ctx.ready()
            await anyio.sleep_forever()

    async with Supervisor() as sup:
        await sup.start_child(ChildSpec("ok", lambda: Manual(False), shutdown_timeout=0))
        assert sup.statistics().child("ok").state == "running"
        with pytest.raises(RuntimeError, match=r"without calling ctx\.ready"):
            await sup.start_child(ChildSpec("forgot", lambda: Manual(True)))


async def test_the_base_actor_demands_a_handler() -> None:
    with pytest.raises(RestartIntensityExceeded) as info:
        async with Supervisor(backoff=Backoff.none(), intensity=(0, 1.0)) as sup:
            ref = await sup.start_child(ChildSpec("bare", Actor[int]))
            assert ref.try_send(1)
            await anyio.sleep_forever()
    assert isinstance(info.value.causes[0], NotImplementedError)
