"""Runtime benchmarks.

* Mailbox throughput: messages/s through a chain of 3 supervised actors (source -> A -> B -> C),
  on asyncio and trio, next to the same chain built on bare anyio memory object streams.
* Sync facade: cost per item of sending from a plain thread through the blocking portal, one
  call per item (``send``) and batched (``send_batch``).

Usage: ``.venv/bin/python benchmarks/runtime_bench.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio

from kinesis_actors.runtime import (
    Actor,
    ActorContext,
    ActorRef,
    BlockingRuntime,
    ChildSpec,
    Supervisor,
)

BACKENDS = ("asyncio", "trio")
CAPACITY = 256


class Relay(Actor[int]):
    """Forwards every message to the next actor."""

    def __init__(self, downstream: ActorRef[int]) -> None:
        self.downstream = downstream

    async def handle(self, ctx: ActorContext[int], message: int) -> None:
        await self.downstream.send(message)


class Sink(Actor[int]):
    """Counts messages and signals when it has seen ``total``."""

    def __init__(self, total: int, done: anyio.Event) -> None:
        self.total = total
        self.done = done
        self.seen = 0

    async def handle(self, ctx: ActorContext[int], message: int) -> None:
        self.seen += 1
        if self.seen == self.total:
            self.done.set()


async def actor_chain(messages: int) -> float:
    """Messages per second from a source through A -> B -> C."""
    done = anyio.Event()
    async with Supervisor(name="bench") as sup:
        sink = await sup.start_child(
            ChildSpec("c", lambda: Sink(messages, done), capacity=CAPACITY)
        )
        b = await sup.start_child(ChildSpec("b", lambda: Relay(sink), capacity=CAPACITY))
        a = await sup.start_child(ChildSpec("a", lambda: Relay(b), capacity=CAPACITY))
        started = time.perf_counter()
        for i in range(messages):
            await a.send(i)
        await done.wait()
        elapsed = time.perf_counter() - started
    return messages / elapsed


async def memory_stream_chain(messages: int) -> float:
    """The same chain on anyio memory object streams, for reference."""
    streams = [anyio.create_memory_object_stream[int](CAPACITY) for _ in range(3)]

    async def relay(index: int) -> None:
        receive = streams[index][1]
        send = streams[index + 1][0]
        async with receive, send:
            async for item in receive:
                await send.send(item)

    async def sink() -> None:
        async with streams[2][1] as receive:
            async for _ in receive:
                pass

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(relay, 0)
        tg.start_soon(relay, 1)
        tg.start_soon(sink)
        async with streams[0][0] as send:
            for i in range(messages):
                await send.send(i)
    return messages / (time.perf_counter() - started)


class Discard(Actor[int]):
    async def handle(self, ctx: ActorContext[int], message: int) -> None:
        pass


def facade_cost(backend: str, unbatched: int, batched: int, batch_size: int) -> dict[str, float]:
    """Microseconds per item sent from this thread: one portal call each, and batched."""
    with BlockingRuntime(backend=backend, name="bench") as runtime:
        ref = runtime.start_child(ChildSpec("discard", Discard, capacity=CAPACITY))
        runtime.send(ref, -1)  # warm up
        started = time.perf_counter()
        for i in range(unbatched):
            runtime.send(ref, i)
        single = (time.perf_counter() - started) / unbatched
        items = list(range(batch_size))
        started = time.perf_counter()
        for _ in range(batched // batch_size):
            runtime.send_batch(ref, items)
        per_item = (time.perf_counter() - started) / (batched // batch_size * batch_size)
    return {"unbatched_us": single * 1e6, "batched_us": per_item * 1e6, "batch_size": batch_size}


def run(quick: bool = False) -> dict[str, Any]:
    """Run every benchmark and return the figures."""
    chain_messages = 20_000 if quick else 200_000
    unbatched = 500 if quick else 5_000
    batched = 20_000 if quick else 200_000
    results: dict[str, Any] = {
        "quick": quick,
        "chain_messages": chain_messages,
        "chain_msgs_per_s": {},
        "memory_stream_chain_msgs_per_s": {},
        "facade": {},
    }
    for backend in BACKENDS:
        results["chain_msgs_per_s"][backend] = anyio.run(
            actor_chain, chain_messages, backend=backend
        )
        results["memory_stream_chain_msgs_per_s"][backend] = anyio.run(
            memory_stream_chain, chain_messages, backend=backend
        )
        results["facade"][backend] = facade_cost(backend, unbatched, batched, batch_size=1_000)
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        f"chain of 3 actors, {results['chain_messages']} messages, mailbox capacity {CAPACITY}",
    ]
    for backend in BACKENDS:
        lines.append(
            f"  {backend:8} actors {results['chain_msgs_per_s'][backend]:>10,.0f} msg/s"
            f"   (bare memory streams {results['memory_stream_chain_msgs_per_s'][backend]:>10,.0f})"
        )
    lines.append("sync facade, cost per item sent from a thread")
    for backend in BACKENDS:
        facade = results["facade"][backend]
        lines.append(
            f"  {backend:8} unbatched {facade['unbatched_us']:8.1f} us/item"
            f"   batched ({facade['batch_size']}) {facade['batched_us']:6.2f} us/item"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
