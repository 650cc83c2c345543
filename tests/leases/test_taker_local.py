"""The take rounds driven by hand on a clock of our own, against the local DynamoDB: a watcher
takes dead owners' leases at the moment they expire, not at the round after."""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors import DynamoDBClient
from kinesis_actors.errors import ThrottlingError
from kinesis_actors.leases import LeaseConfig, LeaseStats
from kinesis_actors.leases._items import Lease
from kinesis_actors.leases._table import LeaseTable

from .helpers import HeldUpTakes, release_all_begins_during_a_take, watcher_a

pytestmark = pytest.mark.anyio

CONFIG = LeaseConfig(failover_time=10.0, graceful_handoff=False)


class ThrottledScans(LeaseTable):
    """The table, whose listings fail once ``throttled`` is set (a Scan throttled on read
    capacity while writes pass)."""

    throttled = False

    async def list(self) -> list[Lease]:
        if self.throttled:
            raise ThrottlingError("Rate of requests exceeds the allowed throughput")
        return await super().list()


async def test_a_watcher_takes_dead_owners_leases_at_their_expiry_not_a_round_later(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, holder, taker = await watcher_a(dynamodb, lease_table_name, CONFIG)
    # Three workers with a lease each (so that "a" steals none: nobody holds two more).
    leases = []
    for n, owner in enumerate(("x", "y", "z")):
        lease = Lease(key=f"shardId-{n:012d}", shard_id=f"shardId-{n:012d}")
        assert await table.create(lease)
        taken = await table.take(lease, owner)
        assert taken is not None
        leases.append(taken)
    period = CONFIG.take_period
    # The rounds of its first failover time list the table every round and see all three
    # silent from 0 on...
    for round_at in range(6):
        clock.now = round_at * period
        await taker.take_round()
        assert taker.watching
        assert not holder.held
    assert taker.report(LeaseStats(worker_id="a")).listings == 6
    # ...and one of them is renewed after the last listing: its owner lives after all.
    renewed = await table.renew(leases[0], "x")
    assert renewed is not None
    # The next round is at the failover time: a watcher's round past its first failover
    # time lists every other round, so this one does not, and nothing has expired yet (the
    # rule is strict). The wake is a hair after it, not at the next listing.
    clock.now = 6 * period
    await taker.take_round()
    assert taker.report(LeaseStats(worker_id="a")).listings == 6
    assert not holder.held
    wake = taker.next_wake(7 * period)
    assert CONFIG.failover_time < wake < CONFIG.failover_time + 0.01
    clock.now = wake
    await taker.between_rounds()
    # The two silent leases are taken then; the renewed one's take failed its condition.
    assert sorted(holder.held) == [leases[1].key, leases[2].key]
    owners = {key: (await table.get(key)) for key in (lease.key for lease in leases)}
    assert {key: lease.owner for key, lease in owners.items() if lease} == {
        leases[0].key: "x",
        leases[1].key: "a",
        leases[2].key: "a",
    }
    assert taker.report(LeaseStats(worker_id="a")).taken == 2
    # Nothing else is due before the next round.
    assert taker.next_wake(7 * period) == 7 * period


async def test_a_lease_we_asked_for_expires_with_its_dying_owner_between_rounds(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    config = LeaseConfig(failover_time=10.0)  # graceful handoff
    table, clock, holder, taker = await watcher_a(dynamodb, lease_table_name, config)
    lease = Lease(key="shardId-000000000000", shard_id="shardId-000000000000")
    assert await table.create(lease)
    owned = await table.take(lease, "x")
    assert owned is not None
    # "a" asked "x" (the other watcher) for its last lease, and "x" died before handing it
    # over: leaseOwner is "a", checkpointOwner "x", and nobody renews it.
    asked = await table.ask_handoff(owned, "a")
    assert asked is not None and (asked.owner, asked.checkpoint_owner) == ("a", "x")
    period = config.take_period
    for round_at in range(7):
        clock.now = round_at * period
        await taker.take_round()
        assert taker.watching and not holder.held
    # Its moment is the others': a failover time after the listing that first showed it.
    wake = taker.next_wake(7 * period)
    assert config.failover_time < wake < config.failover_time + 0.01
    clock.now = wake
    await taker.between_rounds()
    assert list(holder.held) == [lease.key]
    current = await table.get(lease.key)
    assert current is not None
    assert (current.owner, current.checkpoint_owner) == ("a", None)


async def test_a_take_that_lands_after_release_all_began_is_given_back_unread(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, _, holder, taker = await watcher_a(
        dynamodb, lease_table_name, CONFIG, table_type=HeldUpTakes
    )
    assert isinstance(table, HeldUpTakes)
    lease = Lease(key="shardId-000000000000", shard_id="shardId-000000000000")
    assert await table.create(lease)
    # It takes the free lease, and release_all begins while the reply is on its way.
    await release_all_begins_during_a_take(table, taker, taker.take_round)
    # The lease was taken, then given back at once: not held, never handed to a reader,
    # free in the table for the next worker.
    assert not holder.held
    current = await table.get(lease.key)
    assert current is not None
    assert (current.owner, current.counter) == (None, 2)  # taken, then released


async def test_a_watcher_whose_listing_fails_drops_its_expiry_moments(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, holder, taker = await watcher_a(
        dynamodb, lease_table_name, CONFIG, table_type=ThrottledScans
    )
    assert isinstance(table, ThrottledScans)
    lease = Lease(key="shardId-000000000000", shard_id="shardId-000000000000")
    assert await table.create(lease)
    assert await table.take(lease, "x") is not None
    await taker.take_round()
    period = CONFIG.take_period
    assert taker.next_wake(period) == period  # the moment, 10 s on, is past the next round
    assert taker.next_wake(100.0) < 100.0  # ...but it is kept
    # Every listing from now on is throttled, while "x" goes on renewing: by the stale
    # listing its lease would seem to expire; with the listing failed, nothing is due.
    table.throttled = True
    clock.now = period
    with pytest.raises(ThrottlingError):
        await taker.take_round()
    assert taker.next_wake(100.0) == 100.0
    assert not holder.held


async def test_a_handoff_handed_over_when_release_all_began_during_a_take_is_not_adopted(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    config = LeaseConfig(failover_time=10.0)  # graceful handoff
    table, _, holder, taker = await watcher_a(
        dynamodb, lease_table_name, config, table_type=HeldUpTakes
    )
    assert isinstance(table, HeldUpTakes)
    free = Lease(key="shardId-000000000000", shard_id="shardId-000000000000")
    handed = Lease(key="shardId-000000000001", shard_id="shardId-000000000001")
    assert await table.create(free) and await table.create(handed)
    owned = await LeaseTable.take(table, handed, "x")  # not held up: the set-up's own
    assert owned is not None
    await taker._handoffs.ask(owned)  # "a" asked "x" for it, and "x" handed it over
    asked = await table.get(handed.key)
    assert asked is not None and await table.hand_over(asked, "x") is not None
    # The next round takes the free lease and follows the handoff; release_all begins while
    # the take's reply is on its way. release_all has listed what it releases by then: a
    # handoff adopted after it would be held, renewed and never read nor released.
    await release_all_begins_during_a_take(table, taker, taker.take_round)
    assert not holder.held  # the free lease given back, the handed one not adopted
    assert taker.report(LeaseStats(worker_id="a")).handoffs_received == 0


class HeldUpTakesThrottledReleases(HeldUpTakes):
    """Take replies held back; every release throttled past the client's retries."""

    async def release(
        self, lease: Lease, owner: str, checkpoint: object = None, children: object = ()
    ) -> Lease | None:
        raise ThrottlingError("Rate of requests exceeds the allowed throughput")


async def test_a_give_back_that_fails_is_never_handed_to_a_reader(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, _, holder, taker = await watcher_a(
        dynamodb, lease_table_name, CONFIG, table_type=HeldUpTakesThrottledReleases
    )
    assert isinstance(table, HeldUpTakes)
    lease = Lease(key="shardId-000000000000", shard_id="shardId-000000000000")
    assert await table.create(lease)
    await release_all_begins_during_a_take(table, taker, taker.take_round)
    # Still held (renewed until the coordinator closes, then left to expire), never read.
    assert [held.ready for held in holder.held.values()] == [False]
    assert taker.report(LeaseStats(worker_id="a")).transient_errors == 1


class GiveBackCutShort(HeldUpTakes):
    """Two takes in one round: shard 0's reply held back until release_all began, shard 1's
    take failing (a transient fault) while shard 0's give-back is on its way, which ends
    the round and cancels the give-back."""

    def __init__(self, client: DynamoDBClient, name: str) -> None:
        super().__init__(client, name)
        self.releasing = anyio.Event()

    async def take(self, lease: Lease, owner: str) -> Lease | None:
        if lease.key.endswith("1"):
            await self.releasing.wait()
            raise ThrottlingError("Rate of requests exceeds the allowed throughput")
        return await super().take(lease, owner)

    async def release(
        self, lease: Lease, owner: str, checkpoint: object = None, children: object = ()
    ) -> Lease | None:
        self.releasing.set()
        await anyio.sleep_forever()
        raise AssertionError("cancelled")


async def test_a_give_back_cut_short_by_a_failed_take_beside_it_is_never_handed_out(
    dynamodb: DynamoDBClient, lease_table_name: str
) -> None:
    table, clock, holder, taker = await watcher_a(
        dynamodb, lease_table_name, CONFIG, table_type=GiveBackCutShort
    )
    assert isinstance(table, GiveBackCutShort)
    for n in range(2):
        key = f"shardId-{n:012d}"
        assert await table.create(Lease(key=key, shard_id=key))

    async def one_round() -> None:
        with pytest.raises(ThrottlingError):
            await taker.take_round()

    await release_all_begins_during_a_take(table, taker, one_round)
    # The next wake hands out ready leases, but none that release_all did not find.
    clock.now = CONFIG.take_period / 2
    await taker.between_rounds()
    clock.now = CONFIG.take_period
    await taker.take_round()
    assert [held.ready for held in holder.held.values()] == [False]
