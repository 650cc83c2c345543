"""The collector: full batches at once, lingering batches on time, limits and order always kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_actors.errors import ConfigError
from kinesis_actors.producer import (
    PUT_RECORDS_MAX_RECORDS,
    Batch,
    Collector,
)

MIB = 1_048_576


def _items(batches: list[Batch[int]]) -> list[int]:
    return [item for batch in batches for item in batch.items]


def test_lesson_21_batches_never_exceed_500_records_or_the_call_size() -> None:
    collector: Collector[int] = Collector()
    full: list[Batch[int]] = []
    for i in range(501):
        full += collector.add(i, 10, 0.0)
    assert [len(batch) for batch in full] == [500]
    assert len(collector) == 1

    collector = Collector(max_bytes=5 * MIB)
    full = []
    for i in range(6):
        full += collector.add(i, MIB, 0.0)
    assert [(len(b), b.nbytes) for b in full] == [(5, 5 * MIB)]
    assert collector.pending_bytes == MIB

    with pytest.raises(ConfigError, match="max_records"):
        Collector(max_records=501)
    with pytest.raises(ConfigError, match="max_bytes"):
        Collector(max_bytes=10 * MIB + 1)


def test_a_batch_is_handed_out_as_soon_as_it_is_exactly_full() -> None:
    collector: Collector[str] = Collector(max_records=3, max_bytes=100)
    assert collector.add("a", 40, 0.0) == []
    assert collector.add("b", 60, 0.0) == [Batch(("a", "b"), 100, 0.0)]
    assert len(collector) == 0
    assert collector.next_deadline() is None


def test_an_item_that_does_not_fit_closes_the_open_batch_and_starts_the_next() -> None:
    collector: Collector[str] = Collector(max_records=3, max_bytes=100)
    assert collector.add("a", 60, 1.0) == []
    assert collector.add("b", 50, 2.0) == [Batch(("a",), 60, 1.0)]
    assert collector.next_deadline() == pytest.approx(2.1)
    assert collector.drain() == [Batch(("b",), 50, 2.0)]


def test_add_can_hand_out_two_batches() -> None:
    collector: Collector[str] = Collector(max_bytes=100)
    collector.add("a", 60, 0.0)
    assert collector.add("b", 100, 1.0) == [Batch(("a",), 60, 0.0), Batch(("b",), 100, 1.0)]
    assert len(collector) == 0


def test_due_waits_for_linger_from_the_oldest_item() -> None:
    collector: Collector[str] = Collector(linger=0.1)
    assert collector.next_deadline() is None
    collector.add("a", 1, 5.0)
    collector.add("b", 1, 5.09)  # a later item does not push the deadline back
    assert collector.next_deadline() == pytest.approx(5.1)
    assert collector.due(5.09) == []
    [batch] = collector.due(5.1)
    assert batch.items == ("a", "b")
    assert batch.oldest == 5.0
    assert collector.next_deadline() is None
    assert collector.due(100.0) == []


def test_zero_linger_makes_every_batch_due_at_once() -> None:
    collector: Collector[str] = Collector(linger=0)
    collector.add("a", 1, 3.0)
    assert collector.due(3.0) == [Batch(("a",), 1, 3.0)]


def test_drain_hands_out_everything_and_empties() -> None:
    collector: Collector[str] = Collector(linger=10)
    assert collector.drain() == []
    collector.add("a", 1, 0.0)
    collector.add("b", 2, 0.0)
    assert collector.drain() == [Batch(("a", "b"), 3, 0.0)]
    assert collector.drain() == []
    assert (len(collector), collector.pending_bytes) == (0, 0)


def test_an_item_larger_than_max_bytes_is_refused_and_changes_nothing() -> None:
    collector: Collector[str] = Collector(max_bytes=100)
    collector.add("a", 10, 0.0)
    with pytest.raises(ValueError, match="100"):
        collector.add("big", 101, 0.0)
    with pytest.raises(ValueError, match="size"):
        collector.add("negative", -1, 0.0)
    assert collector.drain() == [Batch(("a",), 10, 0.0)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_records": 0},
        {"max_records": 1.5},
        {"max_bytes": 0},
        {"linger": -0.1},
        {"linger": float("nan")},
    ],
)
def test_collector_rejects_bad_configuration(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        Collector(**kwargs)  # type: ignore[arg-type]


def test_defaults_are_the_service_and_kpl_limits() -> None:
    collector: Collector[int] = Collector()
    assert collector.max_records == PUT_RECORDS_MAX_RECORDS == 500
    assert collector.max_bytes == 5 * MIB
    assert collector.linger == 0.1


@given(
    max_records=st.integers(1, 500),
    max_bytes=st.integers(1, 10 * MIB),
    linger=st.floats(0, 1),
    steps=st.lists(
        st.tuples(st.floats(0, 1), st.floats(0, 0.3), st.booleans()), min_size=1, max_size=300
    ),
)
def test_batches_respect_both_limits_linger_and_order(
    max_records: int,
    max_bytes: int,
    linger: float,
    steps: list[tuple[float, float, bool]],
) -> None:
    collector: Collector[int] = Collector(max_records, max_bytes, linger)
    batches: list[Batch[int]] = []
    sizes: list[int] = []
    now = 0.0
    for i, (fraction, dt, poll) in enumerate(steps):
        now += dt
        size = round(fraction * max_bytes)
        sizes.append(size)
        batches += collector.add(i, size, now)
        if poll:
            due = collector.due(now)
            for batch in due:
                assert now >= batch.oldest + linger
            batches += due
            deadline = collector.next_deadline()
            assert deadline is None or deadline > now
        assert len(collector) < max_records
        assert collector.pending_bytes <= max_bytes
    batches += collector.drain()

    assert _items(batches) == list(range(len(steps)))
    for batch in batches:
        assert 1 <= len(batch) <= max_records
        assert batch.nbytes <= max_bytes
        assert batch.nbytes == sum(sizes[i] for i in batch.items)
