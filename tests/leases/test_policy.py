"""The lease protocol's decisions without a loop or a table: expiry, taking, stealing, the gate."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kinesis_actors.leases import SHARD_END, Lease
from kinesis_actors.leases._policy import (
    WATCHERS,
    ExpiryTracker,
    ScanSchedule,
    expiry_moments,
    live_owners,
    parents_finished,
    plan_takes,
    write_landed,
)


def lease(n: int, owner: str | None = None, counter: int = 1, **fields: object) -> Lease:
    return Lease(key=f"shard-{n}", shard_id=f"shard-{n}", owner=owner, counter=counter, **fields)  # type: ignore[arg-type]


def test_a_lease_seen_for_the_first_time_is_not_expired_until_a_failover_time_passes() -> None:
    tracker = ExpiryTracker(10.0)
    held = lease(1, "a")
    tracker.observe([held], now=100.0)
    assert not tracker.expired(held, 105.0)
    assert not tracker.expired(held, 110.0)
    assert tracker.expired(held, 110.1)


def test_a_counter_change_restarts_the_failover_time_on_our_clock() -> None:
    tracker = ExpiryTracker(10.0)
    tracker.observe([lease(1, "a", counter=1)], now=0.0)
    renewed = lease(1, "a", counter=2)
    tracker.observe([renewed], now=9.0)
    assert not tracker.expired(renewed, 18.0)
    assert tracker.expired(renewed, 19.5)


def test_a_lease_without_owner_is_free_at_once() -> None:
    tracker = ExpiryTracker(10.0)
    free = lease(1)
    tracker.observe([free], now=0.0)
    assert tracker.expired(free, 0.0)


def test_a_lease_not_yet_observed_in_its_current_form_is_not_expired() -> None:
    tracker = ExpiryTracker(1.0)
    tracker.observe([lease(1, "a", counter=1)], now=0.0)
    assert not tracker.expired(lease(1, "a", counter=5), 100.0)


def test_a_lease_expires_a_failover_time_after_its_counter_was_last_seen_to_change() -> None:
    tracker = ExpiryTracker(10.0)
    tracker.observe([lease(1, "a", counter=1)], now=0.0)
    renewed = lease(1, "a", counter=2)
    tracker.observe([renewed], now=3.0)
    tracker.observe([renewed], now=6.0)  # unchanged: the moment stays
    moment = tracker.expires_at(renewed)
    assert moment == 13.0
    assert not tracker.expired(renewed, moment)
    assert tracker.expired(renewed, moment + 0.001)
    # Free, or not observed in this form: no moment (free is taken at once, the other waits).
    assert tracker.expires_at(lease(1)) is None
    assert tracker.expires_at(lease(1, "a", counter=3)) is None


def test_expiry_moments_are_other_live_workers_leases_after_the_listing_in_order() -> None:
    tracker = ExpiryTracker(10.0)
    listing = [
        lease(1, "b", counter=1),
        lease(2, "c", counter=1),
        lease(3, "me", counter=1),  # ours, not held: the rounds take it back
        lease(4, "me", counter=1),  # held
        lease(5, None),  # free: taken at once by the round
        lease(6, "b", checkpoint=SHARD_END),  # finished: needs no owner
        lease(7, "c", counter=1),  # expired already at the listing: the round's
        lease(8, "me", counter=1, checkpoint_owner="b"),  # asked of "b": "b" renews it
    ]
    tracker.observe([listing[6]], now=-5.0)
    tracker.observe(listing, now=2.0)
    tracker.observe(listing, now=6.0)
    tracker.observe([lease(1, "b", counter=2), *listing[1:]], now=8.0)
    moments = expiry_moments(
        [lease(1, "b", counter=2), *listing[1:]],
        worker_id="me",
        held={"shard-4"},
        expires_at=tracker.expires_at,
        after=8.0,
    )
    assert moments == [12.0, 12.0, 18.0]


def test_changes_under_one_owner_are_counted_and_an_owner_change_resets_them() -> None:
    tracker = ExpiryTracker(10.0)
    for now, counter in enumerate([1, 2, 3]):
        tracker.observe([lease(1, "me", counter=counter)], now=float(now))
    assert tracker.changes_by_same_owner("shard-1") == 2
    tracker.observe([lease(1, "other", counter=4)], now=4.0)
    assert tracker.changes_by_same_owner("shard-1") == 0


def always(_: Lease) -> bool:
    return True


def never(_: Lease) -> bool:
    return False


def test_a_new_worker_takes_all_free_leases_when_alone() -> None:
    leases = [lease(n) for n in range(6)]
    plan = plan_takes(leases, worker_id="me", held=(), expired=always, rng=random.Random(1))
    assert len(plan.take) == 6 and plan.steal == ()
    assert (plan.target, plan.workers) == (6, 1)


def test_workers_share_free_leases_toward_ceil_of_the_even_share() -> None:
    leases = [lease(n) for n in range(10)] + [lease(n, "b") for n in range(10, 13)]
    expired = {f"shard-{n}" for n in range(10)}
    plan = plan_takes(
        leases,
        worker_id="me",
        held=(),
        expired=lambda lease: lease.key in expired,
        rng=random.Random(1),
    )
    assert (plan.workers, plan.target) == (2, 7)
    assert len(plan.take) == 7


def test_max_leases_caps_the_target() -> None:
    leases = [lease(n) for n in range(10)]
    plan = plan_takes(leases, worker_id="me", held=(), expired=always, max_leases=3)
    assert len(plan.take) == 3


def test_nothing_is_taken_at_the_target() -> None:
    leases = [lease(n, "me") for n in range(4)] + [lease(n, "b") for n in range(4, 8)]
    plan = plan_takes(leases, worker_id="me", held={f"shard-{n}" for n in range(4)}, expired=never)
    assert plan.take == () and plan.steal == ()


def test_finished_leases_are_neither_counted_nor_taken() -> None:
    leases = [lease(n, checkpoint=SHARD_END) for n in range(5)] + [lease(9)]
    plan = plan_takes(leases, worker_id="me", held=(), expired=always)
    assert [taken.key for taken in plan.take] == ["shard-9"]
    assert plan.target == 1


def test_a_worker_steals_toward_its_share_from_the_most_loaded_when_nothing_is_free() -> None:
    leases = [lease(n, "a") for n in range(4)] + [lease(n, "b") for n in range(4, 12)]
    plan = plan_takes(leases, worker_id="me", held=(), expired=never, rng=random.Random(3))
    assert (plan.workers, plan.target) == (3, 4)
    assert plan.take == ()
    assert len(plan.steal) == 4  # b keeps its target of 4
    assert {stolen.owner for stolen in plan.steal} == {"b"}


def test_max_leases_to_steal_caps_a_round_as_the_kcls_option_does() -> None:
    leases = [lease(n, "a") for n in range(4)] + [lease(n, "b") for n in range(4, 12)]
    plan = plan_takes(leases, worker_id="me", held=(), expired=never, max_leases_to_steal=1)
    assert len(plan.steal) == 1 and plan.steal[0].owner == "b"


def test_a_joining_worker_steals_from_several_workers_in_one_round() -> None:
    # 1,000 leases over 3 workers (334, 333, 333); a fourth joins: target 250.
    owners = ["a"] * 334 + ["b"] * 333 + ["c"] * 333
    leases = [lease(n, owner) for n, owner in enumerate(owners)]
    plan = plan_takes(leases, worker_id="me", held=(), expired=never, rng=random.Random(1))
    assert plan.target == 250 and len(plan.steal) == 250
    left = Counter(owners)
    left.subtract(stolen.owner for stolen in plan.steal if stolen.owner is not None)
    assert sorted(left.values()) == [250, 250, 250]


def test_a_lease_being_handed_over_is_not_stolen() -> None:
    leases = [lease(n, "b", checkpoint_owner="c") for n in range(6)] + [lease(9, "b")]
    plan = plan_takes(leases, worker_id="me", held=(), expired=never)
    assert [stolen.key for stolen in plan.steal] == ["shard-9"]


def test_expired_leases_are_taken_before_anything_is_stolen() -> None:
    leases = [lease(0, "dead")] + [lease(n, "b") for n in range(1, 9)]
    plan = plan_takes(leases, worker_id="me", held=(), expired=lambda lease: lease.owner == "dead")
    assert [taken.key for taken in plan.take] == ["shard-0"] and plan.steal == ()


def test_no_stealing_between_workers_one_lease_apart() -> None:
    # 7 leases, 2 workers: target 4; we hold 3, b holds 4. Stealing would only swap roles.
    leases = [lease(n, "me") for n in range(3)] + [lease(n, "b") for n in range(3, 7)]
    plan = plan_takes(leases, worker_id="me", held={f"shard-{n}" for n in range(3)}, expired=never)
    assert plan.steal == ()


def test_a_worker_two_behind_steals_from_one_at_the_target() -> None:
    # 13 leases, 4 workers: target 4; a, b, c hold 4, 4, 4 and we hold 1: steal (KCL's rule).
    leases = (
        [lease(0, "me")]
        + [lease(n, "a") for n in range(1, 5)]
        + [lease(n, "b") for n in range(5, 9)]
        + [lease(n, "c") for n in range(9, 13)]
    )
    plan = plan_takes(leases, worker_id="me", held={"shard-0"}, expired=never)
    # Two, from two workers: we reach 3, they 3, 3 and 4; a third would only swap roles.
    assert plan.target == 4 and len(plan.steal) == 2
    assert len({stolen.owner for stolen in plan.steal}) == 2


@pytest.mark.parametrize("max_steal", [1, None])
def test_repeated_rounds_converge_to_an_even_share(max_steal: int | None) -> None:
    """Four workers, twelve leases, one at a time: a model of the take rounds."""
    owners = ["a"] * 6 + ["b"] * 6
    rng = random.Random(7)
    workers = ["a", "b", "c", "d"]
    for _ in range(40):
        for worker in workers:
            leases = [lease(n, owner) for n, owner in enumerate(owners)]
            held = {f"shard-{n}" for n, owner in enumerate(owners) if owner == worker}
            plan = plan_takes(
                leases,
                worker_id=worker,
                held=held,
                expired=never,
                rng=rng,
                max_leases_to_steal=max_steal,
            )
            for taken in plan.take + plan.steal:
                owners[int(taken.key.split("-")[1])] = worker
    assert Counter(owners) == {"a": 3, "b": 3, "c": 3, "d": 3}


def test_a_child_waits_for_every_parent_to_reach_shard_end() -> None:
    child = lease(3, parent_shard_ids=("shard-1", "shard-2"))
    parents = {"shard-1": lease(1, checkpoint=SHARD_END), "shard-2": lease(2, "a")}
    assert not parents_finished(child.parent_shard_ids, parents)
    parents["shard-2"] = lease(2, checkpoint=SHARD_END)
    assert parents_finished(child.parent_shard_ids, parents)


def test_a_parent_without_lease_counts_as_finished() -> None:
    child = lease(3, parent_shard_ids=("shard-1",))
    assert parents_finished(child.parent_shard_ids, {})


def test_a_renewal_that_landed_is_told_from_a_take() -> None:
    held = lease(1, "me", counter=7)
    assert write_landed(held, lease(1, "me", counter=8), "me", None)
    assert not write_landed(held, lease(1, "me", counter=9), "me", None)  # two writes since
    assert not write_landed(held, lease(1, "other", counter=8), "me", None)


def test_a_checkpoint_or_release_that_landed_carries_what_it_wrote() -> None:
    held = lease(1, "me", counter=7)
    written = lease(1, "me", counter=8, checkpoint="42")
    assert write_landed(held, written, "me", "42")
    assert not write_landed(held, lease(1, "me", counter=8), "me", "42")  # a bare renewal
    released = lease(1, None, counter=8, checkpoint=SHARD_END)
    assert write_landed(held, released, None, SHARD_END)
    assert not write_landed(held, released, "me", SHARD_END)


# -- who lists the table every round -------------------------------------------------------


def listed_schedule(worker_id: str, owners: set[str], *, at: float = 0.0) -> ScanSchedule:
    schedule = ScanSchedule(worker_id, failover_time=10.0)
    schedule.listed(owners, now=at)
    return schedule


def test_the_two_lowest_live_ids_watch_and_list_the_table_every_other_round() -> None:
    assert WATCHERS == 2
    for worker in ("a", "b"):
        schedule = listed_schedule(worker, {"a", "b", "c", "d"}, at=-100.0)
        assert schedule.watchers == ("a", "b")
        assert schedule.watching
        assert schedule.due(0.0, following=False, period=1.0)
        schedule.listed({"a", "b", "c", "d"}, now=0.0)
        # Rounds every 1 s: the next one does without, the one after lists.
        assert not schedule.due(1.0, following=False, period=1.0)
        assert schedule.due(2.0, following=False, period=1.0)
        # ...and every round while it follows a handoff or a gated child.
        assert schedule.due(1.0, following=True, period=1.0)


def test_a_worker_with_no_lease_and_the_lowest_id_counts_itself_among_the_watchers() -> None:
    schedule = listed_schedule("0-new", {"a", "b", "c"}, at=-100.0)
    assert schedule.watchers == ("0-new", "a")
    assert schedule.due(0.0, following=False, period=1.0)


def test_any_other_worker_lists_the_table_once_a_failover_time_after_its_first() -> None:
    schedule = ScanSchedule("c", failover_time=10.0)
    assert schedule.due(0.0, following=False, period=1.0)  # never listed
    schedule.listed({"a", "b", "c", "d"}, now=0.0)
    assert not schedule.watching
    # Its first failover time: every round (its expiry history is being built).
    assert schedule.due(9.0, following=False, period=1.0)
    schedule.listed({"a", "b", "c", "d"}, now=10.0)
    assert not schedule.due(11.0, following=False, period=1.0)
    assert not schedule.due(19.0, following=False, period=1.0)
    assert schedule.due(19.5, following=False, period=1.0)  # the round nearest 20


def test_a_worker_following_a_handoff_or_a_gated_child_lists_every_round() -> None:
    schedule = listed_schedule("c", {"a", "b", "c"}, at=-100.0)
    schedule.listed({"a", "b", "c"}, now=0.0)
    assert not schedule.due(1.0, following=False, period=1.0)
    assert schedule.due(1.0, following=True, period=1.0)


def test_a_dead_watcher_drops_out_at_the_next_listing_and_the_next_id_watches() -> None:
    schedule = listed_schedule("c", {"a", "b", "c"}, at=-100.0)
    assert not schedule.watching
    schedule.listed({"b", "c"}, now=0.0)  # 'a' expired: no longer a live owner
    assert schedule.watchers == ("b", "c")
    assert schedule.due(2.0, following=False, period=1.0)  # a watcher's cadence, not 10 s


def test_live_owners_leave_out_expired_free_and_finished_leases() -> None:
    leases = [
        lease(1, "a"),
        lease(2, "dead"),
        lease(3),
        lease(4, "done", checkpoint=SHARD_END),
    ]
    assert live_owners(leases, lambda found: found.owner == "dead") == {"a"}


def test_a_watcher_rescues_every_expired_lease_beyond_its_share() -> None:
    leases = [lease(n, "me") for n in range(3)]
    leases += [lease(n, "b") for n in range(3, 6)]
    leases += [lease(n, "dead") for n in range(6, 12)]
    expired = lambda found: found.owner == "dead"  # noqa: E731
    held = {found.key for found in leases if found.owner == "me"}
    plain = plan_takes(leases, worker_id="me", held=held, expired=expired)
    assert len(plain.take) == 3  # toward its share: 12 leases over 2 live workers
    rescue = plan_takes(leases, worker_id="me", held=held, expired=expired, rescue=True)
    assert {found.key for found in rescue.take} == {f"shard-{n}" for n in range(6, 12)}
    assert rescue.steal == ()
    capped = plan_takes(
        leases, worker_id="me", held=held, expired=expired, rescue=True, max_leases=5
    )
    assert len(capped.take) == 2


def test_a_watcher_with_nothing_to_rescue_steals_toward_its_share_as_before() -> None:
    leases = [lease(n, "b") for n in range(4)]
    plan = plan_takes(leases, worker_id="me", held=set(), expired=lambda _: False, rescue=True)
    assert plan.take == () and len(plan.steal) == 2
