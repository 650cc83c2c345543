"""A worker that leaves (``release_all``) while handoffs it asked for are pending withdraws
them: driven by hand against the local DynamoDB, the asker's take rounds ("a") and the
owner's holder ("x"), each step at a chosen moment. Left alone, each of these leases would
name a worker that is gone and wait a failover time to be taken."""

from __future__ import annotations

from typing import TypeVar

import anyio
import pytest

from kinesis_actors import DynamoDBClient
from kinesis_actors.leases import LeaseAcquired, LeaseConfig, LeaseHandoff, LeaseLost
from kinesis_actors.leases._holder import Held, LeaseHolder
from kinesis_actors.leases._items import SHARD_END, Lease
from kinesis_actors.leases._table import LeaseTable
from kinesis_actors.leases._taker import LeaseTaker

from .helpers import Clock, HeldUpReplies, HeldUpTakes, watcher_a

pytestmark = pytest.mark.anyio

_Table = TypeVar("_Table", bound=LeaseTable)

CONFIG = LeaseConfig(failover_time=10.0)  # graceful handoff
KEY = "shardId-000000000000"
SEQUENCE = "49590338271490256608559692538361571095921575989136588801"


async def owned_by_x(table: LeaseTable, clock: Clock) -> tuple[LeaseHolder, Held]:
    """The lease, taken by "x", whose holder holds it and has handed it to its reader."""
    lease = Lease(key=KEY, shard_id=KEY)
    assert await table.create(lease)
    taken = await table.take(lease, "x")
    assert taken is not None
    holder = LeaseHolder(table, "x", CONFIG, clock, on_shard_end=lambda: None)
    held = Held(taken, "orders", clock())
    holder.hold(held)
    holder.hand_out(held)
    acquired = await holder.outbox.next_event()  # what follows is what the test looks at
    assert isinstance(acquired, LeaseAcquired)
    return holder, held


async def x_holds_on(
    dynamodb: DynamoDBClient, name: str, table_type: type[_Table]
) -> tuple[_Table, Clock, LeaseTaker, LeaseHolder, Held]:
    """A table of ``table_type``, the take rounds of "a" on it, and the lease held by "x"."""
    table, clock, _, taker = await watcher_a(dynamodb, name, CONFIG, table_type=table_type)
    assert isinstance(table, table_type)
    x, held = await owned_by_x(table, clock)
    return table, clock, taker, x, held


async def current(table: LeaseTable) -> Lease:
    lease = await table.get(KEY)
    assert lease is not None
    return lease


async def test_an_ask_withdrawn_before_its_owner_saw_it_leaves_the_owner_renewing(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, _, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    x, held = await owned_by_x(table, clock)
    before = await current(table)
    await taker._handoffs.ask(before)
    assert (await current(table)).owner == "a"
    assert taker.stop_taking() == [KEY]  # release_all begins
    await taker.withdraw_ask(KEY)
    after = await current(table)
    assert (after.owner, after.checkpoint_owner, after.counter) == ("x", None, before.counter)
    # The owner's next renewal, on the counter it holds, goes through: it never knew.
    assert await x.write(KEY, held, None) is not None
    assert KEY in x.held and not x.outbox.queued


@pytest.mark.parametrize("seen_by", ["renewal", "answer"])
async def test_an_ask_withdrawn_after_its_owner_stopped_reading_ends_as_a_release(
    dynamodb: DynamoDBClient, lease_table_name: str, seen_by: str
) -> None:
    table, clock, _, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    x, held = await owned_by_x(table, clock)
    await taker._handoffs.ask(await current(table))
    # x's renewal finds the ask, tells its reader to stop and renews under its condition,
    # moving the counter the ask was made on.
    assert await x.write(KEY, held, None) is not None
    assert list(x.outbox.queued) == [LeaseHandoff("orders", KEY, "a")]
    taker.stop_taking()
    await taker.withdraw_ask(KEY)  # read back and tried again on the moved counter
    assert ((await current(table)).owner, (await current(table)).checkpoint_owner) == ("x", None)
    if seen_by == "renewal":
        assert await x.write(KEY, held, None) is not None  # renewed as a plain lease again
        assert held.handing_to is None and held.handoff_withdrawn
    # The reader stopped for the handoff and answers with its final checkpoint: nobody is
    # there to hand it to, so the lease is released there, for any worker to take at once.
    assert await x.hand_over(KEY, held, (SEQUENCE, 3), ()) is not None
    released = await current(table)
    assert (released.owner, released.checkpoint_owner) == (None, None)
    assert (released.checkpoint, released.sub_sequence) == (SEQUENCE, 3)
    assert not x.held
    assert not any(isinstance(event, LeaseLost) for event in x.outbox.queued)


async def test_a_withdrawn_ask_not_answered_in_time_is_released_by_the_owner(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, _, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    x, held = await owned_by_x(table, clock)
    await taker._handoffs.ask(await current(table))
    assert await x.write(KEY, held, None) is not None  # told its reader
    taker.stop_taking()
    await taker.withdraw_ask(KEY)
    assert await x.write(KEY, held, None) is not None  # saw the withdrawal
    while clock.now <= CONFIG.handoff_timeout:  # renewed on, and its reader never answers
        clock.now += CONFIG.renew_period
        assert await x.write(KEY, held, None) is not None
    x.note(held, (SEQUENCE, 1))
    await x._renew(KEY, held, anyio.CapacityLimiter(1))
    released = await current(table)
    assert (released.owner, released.checkpoint, released.sub_sequence) == (None, SEQUENCE, 1)
    assert list(x.outbox.queued)[-1] == LeaseLost("orders", KEY, "released")


async def test_a_lease_handed_over_before_its_ask_was_withdrawn_is_released_unread(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, holder, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    x, held = await owned_by_x(table, clock)
    await taker._handoffs.ask(await current(table))
    assert await x.write(KEY, held, None) is not None
    assert await x.hand_over(KEY, held, (SEQUENCE, 3), ()) is not None  # handed to "a"
    assert (await current(table)).owner == "a"
    taker.stop_taking()
    await taker.withdraw_ask(KEY)
    released = await current(table)
    assert (released.owner, released.checkpoint, released.sub_sequence) == (None, SEQUENCE, 3)
    assert not holder.held


class HeldUpAsks(HeldUpReplies):
    """Replies to an ask held up."""

    async def ask_handoff(self, lease: Lease, taker: str) -> Lease | None:
        return await self.held_up(await super().ask_handoff(lease, taker))


async def test_an_ask_that_lands_after_release_all_began_withdraws_itself(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, _, taker, x, held = await x_holds_on(dynamodb, lease_table_name, HeldUpAsks)
    lease = await current(table)
    async with anyio.create_task_group() as group:
        group.start_soon(taker._handoffs.ask, lease)
        await table.sent.wait()
        assert taker.stop_taking() == []  # nothing to withdraw yet: it has not landed
        table.reply.set()
    withdrawn = await current(table)
    assert (withdrawn.owner, withdrawn.checkpoint_owner) == ("x", None)
    assert await x.write(KEY, held, None) is not None and not x.outbox.queued


@pytest.mark.parametrize("withdrawal_seen", [False, True])
async def test_a_lease_asked_for_again_after_a_withdrawal_goes_to_the_new_asker(
    dynamodb: DynamoDBClient, lease_table_name: str, withdrawal_seen: bool
) -> None:
    table, clock, _, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    x, held = await owned_by_x(table, clock)
    await taker._handoffs.ask(await current(table))
    assert await x.write(KEY, held, None) is not None  # x told its reader to stop
    taker.stop_taking()
    await taker.withdraw_ask(KEY)
    if withdrawal_seen:
        assert await x.write(KEY, held, None) is not None
    # "y" asks before x's reader has answered: the answer on its way goes to "y".
    assert await table.ask_handoff(await current(table), "y") is not None
    assert await x.hand_over(KEY, held, (SEQUENCE, 3), ()) is not None
    handed = await current(table)
    assert (handed.owner, handed.checkpoint_owner) == ("y", None)
    assert (handed.checkpoint, handed.sub_sequence) == (SEQUENCE, 3)
    # The reader was told once: the second ask reached an answer already on its way.
    assert list(x.outbox.queued) == [LeaseHandoff("orders", KEY, "a")]


async def test_a_shard_finished_after_its_ask_was_withdrawn_is_released_ended(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, _, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    x, held = await owned_by_x(table, clock)
    await taker._handoffs.ask(await current(table))
    assert await x.write(KEY, held, None) is not None
    taker.stop_taking()
    await taker.withdraw_ask(KEY)
    # The reader reached the shard's end before it saw the handoff: the coordinator ends it
    # through the handoff (finish), which meets the withdrawal and releases it ended.
    children = ("shardId-000000000001", "shardId-000000000002")
    assert await x.hand_over(KEY, held, (SHARD_END, 0), children) is not None
    ended = await current(table)
    assert (ended.owner, ended.checkpoint, ended.child_shard_ids) == (None, SHARD_END, children)


async def test_overdue_asks_left_untaken_when_release_all_began_are_withdrawn_before_close(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, holder, taker = await watcher_a(
        dynamodb, lease_table_name, CONFIG, table_type=HeldUpTakes
    )
    assert isinstance(table, HeldUpTakes)
    keys = ["shardId-000000000000", "shardId-000000000001"]
    for key in keys:
        lease = Lease(key=key, shard_id=key)
        assert await table.create(lease)
        owned = await LeaseTable.take(table, lease, "x")  # not held up: the set-up's own
        assert owned is not None
        await taker._handoffs.ask(owned)
    # "x" never answers: both asks are overdue at the next round, which takes the first and
    # would take the second; release_all begins while the first take's reply is on its way,
    # waits for the round (what it still gives back and withdraws), and the coordinator
    # closes at once: the round is cancelled.
    clock.now = CONFIG.handoff_timeout + CONFIG.failover_time + 1
    async with anyio.create_task_group() as group:
        group.start_soon(taker.take_round)
        await table.sent.wait()
        assert taker.stop_taking() == []  # both settled as overdue by this round
        table.reply.set()
        await taker.round_ended()
        group.cancel_scope.cancel()
    first, second = [await table.get(key) for key in keys]
    assert first is not None and second is not None
    assert first.owner is None  # taken, then given back unread
    assert (second.owner, second.checkpoint_owner) == ("x", None)  # never taken: withdrawn
    assert not holder.held


async def test_no_ask_is_made_once_release_all_began(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, _, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    await owned_by_x(table, clock)
    taker.stop_taking()
    before = await current(table)
    await taker._handoffs.ask(before)  # a steal the round had planned
    assert await current(table) == before  # nothing written (not asked, then withdrawn)
    assert taker._handoffs.count == 0


async def test_a_renewal_that_passes_over_a_withdrawal_and_a_new_ask_answers_the_new_asker(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, _, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    x, held = await owned_by_x(table, clock)
    await taker._handoffs.ask(await current(table))
    assert await x.write(KEY, held, None) is not None  # told its reader; hands over to "a"
    since = held.handoff_since
    taker.stop_taking()
    await taker.withdraw_ask(KEY)
    assert await table.ask_handoff(await current(table), "y") is not None
    # x's renewal holds on checkpointOwner alone: it passes, and learns whom it answers now.
    clock.now = 1.0
    assert await x.write(KEY, held, None) is not None
    assert (held.handing_to, held.handoff_since) == ("y", since)  # the same deadline
    assert list(x.outbox.queued) == [LeaseHandoff("orders", KEY, "a")]


class ChurningAsks(LeaseTable):
    """The table, on which each answer of the owner meets a changed handoff: before each
    hand-over or release is written, the ask is withdrawn, or a new worker asks (a churn no
    real group produces on cue)."""

    churn = False
    asks = 0

    async def _flip(self, key: str, owner: str) -> None:
        lease = await self.get(key)
        assert lease is not None
        if lease.checkpoint_owner == owner:
            assert lease.owner is not None
            await self.withdraw_handoff(lease, lease.owner, owner)
        else:
            self.asks += 1
            await self.ask_handoff(lease, f"w{self.asks}")

    async def hand_over(
        self, lease: Lease, owner: str, checkpoint: object = None, children: object = ()
    ) -> Lease | None:
        if self.churn:
            await self._flip(lease.key, owner)
        return await super().hand_over(lease, owner, checkpoint, children)  # type: ignore[arg-type]

    async def release(
        self, lease: Lease, owner: str, checkpoint: object = None, children: object = ()
    ) -> Lease | None:
        if self.churn:
            await self._flip(lease.key, owner)
        return await super().release(lease, owner, checkpoint, children)  # type: ignore[arg-type]


async def test_an_answer_that_keeps_meeting_a_changed_handoff_stops_with_its_checkpoint_noted(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, _, taker, x, held = await x_holds_on(dynamodb, lease_table_name, ChurningAsks)
    await taker._handoffs.ask(await current(table))
    assert await x.write(KEY, held, None) is not None  # told its reader
    table.churn = True
    # Withdrawn, asked again, withdrawn: three writes, each under the condition that held
    # before it, and no more. The lease stays held (its reader stopped: the coordinator's
    # own answer after handoff_timeout goes out), with the reader's checkpoint noted for it.
    assert await x.hand_over(KEY, held, (SEQUENCE, 3), ()) is None
    assert x.held.get(KEY) is held and held.ready
    assert held.pending == (SEQUENCE, 3)
    assert table.asks == 1


class ChurningRenewals(ChurningAsks):
    """The table, on which the owner's next ``flips`` renewals each meet a changed handoff
    (an ask, its withdrawal, a new ask, ...), the clock moving ``step`` seconds each time."""

    flips = 0
    step = 0.0
    clock: Clock | None = None

    async def renew(
        self, lease: Lease, owner: str, checkpoint: object = None, **options: object
    ) -> Lease | None:
        if self.flips:
            self.flips -= 1
            await self._flip(lease.key, owner)
            assert self.clock is not None
            self.clock.now += self.step
        return await super().renew(lease, owner, checkpoint, **options)  # type: ignore[arg-type]


async def test_a_checkpoint_that_keeps_meeting_a_changed_handoff_is_written_all_the_same(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, _, x, held = await x_holds_on(dynamodb, lease_table_name, ChurningRenewals)
    # Asked, withdrawn, asked again, ...: more changes in a row than one write() tries, each
    # making the last try fail. The checkpoint the caller waits for still lands.
    table.flips, table.clock, table.step = 7, clock, 0.5
    written = await x.write_through(KEY, held, (SEQUENCE, 3))
    assert written is not None and (written.checkpoint, written.sub_sequence) == (SEQUENCE, 3)
    assert (await current(table)).checkpoint == SEQUENCE
    assert x.held.get(KEY) is held and held.answering  # the seventh change was an ask
    assert table.flips == 0


async def test_a_checkpoint_that_meets_changes_until_its_lease_lapses_drops_the_lease(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, _, x, held = await x_holds_on(dynamodb, lease_table_name, ChurningRenewals)
    table.flips, table.clock, table.step = 1_000, clock, 1.0  # a failover time's worth of churn
    assert await x.write_through(KEY, held, (SEQUENCE, 3)) is None
    assert KEY not in x.held
    assert [type(event) for event in x.outbox.queued] == [LeaseHandoff, LeaseLost]
    assert x.outbox.queued[-1].reason == "expired"  # type: ignore[union-attr]
    assert table.flips > 1_000 - 20  # it stopped at the lapse, not at the churn's end


async def test_a_release_that_meets_a_new_ask_hands_the_lease_over_ended(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, _, _ = await watcher_a(dynamodb, lease_table_name, CONFIG)
    x, held = await owned_by_x(table, clock)
    assert await table.ask_handoff(await current(table), "y") is not None
    # x finishes the shard before it has seen the ask: the release meets it, and the lease
    # goes to "y" ended (its children with it), not dropped with SHARD_END unwritten.
    children = ("shardId-000000000001",)
    assert await x.release(KEY, held, (SHARD_END, 0), children) is not None
    ended = await current(table)
    assert (ended.owner, ended.checkpoint_owner) == ("y", None)
    assert (ended.checkpoint, ended.child_shard_ids) == (SHARD_END, children)
    assert not x.held and not x.outbox.queued  # answered there: nothing for the reader to do
