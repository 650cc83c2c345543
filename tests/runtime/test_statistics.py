"""``statistics()``: the runtime's one way to read a mailbox, an actor or a supervision tree.

Each returns a frozen snapshot; the names it replaced (``stats()``, ``snapshot()``) still
work for one release and warn with the new name.
"""

from __future__ import annotations

import dataclasses

import pytest

from kinesis_actors.runtime import BlockingRuntime, ChildSpec, Mailbox, Supervisor

from .helpers import Journal, probe


@pytest.mark.anyio
async def test_a_mailboxs_statistics_are_a_frozen_copy_that_later_sends_do_not_change() -> None:
    mailbox = Mailbox[int](4, name="m")
    mailbox.send_nowait(1)
    before = mailbox.statistics()
    mailbox.send_nowait(2)
    assert (before.depth, before.sent) == (1, 1)
    assert mailbox.statistics().depth == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.depth = 5  # type: ignore[misc]


@pytest.mark.anyio
async def test_mailbox_stats_still_works_and_warns_naming_statistics() -> None:
    mailbox = Mailbox[int](4, name="m")
    mailbox.send_nowait(1)
    with pytest.warns(DeprecationWarning, match=r"Mailbox\.statistics\(\)"):
        stats = mailbox.stats()
    assert stats == mailbox.statistics()


@pytest.mark.anyio
async def test_actor_ref_stats_still_works_and_warns_naming_statistics() -> None:
    journal = Journal()
    async with Supervisor(name="root") as sup:
        await sup.start_child(ChildSpec("a", probe(journal, "a"), capacity=4))
        ref = sup.child("a")
        with pytest.warns(DeprecationWarning, match=r"ActorRef\.statistics\(\)"):
            stats = ref.stats()
        assert stats == ref.statistics()
        assert stats is not None and stats.capacity == 4


@pytest.mark.anyio
async def test_supervisor_snapshot_still_works_and_warns_naming_statistics() -> None:
    journal = Journal()
    async with Supervisor(name="root") as sup:
        await sup.start_child(ChildSpec("a", probe(journal, "a")))
        with pytest.warns(DeprecationWarning, match=r"Supervisor\.statistics\(\)"):
            snapshot = sup.snapshot()
        assert snapshot == sup.statistics()
        assert [child.name for child in snapshot.children] == ["a"]


def test_blocking_runtime_snapshot_still_works_and_warns_naming_statistics() -> None:
    journal = Journal()
    with BlockingRuntime(name="rt") as runtime:
        runtime.start_child(ChildSpec("a", probe(journal, "a")))
        with pytest.warns(DeprecationWarning, match=r"BlockingRuntime\.statistics\(\)"):
            snapshot = runtime.snapshot()
        assert snapshot.name == runtime.statistics().name == "rt"
        assert [child.name for child in snapshot.children] == ["a"]
