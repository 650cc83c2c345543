"""The take round's writes in waves (:func:`in_waves`): bounded at once, and ended by the
table's first error raised alone, as a sequential loop would end."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from kinesis_actors.errors import KinesisError, LeaseTableError, ThrottlingError
from kinesis_actors.leases._waves import in_waves

pytestmark = pytest.mark.anyio


async def test_no_more_actions_run_at_once_than_the_bound() -> None:
    running = peak = done = 0

    async def action(_: int) -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
        running -= 1
        done += 1

    await in_waves(list(range(50)), action, at_once=4, fatal=())
    assert (peak, done) == (4, 50)


async def test_the_first_error_cancels_the_rest_and_is_raised_alone() -> None:
    started: list[int] = []
    never = anyio.Event()

    async def action(item: int) -> None:
        started.append(item)
        if len(started) == 3:  # the wave is full: its last fails (trio starts in any order)
            raise ThrottlingError("slow down")
        await never.wait()  # cancelled by the error, not left hanging

    with pytest.raises(ThrottlingError, match="slow down"):  # not an exception group
        await in_waves(list(range(10)), action, at_once=3, fatal=())
    assert len(started) == 3


async def test_a_fatal_error_is_raised_before_a_transient_one() -> None:
    both = anyio.Event()
    arrived = 0

    async def action(item: int) -> None:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        await both.wait()
        with anyio.CancelScope(shield=True):  # both fail, whatever the first one cancels
            await anyio.lowlevel.checkpoint()
        if item == 0:
            raise ThrottlingError("slow down")
        raise LeaseTableError("the table is gone", table="t")

    with pytest.raises(LeaseTableError):
        await in_waves([0, 1], action, at_once=2, fatal=(LeaseTableError,))


async def test_a_users_error_is_not_caught() -> None:
    async def action(_: int) -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        await in_waves([0], action, at_once=2, fatal=(KinesisError,))
