"""The mailbox's room on its own, without an event loop: what it puts, takes and gives back,
and the answers its owner reads instead of its fields."""

from __future__ import annotations

import pytest

from kinesis_actors.runtime import ManualClock
from kinesis_actors.runtime._room import Room


def room(capacity: int, *, max_weight: int | None = None, hold: bool = False) -> Room[str]:
    return Room(capacity, name="r", clock=ManualClock(), max_weight=max_weight, hold=hold)


def test_put_answers_whether_the_item_fit_by_count_and_by_weight() -> None:
    r = room(2, max_weight=100)
    assert r.put("a", 60)
    assert not r.put("b", 50)  # 110 > 100
    assert r.put("b", 40)
    assert not r.put("c", 0)  # 2 items: full by count
    assert r.take() == "a"  # its weight comes back with it
    assert (len(r), r.occupied, r.weight) == (1, 1, 40)
    stats = r.statistics()
    assert (stats.put, stats.taken, stats.peak_depth, stats.peak_weight) == (2, 1, 2, 100)


def test_an_item_heavier_than_the_bound_goes_alone_into_an_empty_room() -> None:
    r = room(10, max_weight=100)
    assert r.put("huge", 500)
    assert not r.put("small", 1)
    assert r.take() == "huge"
    assert r.put_many(["x", "y"], 0, 2, lambda _: 300) == 1  # the first alone, as put
    assert r.weight == 300


def test_take_on_an_empty_room_is_an_index_error_and_counts_nothing() -> None:
    r = room(1)
    with pytest.raises(IndexError):
        r.take()
    assert r.statistics().taken == 0


def test_a_held_item_keeps_its_room_until_released_and_no_more_can_be_released() -> None:
    r = room(2, max_weight=100, hold=True)
    assert r.put("a", 60) and r.put("b", 40)
    assert r.receive_held() == ["a", "b"]
    assert (len(r), r.occupied, r.weight, r.empty) == (0, 2, 100, False)
    assert not r.put("c", 1)
    r.release(2, 100)
    assert (r.occupied, r.weight, r.empty) == (0, 0, True)
    with pytest.raises(RuntimeError, match="released more than was held"):
        r.release(1, 0)


def test_put_many_takes_the_same_room_as_as_many_puts() -> None:
    items = [str(i) for i in range(12)]
    one, many = room(20, max_weight=50), room(20, max_weight=50)
    weights = {item: 3 + int(item) % 4 for item in items}
    fitted = 0
    for item in items:
        if not one.put(item, weights[item]):
            break
        fitted += 1
    assert fitted == 11  # the weight binds, not the count
    assert many.put_many(items, 0, len(items), weights.__getitem__) == fitted
    assert one.statistics() == many.statistics()
    assert [one.take() for _ in range(fitted)] == [many.take() for _ in range(fitted)]


def test_purge_and_evict_give_the_room_back_but_count_nothing_taken() -> None:
    r = room(3, max_weight=100)
    for item, weight in (("a", 10), ("b", 20), ("c", 30)):
        assert r.put(item, weight)
    assert r.evict_oldest() == "a"
    purged: list[str] = []
    assert r.purge(purged.append) == 2
    assert purged == ["b", "c"]
    assert (r.empty, r.statistics().taken) == (True, 0)
