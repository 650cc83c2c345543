"""``loop_clock``: the running loop's clock, bound once, on both backends."""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors.runtime._clock import loop_clock

pytestmark = pytest.mark.anyio


async def test_loop_clock_reads_what_anyio_current_time_reads() -> None:
    now = loop_clock()
    before = anyio.current_time()
    bound = now()
    after = anyio.current_time()
    assert before <= bound <= after
    await anyio.sleep(0.01)
    assert now() >= bound + 0.01 - 1e-3  # the same clock the loop's sleeps use


def test_loop_clock_outside_a_loop_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        loop_clock()
