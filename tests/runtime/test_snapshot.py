"""Observability: the snapshot tree, log lines naming the actor, and nested supervisors."""

from __future__ import annotations

import json
import logging

import anyio
import pytest

from kinesis_actors.runtime import (
    Backoff,
    ChildSpec,
    FullPolicy,
    RestartIntensityExceeded,
    Strategy,
    Supervisor,
    supervisor_spec,
)

from .helpers import Journal, probe

pytestmark = pytest.mark.anyio


async def test_snapshot_reports_children_mailboxes_restarts_and_last_failure() -> None:
    journal = Journal()
    async with Supervisor(name="root", backoff=Backoff.none(), intensity=(5, 60.0)) as sup:
        await sup.start_child(ChildSpec("a", probe(journal, "a"), capacity=4))
        await sup.start_child(
            ChildSpec("b", probe(journal, "b"), capacity=2, policy=FullPolicy.DROP_OLDEST)
        )
        await sup.child("a").send("boom")
        await sup.child("a").send("hello")
        await journal.wait_count("handle", 1)
        snapshot = sup.statistics()
    assert snapshot.name == "root"
    assert snapshot.strategy == "one_for_one"
    assert (snapshot.state, snapshot.restarts_in_window, snapshot.max_restarts) == (
        "running",
        1,
        5,
    )
    a, b = snapshot.children
    assert (a.path, a.state, a.restart, a.restarts, a.incarnation) == (
        "root/a",
        "running",
        "permanent",
        1,
        1,
    )
    assert a.last_failure == "RuntimeError('a boom')"
    assert (a.mailbox.sent, a.mailbox.received, a.mailbox.dead_letters) == (2, 2, 1)
    assert (b.mailbox.capacity, b.mailbox.policy, b.last_failure) == (2, "drop_oldest", None)
    plain = snapshot.to_dict()
    assert json.loads(json.dumps(plain)) == plain
    assert plain["children"][0]["mailbox"]["capacity"] == 4


async def test_the_supervisor_state_is_the_same_plain_string_through_its_life() -> None:
    sup = Supervisor(name="root")
    states = [sup.statistics().state]
    with pytest.raises(RuntimeError, match=r"^supervisor 'root' is new$"):
        await sup.start_child(ChildSpec("a", probe(Journal(), "a")))
    async with sup:
        states.append(sup.statistics().state)
        plain = sup.statistics().to_dict()
    states.append(sup.statistics().state)
    assert states == ["new", "running", "stopped"]
    assert all(type(state) is str for state in [*states, plain["state"]])
    assert json.loads(json.dumps(plain))["state"] == "running"


async def test_log_lines_name_the_actor(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal()
    with caplog.at_level(logging.INFO, "kinesis_actors.runtime"):
        async with Supervisor(name="root", backoff=Backoff.none()) as sup:
            await sup.start_child(ChildSpec("worker", probe(journal, "worker")))
            await sup.child("worker").send("boom")
            await journal.wait_for(lambda: ("worker", 1) in journal.of("start"))
    crash = next(r for r in caplog.records if "crashed" in r.getMessage())
    assert crash.getMessage() == "[root/worker] crashed: RuntimeError('worker boom')"
    assert crash.actor == "root/worker"  # type: ignore[attr-defined]
    assert crash.levelno == logging.ERROR
    assert any(r.getMessage().startswith("[root/worker] restarting") for r in caplog.records)


async def test_a_recoverable_crash_is_one_warning_line_and_any_other_an_error_with_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    journal = Journal()
    with caplog.at_level(logging.INFO, "kinesis_actors.runtime"):
        async with Supervisor(name="root", backoff=Backoff.none(), intensity=(5, 60.0)) as sup:
            spec = ChildSpec(
                "reader",
                probe(journal, "reader"),
                recoverable=lambda error: "boom" in str(error),
            )
            await sup.start_child(spec)
            await sup.start_child(ChildSpec("worker", probe(journal, "worker")))
            await sup.child("reader").send("boom")
            await sup.child("worker").send("boom")
            await journal.wait_for(
                lambda: {("reader", 1), ("worker", 1)} <= set(journal.of("start"))
            )
    crashes = [r for r in caplog.records if "crashed" in r.getMessage()]
    reader = next(r for r in crashes if r.actor == "root/reader")  # type: ignore[attr-defined]
    worker = next(r for r in crashes if r.actor == "root/worker")  # type: ignore[attr-defined]
    assert reader.getMessage() == (
        "[root/reader] crashed on a recoverable error: RuntimeError('reader boom')"
    )
    assert (reader.levelno, reader.exc_info) == (logging.WARNING, None)
    assert worker.levelno == logging.ERROR and worker.exc_info is not None


async def test_nested_supervisors_appear_as_a_subtree_and_stop_in_order() -> None:
    journal = Journal()
    readers = supervisor_spec(
        "readers",
        [ChildSpec(f"r{i}", probe(journal, f"r{i}")) for i in range(2)],
        Strategy.ONE_FOR_ALL,
    )
    async with Supervisor(name="root") as sup:
        await sup.start_child(ChildSpec("sink", probe(journal, "sink")))
        await sup.start_child(readers)
        # Ready means the whole subtree is ready.
        assert [event[0] for event in journal.of("start")] == ["sink", "r0", "r1"]
        snapshot = sup.statistics()
    subtree = snapshot.child("readers").subtree
    assert subtree is not None
    assert subtree.name == "root/readers"
    assert [child.path for child in subtree.children] == ["root/readers/r0", "root/readers/r1"]
    assert journal.of("stop") == [("r1", 0), ("r0", 0), ("sink", 0)]


async def test_a_nested_supervisor_that_gives_up_is_restarted_by_its_parent() -> None:
    journal = Journal()
    inner = supervisor_spec(
        "inner",
        [ChildSpec("w", probe(journal, "w"))],
        intensity=(0, 60.0),
        backoff=Backoff.none(),
    )
    with pytest.raises(RestartIntensityExceeded) as info:
        async with Supervisor(name="root", backoff=Backoff.none(), intensity=(1, 60.0)) as sup:
            await sup.start_child(inner)
            await sup.child("inner").send("ignored: a supervisor's mailbox is a stop signal")
            for attempt in (1, 2):
                await journal.wait_count("start", attempt)
                subtree = sup.statistics().child("inner").subtree
                assert subtree is not None
                assert subtree.child("w").state == "running"
                inner_sup = sup._slot("inner").behaviour._supervisor
                await inner_sup.child("w").send("boom")
            await anyio.sleep_forever()
    outer = info.value
    assert outer.supervisor == "root"
    assert all(isinstance(cause, RestartIntensityExceeded) for cause in outer.causes)
    assert outer.causes[0].supervisor == "root/inner"  # type: ignore[attr-defined]
