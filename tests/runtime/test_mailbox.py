"""Mailbox: full policies, the control lane, close semantics, statistics and the bound."""

from __future__ import annotations

import logging
import random
from typing import TypeVar

import anyio
import pytest

from kinesis_actors.runtime import (
    DeadLetter,
    DropReason,
    FullPolicy,
    Mailbox,
    MailboxClosed,
    MailboxFull,
    ManualClock,
)
from kinesis_actors.runtime._mailbox import YIELD_EVERY

pytestmark = pytest.mark.anyio

T = TypeVar("T")


def collecting() -> tuple[list[DeadLetter[int]], Mailbox[int]]:
    letters: list[DeadLetter[int]] = []
    return letters, Mailbox(2, FullPolicy.BLOCK, name="m", on_drop=letters.append)


def drain(mailbox: Mailbox[T]) -> list[T]:
    items: list[T] = []
    while True:
        try:
            items.append(mailbox.receive_nowait())
        except anyio.WouldBlock:
            return items


# -- full policies ------------------------------------------------------------------------------


async def test_block_policy_sender_waits_for_room_and_keeps_order() -> None:
    mailbox: Mailbox[int] = Mailbox(2, FullPolicy.BLOCK)
    await mailbox.send(1)
    await mailbox.send(2)
    done = anyio.Event()

    async def third() -> None:
        await mailbox.send(3)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(third)
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set()
        assert mailbox.statistics().senders_waiting == 1
        assert len(mailbox) == 2
        assert await mailbox.receive() == 1
        await done.wait()
    assert drain(mailbox) == [2, 3]
    stats = mailbox.statistics()
    assert (stats.senders_waiting, stats.sent, stats.received, stats.dropped) == (0, 3, 3, 0)


async def test_block_policy_try_send_and_send_nowait_refuse_when_full() -> None:
    mailbox: Mailbox[int] = Mailbox(1, FullPolicy.BLOCK)
    assert mailbox.try_send(1)
    assert not mailbox.try_send(2)
    with pytest.raises(MailboxFull):
        mailbox.send_nowait(3)
    assert drain(mailbox) == [1]
    assert mailbox.statistics().rejected == 2


async def test_both_nowait_sides_raise_would_block() -> None:
    """``send_nowait`` on a full mailbox and ``receive_nowait`` on an empty one: one
    ``except anyio.WouldBlock`` serves both, as with anyio's streams."""
    mailbox: Mailbox[int] = Mailbox(1, FullPolicy.BLOCK)
    with pytest.raises(anyio.WouldBlock):
        mailbox.receive_nowait()
    mailbox.send_nowait(1)
    with pytest.raises(anyio.WouldBlock):
        mailbox.send_nowait(2)


async def test_fail_policy_raises_and_counts() -> None:
    mailbox: Mailbox[int] = Mailbox(2, FullPolicy.FAIL)
    await mailbox.send(1)
    await mailbox.send(2)
    with pytest.raises(MailboxFull):
        await mailbox.send(3)
    assert not mailbox.try_send(4)
    assert drain(mailbox) == [1, 2]
    stats = mailbox.statistics()
    assert (stats.rejected, stats.dropped, stats.peak_depth) == (2, 0, 2)


async def test_drop_oldest_evicts_the_head_and_reports_it() -> None:
    letters: list[DeadLetter[int]] = []
    mailbox = Mailbox(2, FullPolicy.DROP_OLDEST, name="m", on_drop=letters.append)
    for item in (1, 2, 3):
        await mailbox.send(item)
    assert mailbox.try_send(4)
    assert drain(mailbox) == [3, 4]
    assert [(d.item, d.reason, d.mailbox) for d in letters] == [
        (1, DropReason.DROPPED_OLDEST, "m"),
        (2, DropReason.DROPPED_OLDEST, "m"),
    ]
    assert mailbox.statistics().dropped == 2
    assert mailbox.statistics().dead_letters == 2


async def test_drop_newest_discards_the_incoming_item_and_reports_it() -> None:
    letters: list[DeadLetter[int]] = []
    mailbox = Mailbox(2, FullPolicy.DROP_NEWEST, on_drop=letters.append)
    for item in (1, 2, 3):
        await mailbox.send(item)
    assert not mailbox.try_send(4)
    assert drain(mailbox) == [1, 2]
    assert [(d.item, d.reason) for d in letters] == [
        (3, DropReason.DROPPED_NEWEST),
        (4, DropReason.DROPPED_NEWEST),
    ]
    assert mailbox.statistics().dropped == 2


async def test_a_failing_dead_letter_hook_does_not_break_sending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(letter: DeadLetter[int]) -> None:
        raise RuntimeError("hook bug")

    mailbox = Mailbox(1, FullPolicy.DROP_OLDEST, name="m", on_drop=broken)
    with caplog.at_level(logging.ERROR, "kinesis_actors.runtime"):
        await mailbox.send(1)
        await mailbox.send(2)
    assert drain(mailbox) == [2]
    assert "[m] dead-letter hook failed" in caplog.text


@pytest.mark.parametrize("policy", list(FullPolicy))
async def test_depth_never_exceeds_capacity_under_any_policy(policy: FullPolicy) -> None:
    rng = random.Random(1234)
    capacity = 3
    mailbox: Mailbox[int] = Mailbox(capacity, policy)
    outcomes = {"sent": 0, "refused": 0}

    async def sender(base: int) -> None:
        for i in range(50):
            try:
                await mailbox.send(base + i)
                outcomes["sent"] += 1
            except MailboxFull:
                outcomes["refused"] += 1
            assert len(mailbox) <= capacity
            if rng.random() < 0.5:
                await anyio.lowlevel.checkpoint()

    received = 0
    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(sender, n * 1000)
        while received + mailbox.statistics().dropped + outcomes["refused"] < 200:
            assert len(mailbox) <= capacity
            await mailbox.receive()
            received += 1
            for _ in range(rng.randrange(3)):
                await anyio.lowlevel.checkpoint()
    stats = mailbox.statistics()
    assert stats.peak_depth == capacity
    assert received + stats.dropped + stats.rejected == 200
    assert stats.sent == received + stats.dropped * (policy is FullPolicy.DROP_OLDEST)


# -- control lane -------------------------------------------------------------------------------


async def test_control_overtakes_data_and_blocked_senders() -> None:
    mailbox: Mailbox[str] = Mailbox(1, FullPolicy.BLOCK, control_capacity=2)
    await mailbox.send("data-1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(mailbox.send, "data-2")
        await anyio.wait_all_tasks_blocked()
        mailbox.send_control("stop")
        mailbox.send_control("restart")
        with pytest.raises(MailboxFull):
            mailbox.send_control("one too many")
        assert mailbox.statistics().control_depth == 2
        received = [await mailbox.receive() for _ in range(4)]
    assert received == ["stop", "restart", "data-1", "data-2"]


# -- close ----------------------------------------------------------------------------------


async def test_close_fails_blocked_senders_and_lets_receivers_drain() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    await mailbox.send(1)
    errors: list[BaseException] = []

    async def blocked() -> None:
        try:
            await mailbox.send(2)
        except MailboxClosed as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked)
        await anyio.wait_all_tasks_blocked()
        mailbox.close()
    assert len(errors) == 1
    with pytest.raises(MailboxClosed):
        await mailbox.send(3)
    with pytest.raises(MailboxClosed):
        mailbox.try_send(3)
    with pytest.raises(MailboxClosed):
        mailbox.send_control(3)
    assert [item async for item in mailbox] == [1]
    with pytest.raises(anyio.EndOfStream):
        await mailbox.receive()
    assert mailbox.statistics().closed


async def test_close_wakes_a_waiting_receiver() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    ended = anyio.Event()

    async def receiver() -> None:
        async for _ in mailbox:
            pass
        ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        await anyio.wait_all_tasks_blocked()
        mailbox.close()
    assert ended.is_set()


async def test_purge_reports_every_undelivered_item() -> None:
    letters, mailbox = collecting()
    await mailbox.send(1)
    mailbox.send_control(0)
    await mailbox.send(2)
    assert mailbox.purge() == 3
    assert [(d.item, d.reason) for d in letters] == [
        (0, DropReason.UNDELIVERED),
        (1, DropReason.UNDELIVERED),
        (2, DropReason.UNDELIVERED),
    ]
    assert len(mailbox) == 0


# -- cancellation -------------------------------------------------------------------------------


async def test_a_cancelled_blocked_send_withdraws_its_item() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    await mailbox.send(1)
    with anyio.move_on_after(0.01) as scope:
        await mailbox.send(2)
    assert scope.cancelled_caught
    assert drain(mailbox) == [1]
    stats = mailbox.statistics()
    assert (stats.sent, stats.senders_waiting) == (1, 0)
    # The slot it was waiting for is free for the next sender.
    assert mailbox.try_send(3)


async def test_a_sender_cancelled_after_being_granted_a_slot_passes_it_on() -> None:
    mailbox: Mailbox[str] = Mailbox(1)
    await mailbox.send("first")
    outcome: dict[str, str] = {}

    async def send(item: str, scope: anyio.CancelScope) -> None:
        with scope:
            await mailbox.send(item)
            outcome[item] = "sent"
        if scope.cancelled_caught:
            outcome[item] = "cancelled"

    scope_a, scope_b = anyio.CancelScope(), anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(send, "a", scope_a)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(send, "b", scope_b)
        await anyio.wait_all_tasks_blocked()
        # Free the slot (granting it to "a") and cancel "a" before it can run.
        assert mailbox.receive_nowait() == "first"
        scope_a.cancel()
        await anyio.wait_all_tasks_blocked()
        first = mailbox.receive_nowait()
        await anyio.wait_all_tasks_blocked()
        rest = drain(mailbox)
    queued = [first, *rest]
    # Exactly-once: an item is queued if and only if its send returned.
    assert sorted(queued) == sorted(k for k, v in outcome.items() if v == "sent")
    assert "b" in queued
    assert mailbox.statistics().senders_waiting == 0


async def test_blocked_senders_are_served_in_fifo_order() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    await mailbox.send(0)
    async with anyio.create_task_group() as tg:
        for item in (1, 2, 3):
            tg.start_soon(mailbox.send, item)
            await anyio.wait_all_tasks_blocked()
        received = [await mailbox.receive() for _ in range(4)]
    assert received == [0, 1, 2, 3]


async def test_several_receivers_each_item_delivered_once() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    seen: list[int] = []

    async def worker() -> None:
        async for item in mailbox:
            seen.append(item)
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(worker)
        for item in range(100):
            await mailbox.send(item)
        mailbox.close()
    assert sorted(seen) == list(range(100))


# -- statistics ---------------------------------------------------------------------------------


async def test_stats_count_blocked_time_including_waits_in_progress() -> None:
    clock = ManualClock()
    mailbox: Mailbox[int] = Mailbox(1, clock=clock, name="stats")
    await mailbox.send(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(mailbox.send, 2)
        await anyio.wait_all_tasks_blocked()
        clock.advance(2.0)
        assert mailbox.statistics().blocked_seconds == pytest.approx(2.0)
        assert mailbox.statistics().senders_waiting == 1
        await mailbox.receive()
    clock.advance(5.0)
    stats = mailbox.statistics()
    assert stats.blocked_seconds == pytest.approx(2.0)
    assert (stats.name, stats.capacity, stats.policy) == ("stats", 1, "block")
    assert (stats.depth, stats.peak_depth, stats.senders_waiting) == (1, 1, 0)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Mailbox(0)
    with pytest.raises(ValueError, match="control_capacity"):
        Mailbox(1, control_capacity=0)


# -- scheduling -----------------------------------------------------------------------------


async def test_a_producer_that_never_waits_still_lets_other_tasks_run() -> None:
    mailbox: Mailbox[int] = Mailbox(1, FullPolicy.DROP_OLDEST)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        for i in range(YIELD_EVERY * 10):
            await mailbox.send(i)
        tg.cancel_scope.cancel()
    assert ticks >= 5


async def test_cancellation_is_checked_on_every_operation_and_loses_nothing() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    await mailbox.send(1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await mailbox.send(2)
    assert scope.cancelled_caught
    with anyio.CancelScope() as scope:
        scope.cancel()
        await mailbox.receive()
    assert scope.cancelled_caught
    assert drain(mailbox) == [1]
