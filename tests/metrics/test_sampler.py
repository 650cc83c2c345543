"""Snapshots are taken on their event loop's thread, and a collector never hangs on a loop."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from kinesis_actors import KinesisClient
from kinesis_actors.metrics._sampler import LoopSampler
from kinesis_actors.metrics.otel import instrument


@pytest.mark.anyio
async def test_a_collector_thread_gets_a_snapshot_taken_on_the_loops_thread() -> None:
    loop_thread = threading.get_ident()
    sampler = LoopSampler(threading.get_ident)
    assert sampler.sample() == loop_thread  # on the loop itself: at once
    assert await anyio.to_thread.run_sync(sampler.sample) == loop_thread


@pytest.mark.anyio
async def test_a_blocked_loop_makes_the_collector_give_up_after_the_timeout() -> None:
    answered = anyio.Event()

    def read() -> str:
        answered.set()
        return "snapshot"

    sampler = LoopSampler(read, timeout=0.2)
    outcome: list[tuple[str | None, float]] = []

    def collector() -> None:
        started = time.monotonic()
        outcome.append((sampler.sample(), time.monotonic() - started))
        # The loop still owes the first answer: a second collection does not wait again.
        started = time.monotonic()
        outcome.append((sampler.sample(), time.monotonic() - started))

    thread = threading.Thread(target=collector)
    thread.start()
    thread.join(10)  # blocks the loop on purpose, as a long synchronous call would
    assert not thread.is_alive()
    (first, first_wait), (second, second_wait) = outcome
    assert first is None and 0.2 <= first_wait < 2
    assert second is None and second_wait < 0.1
    await answered.wait()  # the loop answers the late request once it runs again
    assert await anyio.to_thread.run_sync(sampler.sample) == "snapshot"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_finished_loop_gives_no_snapshot_at_once(backend: str) -> None:
    made: list[LoopSampler[str]] = []

    async def make() -> None:
        made.append(LoopSampler(lambda: "snapshot", timeout=5))

    thread = threading.Thread(target=anyio.run, args=(make,), kwargs={"backend": backend})
    thread.start()
    thread.join(10)
    started = time.monotonic()
    assert made[0].sample() is None
    assert time.monotonic() - started < 1


def test_instrument_outside_the_event_loop_says_where_to_call_it() -> None:
    with pytest.raises(RuntimeError, match="from the event loop that runs"):
        instrument(KinesisClient())


def test_instrument_names_what_it_takes_and_the_attributes_it_sets_itself() -> None:
    with pytest.raises(TypeError, match="Producer, Consumer or KinesisClient, got str"):
        instrument("orders")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\['shard', 'stream'\]"):
        instrument(KinesisClient(), attributes={"stream": "x", "shard": "y", "app": "z"})
