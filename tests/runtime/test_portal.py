"""The sync facade: driving actors from plain threads, batching, and a stop that never hangs."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from kinesis_actors.runtime import (
    Actor,
    ActorContext,
    Backoff,
    BlockingRuntime,
    ChildSpec,
    RestartIntensityExceeded,
)

BACKENDS = ["asyncio", "trio"]


class Collector(Actor[int]):
    """Appends what it receives to a list shared with the test thread."""

    def __init__(self, sink: list[int]) -> None:
        self.sink = sink

    async def handle(self, ctx: ActorContext[int], message: int) -> None:
        self.sink.append(message)


@pytest.mark.parametrize("backend", BACKENDS)
def test_send_send_batch_and_batcher_deliver_everything_in_order(backend: str) -> None:
    sink: list[int] = []
    with BlockingRuntime(backend=backend, name="rt") as runtime:
        ref = runtime.start_child(ChildSpec("sink", lambda: Collector(sink), capacity=8))
        runtime.send(ref, 0)
        assert runtime.send_batch(ref, range(1, 100)) == 99
        with runtime.batcher(ref, size=16) as batch:
            for i in range(100, 150):
                batch.send(i)
            assert batch.pending == 50 % 16
        assert batch.sent == 50
        assert runtime.call(lambda: ref.statistics().sent) == 150
        snapshot = runtime.statistics()
    # The graceful stop drained the mailbox before returning.
    assert sink == list(range(150))
    assert snapshot.child("sink").mailbox.capacity == 8


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_threads_can_send_at_once(backend: str) -> None:
    sink: list[int] = []
    with BlockingRuntime(backend=backend) as runtime:
        ref = runtime.start_child(ChildSpec("sink", lambda: Collector(sink), capacity=4))

        def produce(base: int) -> None:
            runtime.send_batch(ref, range(base, base + 200))

        threads = [threading.Thread(target=produce, args=(n * 1000,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert sorted(sink) == sorted(n * 1000 + i for n in range(4) for i in range(200))


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_runs_sync_and_async_functions_on_the_loop(backend: str) -> None:
    async def add_later(a: int, b: int) -> int:
        await anyio.lowlevel.checkpoint()
        return a + b

    with BlockingRuntime(backend=backend) as runtime:
        assert runtime.call(add_later, 2, 3) == 5
        loop_thread = runtime.call(threading.current_thread)
    assert loop_thread is not threading.current_thread()
    with pytest.raises(RuntimeError, match="not running"):
        runtime.call(threading.current_thread)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_cancels_actors_that_will_not_drain_within_the_timeout(backend: str) -> None:
    class Stuck(Actor[Any]):
        async def run(self, ctx: ActorContext[Any]) -> None:
            await anyio.sleep_forever()

    runtime = BlockingRuntime(backend=backend).start()
    runtime.start_child(ChildSpec("stuck", Stuck, shutdown_timeout=60.0))
    started = time.monotonic()
    assert runtime.stop(timeout=1.0) is True
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_never_hangs_the_caller_even_when_the_loop_is_wedged(backend: str) -> None:
    unblock = threading.Event()
    entered = threading.Event()

    class Wedge(Actor[Any]):
        async def handle(self, ctx: ActorContext[Any], message: Any) -> None:
            entered.set()
            unblock.wait()  # blocks the whole event loop thread, on purpose

    runtime = BlockingRuntime(backend=backend).start()
    ref = runtime.start_child(ChildSpec("wedge", Wedge))
    runtime.send(ref, "jam")
    assert entered.wait(5)
    started = time.monotonic()
    try:
        assert runtime.stop(timeout=0.3) is False
        assert time.monotonic() - started < 1.5  # not until the loop is unblocked
    finally:
        unblock.set()
    # Once the loop is free again, the runtime finishes stopping by itself.
    assert runtime._thread is not None
    runtime._thread.join(5)
    assert not runtime._thread.is_alive()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_supervisor_failure_is_raised_by_stop_and_blocks_later_calls(backend: str) -> None:
    class Crashes(Actor[int]):
        async def handle(self, ctx: ActorContext[int], message: int) -> None:
            raise ValueError("always")

    runtime = BlockingRuntime(backend=backend, intensity=(0, 10.0), backoff=Backoff.none())
    runtime.start()
    ref = runtime.start_child(ChildSpec("crashes", Crashes))
    runtime.send(ref, 1)
    assert runtime._thread is not None
    runtime._thread.join(5)
    with pytest.raises(RuntimeError, match="not running") as info:
        runtime.send(ref, 2)
    assert isinstance(info.value.__cause__, RestartIntensityExceeded)
    with pytest.raises(RestartIntensityExceeded) as failure:
        runtime.stop(timeout=1.0)
    assert isinstance(failure.value.causes[0], ValueError)


def test_start_twice_and_batch_size_are_checked() -> None:
    runtime = BlockingRuntime().start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            runtime.start()
        ref = runtime.start_child(ChildSpec("sink", lambda: Collector([])))
        with pytest.raises(ValueError, match="size"):
            runtime.batcher(ref, size=0)
    finally:
        assert runtime.stop(timeout=2.0)
    assert BlockingRuntime().stop() is True  # never started: nothing to do
