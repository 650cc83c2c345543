"""Children without a mailbox of the supervisor's making: sources (none at all) and children
that bring their own (a shard's buffer, lent to its processor)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from kinesis_actors.runtime import (
    Actor,
    ActorContext,
    Backoff,
    ChildSpec,
    FullPolicy,
    Mailbox,
    MailboxClosed,
    Supervisor,
)

pytestmark = pytest.mark.anyio

NO_BACKOFF = Backoff.none()


class Source(Actor[None]):
    """Reads from outside the runtime (here: an event) until cancelled."""

    def __init__(self, started: anyio.Event, stopped: list[str]) -> None:
        self._started = started
        self._stopped = stopped

    async def run(self, ctx: ActorContext[None]) -> None:
        assert not ctx.has_mailbox
        assert not ctx.stop_requested
        with pytest.raises(TypeError, match="source"):
            await ctx.receive()
        self._started.set()
        try:
            await anyio.sleep_forever()
        finally:
            self._stopped.append("cancelled")


class Collector(Actor[int]):
    """Receives from whatever mailbox it was given; crashes on a negative number."""

    def __init__(self, seen: list[tuple[int, int]]) -> None:
        self._seen = seen

    async def run(self, ctx: ActorContext[int]) -> None:
        async for item in ctx:
            if item < 0:
                raise ValueError(f"bad item {item}")
            self._seen.append((ctx.incarnation, item))
            ctx.done()


async def test_a_source_child_has_no_mailbox_and_is_stopped_by_cancellation() -> None:
    started, stopped = anyio.Event(), []
    spec = ChildSpec("reader", lambda: Source(started, stopped), source=True, shutdown_timeout=0.3)
    with anyio.fail_after(5):
        async with Supervisor() as sup:
            ref = await sup.start_child(spec)
            await started.wait()
            with pytest.raises(TypeError, match="has no mailbox"):
                await ref.send(None)
            with pytest.raises(TypeError, match="has no mailbox"):
                ref.try_send(None)
            assert ref.statistics() is None
            assert sup.statistics().child("reader").mailbox is None
            before = anyio.current_time()
            await sup.stop_child("reader")
            # Nothing to close: the graceful stop waits out shutdown_timeout, then cancels.
            assert anyio.current_time() - before >= 0.25
    assert stopped == ["cancelled"]


async def test_a_lent_mailbox_is_received_from_and_outlives_the_child() -> None:
    buffer: Mailbox[int] = Mailbox(4, FullPolicy.FAIL, name="shard-buffer")
    seen: list[tuple[int, int]] = []
    spec = ChildSpec("processor", lambda: Collector(seen), mailbox=buffer, shutdown_timeout=0)
    for item in (1, -1, 2):  # queued before the child exists
        buffer.send_nowait(item)
    async with Supervisor(backoff=NO_BACKOFF) as sup:
        ref = await sup.start_child(spec)
        assert ref.mailbox is buffer
        with anyio.fail_after(5):
            while len(seen) < 2:
                await anyio.sleep(0.01)
        snapshot = sup.statistics().child("processor")
        assert snapshot.restarts == 1  # the -1 crashed the first incarnation
        assert snapshot.mailbox is not None and snapshot.mailbox.name == "shard-buffer"
        assert snapshot.mailbox.dead_letters == 1  # the item in flight at the crash
        buffer.send_nowait(3)
        buffer.send_nowait(4)
        await sup.stop_child("processor")
        buffer.send_nowait(5)  # stopping the child neither closed nor purged it
    assert seen[:2] == [(0, 1), (1, 2)]
    assert not buffer.closed
    # What the stopped child had not taken is still there for its next incarnation.
    left = []
    while len(buffer):
        left.append(buffer.receive_nowait())
    assert set(left) <= {3, 4, 5} and 5 in left
    assert sorted(item for _, item in seen[2:]) + sorted(left) == [3, 4, 5]


def test_a_child_that_brings_a_mailbox_or_none_takes_no_mailbox_options() -> None:
    buffer: Mailbox[int] = Mailbox(1)
    with pytest.raises(ValueError, match="brings its own"):
        ChildSpec("p", lambda: Collector([]), mailbox=buffer, capacity=8)
    with pytest.raises(ValueError, match="brings its own"):
        ChildSpec("s", lambda: Collector([]), source=True, max_weight=10)
    with pytest.raises(ValueError, match="source child has no mailbox"):
        ChildSpec("x", lambda: Collector([]), source=True, mailbox=buffer)


def test_a_closed_mailbox_reopens_only_empty() -> None:
    mailbox: Mailbox[int] = Mailbox(2, FullPolicy.FAIL, name="m")
    mailbox.send_nowait(1)
    mailbox.close()
    with pytest.raises(RuntimeError, match="reopen needs an empty mailbox"):
        mailbox.reopen()
    assert mailbox.purge() == 1
    mailbox.reopen()
    mailbox.send_nowait(2)
    assert mailbox.receive_nowait() == 2
    assert mailbox.statistics().received == 1


async def test_a_mailbox_does_not_reopen_under_a_sender_woken_by_its_close() -> None:
    """A sender blocked on a full mailbox is woken by close() without room: reopened before
    it ran, its item would go in past the capacity."""
    mailbox: Mailbox[str] = Mailbox(1, name="m")
    mailbox.send_nowait("queued")
    outcome: list[str] = []

    async def blocked_sender() -> None:
        try:
            await mailbox.send("late")
        except MailboxClosed:
            outcome.append("closed")

    async with anyio.create_task_group() as group:
        group.start_soon(blocked_sender)
        with anyio.fail_after(5):
            while mailbox.statistics().senders_waiting == 0:
                await anyio.lowlevel.checkpoint()
        mailbox.close()
        assert mailbox.receive_nowait() == "queued"
        with pytest.raises(RuntimeError, match="senders still waking"):
            mailbox.reopen()
    assert outcome == ["closed"]
    mailbox.reopen()  # once the sender has gone
    mailbox.send_nowait("fresh")
    assert len(mailbox) == 1
