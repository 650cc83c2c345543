"""A mailbox's room: its bound, what takes room, and the line of senders waiting for it.

:class:`Room` is the base of :class:`~._mailbox.Mailbox`; the queue, its control lane, the
full policies and the statistics are the mailbox's. Here is the bookkeeping that the bound
rests on, apart from the queue's operations so that its invariants can be read in one place:

* ``depth + held + reserved <= capacity`` at every await point, where *held* counts received
  items of a ``hold`` mailbox not yet released and *reserved* counts blocked senders that were
  granted a slot but have not run yet. A bound nobody can exceed is the point.
* With ``max_weight``, the weight of what takes room stays within it too, except that an item
  heavier than the bound alone is accepted into an empty mailbox, so it cannot block forever.
* Blocked senders wait in one first-in, first-out line and are granted room in its order as
  it comes back (a receive, a purge or :meth:`Room.release`). A blocked sender that is
  cancelled withdraws, even if it had already been granted a slot: the slot is handed to the
  next one in line instead.

``hold``'s side of receiving is here too: :meth:`Room.receive_held` moves every queued item
to *held* at once, :meth:`Room.release` gives their room back. The mailbox's hot paths
(``try_send``, ``try_send_many``) inline :meth:`Room._fits` and the append for speed; they
read the same attributes.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Generic, TypeVar

from ._clock import Clock
from ._letters import SendWaiter

__all__ = ["Room"]

T = TypeVar("T")


class Room(Generic[T]):
    """The room of a bounded mailbox of ``capacity`` items (and ``max_weight``, if given);
    ``hold``: a received item keeps its room until :meth:`release`."""

    def __init__(
        self, capacity: int, *, name: str, clock: Clock, max_weight: int | None, hold: bool
    ) -> None:
        self._name = name
        self._clock = clock
        self._capacity = capacity
        self._max_weight = max_weight
        self._hold = hold
        # Bounded by `capacity`: every append is preceded by a room check.
        self._data: deque[T] = deque()
        self._held = 0
        self._weight = 0  # queued, held and granted
        # The weight of each queued item, in queue order, when weights are bounded and the
        # mailbox gives their room back itself (not ``hold``); bounded like ``_data``.
        self._weights: deque[int] | None = deque() if max_weight is not None and not hold else None
        # Bounded by the number of tasks blocked in send; each holds one entry.
        self._senders: deque[SendWaiter] = deque()
        self._reserved = 0
        # statistics of the line
        self._blocked = 0
        self._blocked_sends = 0
        self._blocked_seconds = 0.0
        self._blocked_since_sum = 0.0
        self._received = 0  # statistics: items taken off the queue (by the mailbox too)

    @property
    def name(self) -> str:
        return self._name

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        """Queued data items (the control lane is not counted)."""
        return len(self._data)

    def receive_held(self) -> list[T]:
        """``hold`` mailboxes: take every queued data item at once, oldest first (a batch
        intake, one call for all instead of one ``receive_nowait`` each; the control lane
        is left to that). Each keeps its room until :meth:`release`; empty: ``[]``."""
        if not self._hold:
            raise RuntimeError(f"mailbox {self._name!r} does not hold received items")
        items = list(self._data)
        self._data.clear()
        self._received += len(items)
        self._held += len(items)
        return items

    @property
    def occupied(self) -> int:
        """Items taking room: queued, held (``hold``) and granted to a blocked sender."""
        return len(self._data) + self._held + self._reserved

    @property
    def weight(self) -> int:
        """Their total weight."""
        return self._weight

    @property
    def senders_waiting(self) -> int:
        """Senders blocked for room."""
        return self._blocked

    def longest_wait(self) -> float:
        """Seconds the first blocked sender has been waiting (0.0 when none is)."""
        for waiter in self._senders:
            return self._clock.now() - waiter.since
        return 0.0

    def release(self, count: int = 1, weight: int = 0) -> None:
        """``hold`` mailboxes: ``count`` received items of ``weight`` in total are done; their
        room goes to the senders waiting for it, first come first served.

        :raises RuntimeError: when more is released than was held.
        """
        if not self._hold:
            raise RuntimeError(f"mailbox {self._name!r} does not hold received items")
        self._held -= count
        self._weight -= weight
        if self._held < 0 or self._weight < 0:
            raise RuntimeError(f"mailbox {self._name!r}: released more than was held")
        self._wake_senders()

    async def _wait_for_room(self, weight: int) -> None:
        """Wait in line until room for an item of ``weight`` is granted, or the line is
        released by a close. On return the grant, if any, is given up again: the caller
        appends the item (which takes its room) or raises, with no await in between.

        Cancelled, the sender withdraws from the line (passing on a grant) and re-raises.
        """
        started = self._clock.now()
        waiter = SendWaiter(weight, started)
        self._senders.append(waiter)
        self._blocked += 1
        self._blocked_sends += 1
        self._blocked_since_sum += started
        try:
            await waiter.event.wait()
        except BaseException:
            self._withdraw(waiter)
            raise
        finally:
            self._blocked -= 1
            self._blocked_since_sum -= started
            self._blocked_seconds += self._clock.now() - started
        if waiter.granted:
            self._reserved -= 1
            self._weight -= weight  # taken again by _append

    def _fits(self, weight: int) -> bool:
        occupied = len(self._data) + self._held + self._reserved
        if occupied >= self._capacity:
            return False
        limit = self._max_weight
        # One item heavier than the bound goes alone, into an empty mailbox.
        return limit is None or self._weight + weight <= limit or occupied == 0

    def _has_room(self, weight: int = 0) -> bool:
        return not self._senders and self._fits(weight)

    def _wake_senders(self) -> None:
        senders = self._senders
        while senders and self._fits(senders[0].weight):
            waiter = senders.popleft()
            waiter.granted = True
            self._reserved += 1
            self._weight += waiter.weight
            waiter.event.set()

    def _withdraw(self, waiter: SendWaiter) -> None:
        if waiter.granted:
            # Granted a slot but cancelled before using it: pass the slot on.
            waiter.granted = False
            self._reserved -= 1
            self._weight -= waiter.weight
            self._wake_senders()
        else:
            with contextlib.suppress(ValueError):  # already released by close()
                self._senders.remove(waiter)
            self._wake_senders()  # it may have been the head that held the others back
