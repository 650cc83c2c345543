"""Credits (sans-IO, no event loop) and the CreditGate that waits on them."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_actors.runtime import CreditError, CreditGate, Credits, wait_any

# -- the counter, without a loop ----------------------------------------------------------------


def test_request_deliver_consume_cycle() -> None:
    credits = Credits(2)
    assert credits.try_acquire()
    assert credits.try_acquire()
    assert not credits.try_acquire()
    assert (credits.outstanding, credits.buffered, credits.available) == (2, 0, 0)
    credits.delivered()
    assert (credits.outstanding, credits.buffered, credits.available) == (1, 1, 0)
    credits.consumed()
    assert credits.available == 1
    credits.withdraw()
    assert (credits.outstanding, credits.buffered, credits.available) == (0, 0, 2)
    assert credits.delivered_total == 1


def test_acquire_is_all_or_nothing_and_acquire_up_to_takes_what_there_is() -> None:
    credits = Credits(5)
    assert credits.try_acquire(3)
    assert not credits.try_acquire(3)
    assert credits.outstanding == 3
    assert credits.acquire_up_to(10) == 2
    assert credits.acquire_up_to(1) == 0


@pytest.mark.parametrize(
    ("operation", "message"),
    [
        (lambda c: c.delivered(), "delivered 1 item"),
        (lambda c: c.withdraw(), "withdrew 1 credit"),
        (lambda c: c.consumed(), "consumed 1 item"),
    ],
)
def test_protocol_violations_raise(operation: object, message: str) -> None:
    credits = Credits(1)
    with pytest.raises(CreditError, match=message):
        operation(credits)  # type: ignore[operator]
    assert (credits.outstanding, credits.buffered) == (0, 0)


def test_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="prefetch"):
        Credits(0)
    with pytest.raises(ValueError, match="at least 1"):
        Credits(1).try_acquire(0)


METHODS = {"deliver": "delivered", "withdraw": "withdraw", "consume": "consumed"}

operations = st.lists(
    st.tuples(st.sampled_from(["request", "deliver", "withdraw", "consume"]), st.integers(1, 4)),
    max_size=200,
)


@given(prefetch=st.integers(1, 8), steps=operations)
def test_property_buffered_plus_outstanding_never_exceeds_prefetch(
    prefetch: int, steps: list[tuple[str, int]]
) -> None:
    """For any interleaving, the counter agrees with a naive model and keeps the invariant."""
    credits = Credits(prefetch)
    outstanding = buffered = 0
    for operation, n in steps:
        if operation == "request":
            granted = credits.try_acquire(n)
            assert granted == (outstanding + buffered + n <= prefetch)
            outstanding += n if granted else 0
        else:
            source = buffered if operation == "consume" else outstanding
            if n > source:
                with pytest.raises(CreditError):
                    getattr(credits, METHODS[operation])(n)
                continue
            if operation == "deliver":
                credits.delivered(n)
                outstanding, buffered = outstanding - n, buffered + n
            elif operation == "withdraw":
                credits.withdraw(n)
                outstanding -= n
            else:
                credits.consumed(n)
                buffered -= n
        assert (credits.outstanding, credits.buffered) == (outstanding, buffered)
        assert 0 <= credits.buffered + credits.outstanding <= prefetch
        assert credits.available == prefetch - outstanding - buffered


# -- the gate, on a loop ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_gate_acquire_waits_until_the_consumer_returns_a_credit() -> None:
    gate = CreditGate(1, name="shard-0")
    await gate.acquire()
    gate.delivered()
    acquired = anyio.Event()

    async def reader() -> None:
        await gate.acquire()
        acquired.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        assert not acquired.is_set()
        gate.consumed()
        await acquired.wait()
    assert gate.credits.outstanding == 1


@pytest.mark.anyio
async def test_gate_withdraw_wakes_a_waiter() -> None:
    gate = CreditGate(1)
    assert gate.try_acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(gate.acquire)
        await anyio.wait_all_tasks_blocked()
        gate.withdraw()
    assert gate.credits.outstanding == 1


@pytest.mark.anyio
async def test_wait_any_returns_when_any_gate_has_credit() -> None:
    gates = [CreditGate(1, name=f"g{i}") for i in range(3)]
    for gate in gates:
        assert gate.try_acquire()
        gate.delivered()
    woke = anyio.Event()

    async def waiter() -> None:
        await wait_any(gates)
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert not woke.is_set()
        gates[2].consumed()
    assert woke.is_set()
    assert [gate.available for gate in gates] == [0, 0, 1]
    assert all(not gate._listeners for gate in gates)


@pytest.mark.anyio
async def test_gate_rejects_an_impossible_acquire() -> None:
    with pytest.raises(ValueError, match="prefetch"):
        await CreditGate(2).acquire(3)
    with pytest.raises(ValueError, match="at least one gate"):
        await wait_any([])
