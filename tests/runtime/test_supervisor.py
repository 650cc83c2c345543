"""Supervision: strategies, restart types, intensity escalation, backoff, mailbox survival."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import pytest

from kinesis_actors.runtime import (
    Actor,
    ActorContext,
    ActorExited,
    Backoff,
    ChildSpec,
    DeadLetter,
    DropReason,
    IntensityScope,
    Restart,
    RestartIntensityExceeded,
    Strategy,
    Supervisor,
)

from .helpers import Journal, probe

pytestmark = pytest.mark.anyio

NO_BACKOFF = Backoff.none()


async def start_probes(sup: Supervisor, journal: Journal, *names: str) -> None:
    for name in names:
        await sup.start_child(ChildSpec(name, probe(journal, name)))


# -- the mailbox survives a restart -------------------------------------------------------------


async def test_no_message_is_lost_across_a_restart_except_the_one_being_handled() -> None:
    journal = Journal()
    letters: list[DeadLetter[Any]] = []
    gate = anyio.Event()
    spec = ChildSpec("worker", probe(journal, "worker", gate), capacity=16, on_drop=letters.append)
    async with Supervisor(backoff=NO_BACKOFF) as sup:
        ref = await sup.start_child(spec)
        # Everything is queued before the actor handles anything.
        for message in [1, 2, "boom", 3, 4, 5]:
            await ref.send(message)
        gate.set()
        await journal.wait_count("handle", 5)
    assert journal.of("handle") == [
        ("worker", 0, 1),
        ("worker", 0, 2),
        ("worker", 1, 3),
        ("worker", 1, 4),
        ("worker", 1, 5),
    ]
    assert [(d.item, d.reason) for d in letters] == [("boom", DropReason.LOST_IN_FLIGHT)]
    assert str(letters[0].error) == "worker boom"


async def test_senders_keep_using_the_same_ref_across_restarts() -> None:
    journal = Journal()
    async with Supervisor(backoff=NO_BACKOFF) as sup:
        await start_probes(sup, journal, "w")
        ref = sup.child("w")
        for round_ in range(3):
            await ref.send("boom")
            await ref.send(round_)
        await journal.wait_count("handle", 3)
        assert sup.child("w") is ref
        assert sup.statistics().child("w").restarts == 3
    assert [event[1:] for event in journal.of("handle")] == [(1, 0), (2, 1), (3, 2)]


# -- strategies ---------------------------------------------------------------------------------


async def test_one_for_one_restarts_only_the_failed_child() -> None:
    journal = Journal()
    async with Supervisor(Strategy.ONE_FOR_ONE, backoff=NO_BACKOFF) as sup:
        await start_probes(sup, journal, "a", "b", "c")
        await sup.child("b").send("boom")
        await journal.wait_for(lambda: ("b", 1) in journal.of("start"))
        assert journal.of("start") == [("a", 0), ("b", 0), ("c", 0), ("b", 1)]
        assert journal.of("stop") == [("b", 0)]
        snapshot = sup.statistics()
        assert [child.restarts for child in snapshot.children] == [0, 1, 0]


async def test_one_for_all_stops_the_others_in_reverse_and_restarts_all_in_order() -> None:
    journal = Journal()
    async with Supervisor(Strategy.ONE_FOR_ALL, backoff=NO_BACKOFF) as sup:
        await start_probes(sup, journal, "a", "b", "c", "d")
        await sup.child("b").send("boom")
        await journal.wait_for(lambda: ("d", 1) in journal.of("start"))
        # b crashed; its siblings were stopped last-started first; all restarted in order.
        assert journal.of("stop") == [("b", 0), ("d", 0), ("c", 0), ("a", 0)]
        assert journal.of("start")[4:] == [("a", 1), ("b", 1), ("c", 1), ("d", 1)]
        assert [child.state for child in sup.statistics().children] == ["running"] * 4


async def test_rest_for_one_restarts_the_child_and_those_started_after_it() -> None:
    journal = Journal()
    async with Supervisor(Strategy.REST_FOR_ONE, backoff=NO_BACKOFF) as sup:
        await start_probes(sup, journal, "a", "b", "c", "d")
        await sup.child("b").send("boom")
        await journal.wait_for(lambda: ("d", 1) in journal.of("start"))
        assert journal.of("stop") == [("b", 0), ("d", 0), ("c", 0)]
        assert journal.of("start")[4:] == [("b", 1), ("c", 1), ("d", 1)]
        assert [child.restarts for child in sup.statistics().children] == [0, 1, 1, 1]


async def test_one_for_all_does_not_restart_a_temporary_sibling() -> None:
    journal = Journal()
    async with Supervisor(Strategy.ONE_FOR_ALL, backoff=NO_BACKOFF) as sup:
        await sup.start_child(ChildSpec("a", probe(journal, "a")))
        await sup.start_child(ChildSpec("tmp", probe(journal, "tmp"), restart=Restart.TEMPORARY))
        await sup.child("a").send("boom")
        await journal.wait_for(lambda: ("a", 1) in journal.of("start"))
        assert [child.name for child in sup.statistics().children] == ["a"]
    assert ("tmp", 1) not in journal.of("start")


# -- restart types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "message", "restarted"),
    [
        (Restart.PERMANENT, "boom", True),
        (Restart.PERMANENT, "return", True),
        (Restart.TRANSIENT, "boom", True),
        (Restart.TRANSIENT, "return", False),
        (Restart.TEMPORARY, "boom", False),
        (Restart.TEMPORARY, "return", False),
    ],
)
async def test_restart_types(restart: Restart, message: str, restarted: bool) -> None:
    journal = Journal()
    async with Supervisor(backoff=NO_BACKOFF) as sup:
        await sup.start_child(ChildSpec("x", probe(journal, "x"), restart=restart))
        await sup.child("x").send(message)
        await journal.wait_count("stop", 1)
        await anyio.wait_all_tasks_blocked()  # the decision loop has run
        if restarted:
            await journal.wait_for(lambda: ("x", 1) in journal.of("start"))
        names = [child.name for child in sup.statistics().children]
    assert (("x", 1) in journal.of("start")) is restarted
    assert ("x" in names) is restarted


async def test_a_permanent_child_that_returns_is_restarted_with_actor_exited_as_cause() -> None:
    journal = Journal()
    with pytest.raises(RestartIntensityExceeded) as info:
        async with Supervisor(backoff=NO_BACKOFF, intensity=(1, 10.0)) as sup:
            await start_probes(sup, journal, "p")
            await sup.child("p").send("return")
            await journal.wait_count("start", 2)
            await sup.child("p").send("return")
            await anyio.sleep_forever()
    assert all(isinstance(cause, ActorExited) for cause in info.value.causes)


# -- intensity ----------------------------------------------------------------------------------


async def test_intensity_exceeded_stops_children_in_reverse_and_escalates_with_causes() -> None:
    journal = Journal()
    with pytest.raises(RestartIntensityExceeded) as info:
        async with Supervisor(name="root", backoff=NO_BACKOFF, intensity=(2, 60.0)) as sup:
            await start_probes(sup, journal, "a", "b", "c")
            for _ in range(3):
                await sup.child("b").send("boom")
            await anyio.sleep_forever()  # cancelled by the escalation
    failure = info.value
    assert type(failure) is RestartIntensityExceeded  # one exception, not a group
    assert [str(cause) for cause in failure.causes] == ["b boom"] * 3
    assert failure.__cause__ is failure.causes[-1]
    assert failure.supervisor == "root"
    assert (sup.statistics().state, sup.statistics().failure) == ("failed", str(failure))
    stops = journal.of("stop")
    assert stops[:3] == [("b", 0), ("b", 1), ("b", 2)]
    assert stops[3:] == [("c", 0), ("a", 0)]


async def test_failures_of_different_children_add_up_to_the_intensity() -> None:
    journal = Journal()
    with pytest.raises(RestartIntensityExceeded) as info:
        async with Supervisor(backoff=NO_BACKOFF, intensity=(1, 60.0)) as sup:
            await start_probes(sup, journal, "a", "b")
            await sup.child("a").send("boom")
            await journal.wait_for(lambda: ("a", 1) in journal.of("start"))
            await sup.child("b").send("boom")
            await anyio.sleep_forever()
    assert [str(cause) for cause in info.value.causes] == ["a boom", "b boom"]
    assert sorted(journal.of("stop"))[-2:] == [("a", 1), ("b", 0)]


async def test_with_an_intensity_per_child_one_crash_of_every_child_does_not_give_up() -> None:
    """The shared budget of the test above gives up on two children's crash each; one budget
    per child does not: a cause they all met at once is not a child failing again and again."""
    journal = Journal()
    names = ["a", "b", "c", "d"]
    async with Supervisor(
        backoff=NO_BACKOFF, intensity=(1, 60.0), intensity_scope=IntensityScope.CHILD
    ) as sup:
        await start_probes(sup, journal, *names)
        for name in names:
            await sup.child(name).send("boom")
        await journal.wait_for(lambda: all((name, 1) in journal.of("start") for name in names))
        snapshot = sup.statistics()
    assert (snapshot.state, snapshot.intensity_scope, snapshot.restarts_in_window) == (
        "running",
        "child",
        1,
    )
    assert [child.restarts for child in snapshot.children] == [1, 1, 1, 1]


async def test_with_an_intensity_per_child_one_child_over_its_own_budget_gives_up() -> None:
    journal = Journal()
    with pytest.raises(RestartIntensityExceeded) as info:
        async with Supervisor(
            backoff=NO_BACKOFF, intensity=(1, 60.0), intensity_scope=IntensityScope.CHILD
        ) as sup:
            await start_probes(sup, journal, "a", "b")
            await sup.child("a").send("boom")
            await journal.wait_for(lambda: ("a", 1) in journal.of("start"))
            for _ in range(2):
                await sup.child("b").send("boom")
            await anyio.sleep_forever()  # cancelled by the escalation
    assert [str(cause) for cause in info.value.causes] == ["b boom", "b boom"]
    assert (info.value.max_restarts, info.value.period) == (1, 60.0)


@pytest.mark.parametrize("strategy", [Strategy.ONE_FOR_ALL, Strategy.REST_FOR_ONE])
async def test_an_intensity_per_child_needs_one_for_one(strategy: Strategy) -> None:
    with pytest.raises(ValueError, match="one_for_one"):
        Supervisor(strategy, intensity_scope=IntensityScope.CHILD)


async def test_a_restart_that_fails_to_start_counts_and_is_retried() -> None:
    journal = Journal()

    class FlakyStart(Actor[str]):
        async def on_start(self, ctx: ActorContext[str]) -> None:
            journal.add("attempt", ctx.incarnation)
            if len(journal.of("attempt")) in (2, 3):
                raise ConnectionError(f"attempt {len(journal.of('attempt'))}")

        async def handle(self, ctx: ActorContext[str], message: str) -> None:
            if message == "crash":
                raise RuntimeError("crash")
            journal.add("handled", message)

    async with Supervisor(backoff=NO_BACKOFF, intensity=(5, 60.0)) as sup:
        ref = await sup.start_child(ChildSpec("flaky", FlakyStart))
        await ref.send("crash")
        await ref.send("ping")
        await journal.wait_count("handled", 1)
        snapshot = sup.statistics()
    assert len(journal.of("attempt")) == 4
    assert snapshot.restarts_in_window == 3
    assert snapshot.child("flaky").last_failure == "ConnectionError('attempt 3')"
    assert snapshot.child("flaky").state == "running"


# -- backoff ------------------------------------------------------------------------------------


async def test_restarts_wait_for_the_backoff_and_one_childs_backoff_never_delays_another() -> None:
    journal = Journal()
    delay = 0.2
    backoff = Backoff(initial=delay, maximum=delay, jitter=0.0)
    restarted_at: dict[str, float] = {}

    class Timed(Actor[Any]):
        def __init__(self, name: str) -> None:
            self.name = name

        async def on_start(self, ctx: ActorContext[Any]) -> None:
            if ctx.incarnation:
                restarted_at[self.name] = anyio.current_time()
                journal.add("restarted", self.name)

        async def handle(self, ctx: ActorContext[Any], message: Any) -> None:
            raise RuntimeError(self.name)

    async with Supervisor(backoff=backoff) as sup:
        for name in ("a", "b"):
            await sup.start_child(ChildSpec(name, functools.partial(Timed, name)))
        crashed_at = anyio.current_time()
        sup.child("a").try_send(1)
        sup.child("b").try_send(1)
        await journal.wait_count("restarted", 2)
    for name in ("a", "b"):
        waited = restarted_at[name] - crashed_at
        assert delay <= waited < 1.8 * delay, f"{name} restarted after {waited:.3f} s"


# -- many children -------------------------------------------------------------------------------


class CountedName(str):
    """A child's name that counts the comparisons made with it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


async def test_starting_stopping_and_finding_a_child_compare_no_other_childs_name() -> None:
    """A consumer's readers are a child a shard: a lookup that scanned the children made
    opening a thousand shards (each start checks the name is free, each new reader stops its
    predecessor if any) quadratic in the shard count."""
    journal = Journal()
    names = [CountedName(f"shard-{i}") for i in range(300)]
    async with Supervisor(backoff=NO_BACKOFF) as sup:
        CountedName.compared = 0
        for name in names:
            with pytest.raises(KeyError):
                await sup.stop_child(name)  # none yet, as for a shard's first reader
            await sup.start_child(ChildSpec(name, probe(journal, name)))
        for name in names[::7]:
            sup.child(name)
            await sup.stop_child(name)
        assert CountedName.compared <= 2 * len(names), CountedName.compared
        assert len(sup.statistics().children) == len(names) - len(names[::7])
