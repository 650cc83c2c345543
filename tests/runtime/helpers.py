"""Test doubles for actor-level tests: a journal to await conditions on, and a probe actor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from kinesis_actors.runtime import Actor, ActorContext

WAIT_LIMIT = 5.0
"""Guard on every awaited condition, so a broken runtime fails a test instead of hanging it."""


class Journal:
    """An append-only event list that wakes whoever waits for a condition on it."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self._changed: anyio.Event | None = None

    def add(self, *event: Any) -> None:
        self.events.append(event)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [event[1:] for event in self.events if event[0] == kind]

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(WAIT_LIMIT):
            while not predicate():
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()

    async def wait_count(self, kind: str, count: int) -> None:
        await self.wait_for(lambda: len(self.of(kind)) >= count)


class Probe(Actor[Any]):
    """Journals its lifecycle; crashes on the message ``"boom"``; returns on ``"return"``."""

    def __init__(self, journal: Journal, name: str, *, gate: anyio.Event | None = None) -> None:
        self.journal = journal
        self.name = name
        self.gate = gate

    async def on_start(self, ctx: ActorContext[Any]) -> None:
        self.journal.add("start", self.name, ctx.incarnation)

    async def run(self, ctx: ActorContext[Any]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        async for message in ctx:
            if message == "boom":
                raise RuntimeError(f"{self.name} boom")
            if message == "return":
                return
            self.journal.add("handle", self.name, ctx.incarnation, message)
            ctx.done()

    async def on_stop(self, ctx: ActorContext[Any]) -> None:
        self.journal.add("stop", self.name, ctx.incarnation)


def probe(journal: Journal, name: str, gate: anyio.Event | None = None) -> Callable[[], Probe]:
    return lambda: Probe(journal, name, gate=gate)
