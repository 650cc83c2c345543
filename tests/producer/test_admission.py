"""The bounded queue's accounting: limits in records and bytes, a fair line, no lost room."""

from __future__ import annotations

import pytest

from kinesis_actors.producer._admission import Admission

pytestmark = pytest.mark.anyio


async def test_limits_in_records_and_in_bytes() -> None:
    admission = Admission(max_records=3, max_bytes=100)
    assert admission.try_take(40) and admission.try_take(40)
    assert not admission.try_take(40)  # bytes
    assert admission.try_take(20)
    assert not admission.try_take(0)  # records
    assert (admission.records, admission.nbytes) == (3, 100)


async def test_an_oversized_record_is_admitted_into_an_empty_queue_only() -> None:
    admission = Admission(max_records=10, max_bytes=100)
    assert admission.try_take(10)
    assert not admission.try_take(500)
    admission.release(1, 10)
    assert admission.try_take(500)
    assert admission.peak_bytes == 500


async def test_waiters_are_served_first_in_first_out_by_releases() -> None:
    admission = Admission(max_records=2, max_bytes=1000)
    assert admission.try_take(10) and admission.try_take(10)
    big, small = admission.enqueue(900), admission.enqueue(1)
    assert not (big.granted or small.granted)
    assert not admission.try_take(1)  # nobody overtakes the line
    admission.release(1, 10)
    assert big.granted and big.event.is_set() and not small.granted
    admission.release(1, 10)
    assert small.granted
    assert (admission.records, admission.nbytes) == (2, 901)


async def test_a_withdrawn_waiter_gives_back_its_room_or_its_place() -> None:
    admission = Admission(max_records=1, max_bytes=1000)
    assert admission.try_take(10)
    first, second = admission.enqueue(10), admission.enqueue(10)
    admission.withdraw(first)  # cancelled before it was granted
    admission.release(1, 10)
    assert second.granted
    admission.withdraw(second)  # cancelled after it was granted: room comes back
    assert (admission.records, admission.nbytes, admission.waiting) == (0, 0, 0)


async def test_releasing_more_than_was_taken_is_a_bug_that_shouts() -> None:
    admission = Admission(max_records=1, max_bytes=1000)
    with pytest.raises(RuntimeError):
        admission.release(1, 1)
