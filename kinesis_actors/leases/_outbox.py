"""The lease events on their way to the reader: a component of :class:`~._holder.LeaseHolder`.

:class:`EventOutbox` queues :class:`LeaseAcquired`, :class:`LeaseHandoff` and
:class:`LeaseLost` in the order they happened, takes back an event not received yet that a
later one makes moot (an acquisition lost before it was received; a handoff the holder
answered itself), and ends with the coordinator's failure: the reader's next wait raises it.

The holder alone puts events in; the coordinator's reader alone takes them out, and the
coordinator alone fails it. Bounded: at most two events a lease wait here (an acquisition
lost before it is received is taken back rather than followed by its loss; after one is
received, a handoff and a loss).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel

from ._events import LeaseAcquired, LeaseEvent, LeaseLost

__all__ = ["EventOutbox"]


class EventOutbox:
    """The events for a coordinator's reader (see the module's doc)."""

    def __init__(self) -> None:
        self._events: deque[LeaseEvent] = deque()  # Bounded by 2 a lease (see the module).
        self._changed = anyio.Event()
        self._failure: BaseException | None = None

    @property
    def failure(self) -> BaseException | None:
        """What the coordinator stopped on (see :meth:`fail`), None while it runs."""
        return self._failure

    @property
    def queued(self) -> tuple[LeaseEvent, ...]:
        """The events not received yet, oldest first (a snapshot)."""
        return tuple(self._events)

    def push(self, event: LeaseEvent) -> None:
        """Queue ``event``; a :class:`LeaseLost` whose acquisition was not received yet takes
        that back instead (there is nothing to stop)."""
        if isinstance(event, LeaseLost) and self.unqueue(
            LeaseAcquired, event.stream, event.shard_id
        ):
            return
        self._events.append(event)
        self._wake()

    def unqueue(self, kind: type[LeaseEvent], stream: str, shard_id: str) -> bool:
        """Take back the queued event of ``kind`` for the shard, if it was not received."""
        for queued in self._events:
            if isinstance(queued, kind) and (queued.stream, queued.shard_id) == (stream, shard_id):
                self._events.remove(queued)
                self._wake()
                return True
        return False

    def fail(self, error: BaseException) -> bool:
        """The coordinator stopped on ``error``: the reader's next wait raises it. True the
        first time (a later failure is not kept)."""
        first = self._failure is None
        if first:
            self._failure = error
        self._wake()
        return first

    async def next_event(self) -> LeaseEvent:
        """The next event, awaiting one; raises the coordinator's failure once it has
        stopped on one (see :meth:`fail`)."""
        await anyio.lowlevel.checkpoint()
        while True:
            if self._failure is not None:
                raise self._failure
            if self._events:
                return self._events.popleft()
            await self._changed.wait()

    async def events(self) -> AsyncIterator[LeaseEvent]:
        """:meth:`next_event`, again and again."""
        while True:
            yield await self.next_event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
