"""Mailbox weights and held items: the producer's queue, bounded in records and bytes, whose
room comes back when a record is acknowledged rather than when it is received (FLINK-9374)."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_actors.runtime import DeadLetter, DropReason, FullPolicy, Mailbox, MailboxClosed

pytestmark = pytest.mark.anyio


async def test_the_weight_bound_refuses_what_the_count_would_allow() -> None:
    mailbox: Mailbox[str] = Mailbox(10, max_weight=100)
    assert mailbox.try_send("a", 60)
    assert not mailbox.try_send("b", 50)  # 110 > 100, though 2 <= 10
    assert mailbox.try_send("c", 40)
    assert mailbox.receive_nowait() == "a"  # not held: its weight comes back on receive
    assert mailbox.try_send("b", 50)
    stats = mailbox.statistics()
    assert (stats.weight, stats.max_weight, stats.peak_weight, stats.rejected) == (90, 100, 100, 1)


async def test_an_item_heavier_than_the_bound_goes_alone_into_an_empty_mailbox() -> None:
    mailbox: Mailbox[str] = Mailbox(10, max_weight=100)
    assert mailbox.try_send("huge", 500)
    assert not mailbox.try_send("small", 1)
    mailbox.receive_nowait()
    assert mailbox.try_send("small", 1)


async def test_held_items_keep_their_room_until_released_and_wake_senders_in_order() -> None:
    mailbox: Mailbox[str] = Mailbox(2, max_weight=100, hold=True)
    await mailbox.send("a", 10)
    await mailbox.send("b", 10)
    assert [mailbox.receive_nowait(), mailbox.receive_nowait()] == ["a", "b"]
    assert mailbox.occupied == 2 and len(mailbox) == 0  # received, still holding room
    order: list[str] = []

    async def put(item: str, weight: int) -> None:
        await mailbox.send(item, weight)
        order.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(put, "c", 90)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(put, "d", 1)  # fits by itself, but does not overtake "c"
        await anyio.wait_all_tasks_blocked()
        assert order == [] and mailbox.senders_waiting == 2
        assert mailbox.longest_wait() >= 0.0
        mailbox.release(1, 10)  # one slot, 10 bytes: "c" needs 90 of 100 with 10 held
        await anyio.wait_all_tasks_blocked()
        assert order == ["c"]
        mailbox.release(1, 10)
    assert order == ["c", "d"]
    stats = mailbox.statistics()
    assert (stats.held, stats.weight, stats.blocked_sends, stats.peak_occupied) == (0, 91, 2, 2)
    with pytest.raises(RuntimeError, match="released more"):
        mailbox.release(1, 0)


async def test_receive_held_takes_every_queued_item_and_each_keeps_its_room() -> None:
    mailbox: Mailbox[str] = Mailbox(3, max_weight=100, hold=True)
    assert mailbox.receive_held() == []
    for item in "abc":
        assert mailbox.try_send(item, 30)
    assert mailbox.receive_held() == ["a", "b", "c"]
    assert len(mailbox) == 0 and mailbox.occupied == 3 and mailbox.weight == 90
    assert not mailbox.try_send("d", 1)  # the held items still fill it
    mailbox.release(2, 60)
    assert mailbox.try_send("d", 10)
    assert mailbox.receive_held() == ["d"]
    stats = mailbox.statistics()
    assert (stats.received, stats.held, stats.weight) == (4, 2, 40)
    with pytest.raises(RuntimeError, match="does not hold"):
        Mailbox[str](3).receive_held()


async def test_a_cancelled_head_of_the_line_lets_the_others_in() -> None:
    mailbox: Mailbox[str] = Mailbox(5, max_weight=100, hold=True)
    await mailbox.send("a", 50)
    mailbox.receive_nowait()
    got = anyio.Event()
    heavy = anyio.CancelScope()

    async def big() -> None:
        with heavy:
            await mailbox.send("big", 80)

    async def small() -> None:
        await mailbox.send("small", 10)
        got.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(big)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(small)
        await anyio.wait_all_tasks_blocked()
        assert not got.is_set()  # 10 fits, but it does not overtake the head
        heavy.cancel()
        await got.wait()
    assert mailbox.receive_nowait() == "small"


async def test_purging_a_hold_mailbox_reports_each_item_and_keeps_its_room_for_the_owner() -> None:
    letters: list[DeadLetter[str]] = []
    mailbox: Mailbox[str] = Mailbox(4, max_weight=100, hold=True, on_drop=letters.append)
    await mailbox.send("a", 30)
    await mailbox.send("b", 20)
    assert mailbox.purge() == 2
    assert [(letter.item, letter.reason) for letter in letters] == [
        ("a", DropReason.UNDELIVERED),
        ("b", DropReason.UNDELIVERED),
    ]
    assert mailbox.occupied == 2 and mailbox.weight == 50
    mailbox.release(2, 50)
    assert mailbox.occupied == 0 and mailbox.weight == 0


def test_weights_need_a_policy_that_waits_or_refuses() -> None:
    with pytest.raises(ValueError, match="BLOCK or FAIL"):
        Mailbox(4, FullPolicy.DROP_OLDEST, max_weight=10)
    with pytest.raises(ValueError, match="max_weight"):
        Mailbox(4, max_weight=0)
    with pytest.raises(RuntimeError, match="does not hold"):
        Mailbox[int](4).release()


async def test_try_send_many_queues_in_order_while_count_and_weight_allow() -> None:
    mailbox: Mailbox[int] = Mailbox(4, max_weight=100, hold=True)
    items = [10, 20, 30, 50, 5]
    assert mailbox.try_send_many(items, 0, 5, lambda item: item) == 3  # 60 + 50 > 100
    assert mailbox.try_send_many(items, 3, 5, lambda item: item) == 0
    stats = mailbox.statistics()
    assert (stats.weight, stats.peak_weight, stats.rejected, stats.sent) == (60, 60, 2, 3)
    assert [mailbox.receive_nowait() for _ in range(3)] == [10, 20, 30]
    mailbox.release(3, 60)
    assert mailbox.try_send_many(items, 3, 5, lambda item: item) == 2
    assert mailbox.try_send_many([1, 1, 1], 0, 3, lambda item: item) == 2  # full by count


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 120), max_size=12),
    st.lists(st.integers(0, 120), max_size=6),
    st.integers(1, 10),
    st.one_of(st.none(), st.integers(1, 200)),
    st.booleans(),
)
def test_try_send_many_takes_what_try_send_one_by_one_would(
    before: list[int], items: list[int], capacity: int, max_weight: int | None, hold: bool
) -> None:
    """The batch path (a running sum of the weights) against try_send per item, from any
    starting fill: the same count, order, weight and rejections."""
    by_batch: Mailbox[int] = Mailbox(capacity, max_weight=max_weight, hold=hold)
    by_item: Mailbox[int] = Mailbox(capacity, max_weight=max_weight, hold=hold)
    for weight in before:
        assert by_batch.try_send(weight, weight) == by_item.try_send(weight, weight)
    sent = by_batch.try_send_many(items, 0, len(items), lambda item: item)
    expected = 0
    for weight in items:
        if not by_item.try_send(weight, weight):
            break
        expected += 1
    assert sent == expected
    batch, one = by_batch.statistics(), by_item.statistics()
    assert (batch.weight, batch.peak_weight, batch.sent) == (one.weight, one.peak_weight, one.sent)
    assert batch.rejected == one.rejected
    assert len(by_batch) == len(by_item)


async def test_try_send_many_lets_an_overweight_item_alone_into_an_empty_mailbox() -> None:
    mailbox: Mailbox[int] = Mailbox(4, max_weight=100)
    assert mailbox.try_send_many([500, 1], 0, 2, lambda item: item) == 1
    with pytest.raises(IndexError, match="past 2 items"):
        mailbox.try_send_many([1, 2], 0, 3, lambda item: item)
    mailbox.close()
    with pytest.raises(MailboxClosed):
        mailbox.try_send_many([1], 0, 1, lambda item: item)
