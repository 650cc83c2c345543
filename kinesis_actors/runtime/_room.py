"""A mailbox's room: its queue of data, its bound, and the line of senders waiting for room.

:class:`Room` is a component a :class:`~._mailbox.Mailbox` owns, as trio's
``MemoryChannelState`` is its channels': the mailbox keeps its control lane, the full
policies, closing and the dead-letter hook, and calls the room for everything that takes or
gives back room. Every field here is written here only, so the invariants the bound rests on
are read in one place:

* ``depth + held + reserved <= capacity`` at every await point, where *held* counts received
  items of a ``hold`` mailbox not yet released and *reserved* counts blocked senders that were
  granted a slot but have not run yet. A bound nobody can exceed is the point.
* With ``max_weight``, the weight of what takes room stays within it too, except that an item
  heavier than the bound alone is accepted into an empty mailbox, so it cannot block forever.
* Blocked senders wait in one first-in, first-out line and are granted room in its order as
  it comes back (a take, a purge or :meth:`Room.release`). A blocked sender that is cancelled
  withdraws, even if it had already been granted a slot: the slot is handed to the next one
  in line instead.

The hot paths are one call each across the seam (:meth:`Room.put`, :meth:`Room.take`,
:meth:`Room.put_many`, :meth:`Room.receive_held`): the room counts what it puts and takes and
keeps its own peaks, so the mailbox reads nothing back but the answer.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Generic, TypeVar

from ._clock import Clock
from ._letters import SendWaiter

__all__ = ["Room", "RoomStatistics"]

T = TypeVar("T")


@dataclass(frozen=True)
class RoomStatistics:
    """The room's share of a :class:`~._letters.MailboxStats`, at one moment."""

    depth: int
    peak_depth: int
    held: int
    weight: int
    peak_occupied: int
    peak_weight: int
    senders_waiting: int
    blocked_seconds: float
    blocked_sends: int
    put: int
    taken: int


class Room(Generic[T]):
    """The queue and room of a bounded mailbox of ``capacity`` items (and ``max_weight``, if
    given); ``hold``: a taken item keeps its room until :meth:`release`. ``name`` is the
    mailbox's, for errors."""

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
        # room gives it back on a take (not ``hold``); bounded like ``_data``.
        self._weights: deque[int] | None = deque() if max_weight is not None and not hold else None
        # Bounded by the number of tasks blocked in send; each holds one entry.
        self._senders: deque[SendWaiter] = deque()
        self._reserved = 0
        # statistics
        self._put = 0
        self._taken = 0
        self._peak = 0
        self._peak_occupied = 0
        self._peak_weight = 0
        self._blocked = 0
        self._blocked_sends = 0
        self._blocked_seconds = 0.0
        self._blocked_since_sum = 0.0

    # -- what the mailbox reads -------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        """Queued data items."""
        return len(self._data)

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
        """Senders blocked for room (granted or not, until they run)."""
        return self._blocked

    @property
    def empty(self) -> bool:
        """Nothing queued, held or weighing."""
        return not (self._data or self._held or self._weight)

    def longest_wait(self) -> float:
        """Seconds the first sender in line has been waiting (0.0 when none is)."""
        for waiter in self._senders:
            return self._clock.now() - waiter.since
        return 0.0

    def statistics(self) -> RoomStatistics:
        blocked = self._blocked_seconds
        if self._blocked:
            blocked += self._blocked * self._clock.now() - self._blocked_since_sum
        return RoomStatistics(
            depth=len(self._data),
            peak_depth=self._peak,
            held=self._held,
            weight=self._weight,
            peak_occupied=self._peak_occupied,
            peak_weight=self._peak_weight,
            senders_waiting=self._blocked,
            blocked_seconds=blocked,
            blocked_sends=self._blocked_sends,
            put=self._put,
            taken=self._taken,
        )

    # -- putting ----------------------------------------------------------------------------

    def put(self, item: T, weight: int) -> bool:
        """Queue ``item`` if nobody is in line and it fits; return whether it did."""
        if self._senders:
            return False
        # _fits and append inlined: this is every put's way in (measured: the three calls
        # were ~15 % of an aggregated put's CPU).
        data = self._data
        occupied = len(data) + self._held + self._reserved
        total = self._weight + weight
        limit = self._max_weight
        if occupied >= self._capacity or not (limit is None or total <= limit or occupied == 0):
            return False
        data.append(item)
        self._put += 1
        if self._weights is not None:
            self._weights.append(weight)
        self._weight = total
        depth = len(data)
        # Plain comparisons, not max(): this runs once per item sent.
        if depth > self._peak:  # noqa: PLR1730
            self._peak = depth
        if depth + self._held > self._peak_occupied:  # noqa: PLR1730
            self._peak_occupied = depth + self._held
        if total > self._peak_weight:  # noqa: PLR1730
            self._peak_weight = total
        return True

    def put_many(
        self, items: Sequence[T], start: int, stop: int, weight: Callable[[T], int]
    ) -> int:
        """Queue ``items[start:stop]`` in order while they fit; return how many did (none
        while senders are in line). The same room as that many :meth:`put` calls, for a
        batch's cost of one call (measured on the producer's ``put_many``)."""
        if self._senders:
            return 0
        data, weights = self._data, self._weights
        room = self._capacity - (len(data) + self._held + self._reserved)
        limit, total = self._max_weight, self._weight
        batch = items[start : min(stop, start + max(room, 0))]
        item_weights = list(map(weight, batch))
        # How many fit, from a running sum of the weights (C calls, not a step per item):
        # ends[k] is the weight with the first k in. As in _fits, one item heavier than the
        # bound goes alone, into an empty mailbox.
        ends = list(accumulate(item_weights, initial=total))
        sent = len(batch)
        if limit is not None and ends[-1] > limit:
            sent = max(bisect_right(ends, limit) - 1, 0)
            if sent == 0 and batch and not (data or self._held or self._reserved):
                sent = 1
        if sent == 0:
            return 0
        data.extend(batch if sent == len(batch) else batch[:sent])
        if weights is not None:
            weights.extend(item_weights[:sent])
        total = ends[sent]
        self._put += sent
        self._weight = total
        depth = len(data)
        if depth > self._peak:  # noqa: PLR1730
            self._peak = depth
        if depth + self._held > self._peak_occupied:  # noqa: PLR1730
            self._peak_occupied = depth + self._held
        if total > self._peak_weight:  # noqa: PLR1730
            self._peak_weight = total
        return sent

    def append(self, item: T, weight: int = 0) -> None:
        """Queue ``item`` whose room is already made: granted by :meth:`wait_for_room` or
        freed by :meth:`evict_oldest`, with no await in between."""
        data = self._data
        data.append(item)
        self._put += 1
        if self._weights is not None:
            self._weights.append(weight)
        total = self._weight = self._weight + weight
        depth = len(data)
        if depth > self._peak:  # noqa: PLR1730
            self._peak = depth
        occupied = depth + self._held
        if occupied > self._peak_occupied:  # noqa: PLR1730
            self._peak_occupied = occupied
        if total > self._peak_weight:  # noqa: PLR1730
            self._peak_weight = total

    async def wait_for_room(self, weight: int) -> None:
        """Wait in line until room for an item of ``weight`` is granted, or the line is let
        go by :meth:`let_go`. On return the grant, if any, is given up again: the caller
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
            self._weight -= weight  # taken again by append

    def let_go(self) -> None:
        """Wake every sender in line without room (the mailbox is closing)."""
        while self._senders:
            self._senders.popleft().event.set()

    @property
    def senders_on_their_way(self) -> bool:
        """Senders woken or granted that have not run yet (or still in line)."""
        return bool(self._blocked or self._reserved)

    # -- taking -----------------------------------------------------------------------------

    def take(self) -> T:
        """Take the oldest queued item; ``hold``: it keeps its room until :meth:`release`.

        :raises IndexError: when nothing is queued (as ``deque.popleft``, so that the
            mailbox's receive pays no check of its own).
        """
        item = self._data.popleft()
        self._taken += 1
        if self._hold:
            self._held += 1
        else:
            if self._weights is not None:
                self._weight -= self._weights.popleft()
            if self._senders:
                self._wake_senders()
        return item

    def receive_held(self) -> list[T]:
        """``hold`` rooms: take every queued item at once, oldest first; each keeps its room
        until :meth:`release`; empty: ``[]``."""
        if not self._hold:
            raise RuntimeError(f"mailbox {self._name!r} does not hold received items")
        items = list(self._data)
        self._data.clear()
        self._taken += len(items)
        self._held += len(items)
        return items

    def evict_oldest(self) -> T:
        """Remove the oldest queued item to make room for one more (a drop policy); it is not
        counted as taken.

        :raises IndexError: when nothing is queued.
        """
        item = self._data.popleft()
        self._give_back_one()
        return item

    def purge(self, each: Callable[[T], None]) -> int:
        """Remove every queued item, oldest first, calling ``each`` on it; return how many.
        In a ``hold`` room a purged item still holds its room until released, like a taken
        one."""
        count = 0
        while self._data:
            item = self._data.popleft()
            self._give_back_one()
            each(item)
            count += 1
        self._wake_senders()
        return count

    def release(self, count: int = 1, weight: int = 0) -> None:
        """``hold`` rooms: ``count`` taken items of ``weight`` in total are done; their room
        goes to the senders waiting for it, first come first served.

        :raises RuntimeError: when more is released than was held.
        """
        if not self._hold:
            raise RuntimeError(f"mailbox {self._name!r} does not hold received items")
        self._held -= count
        self._weight -= weight
        if self._held < 0 or self._weight < 0:
            raise RuntimeError(f"mailbox {self._name!r}: released more than was held")
        self._wake_senders()

    # -- internals --------------------------------------------------------------------------

    def _give_back_one(self) -> None:
        """The oldest item left the queue without being taken: ``hold`` keeps its room until
        released, otherwise its weight is given back (the caller wakes the line)."""
        if self._hold:
            self._held += 1
        elif self._weights is not None:
            self._weight -= self._weights.popleft()

    def _fits(self, weight: int) -> bool:
        occupied = len(self._data) + self._held + self._reserved
        if occupied >= self._capacity:
            return False
        limit = self._max_weight
        # One item heavier than the bound goes alone, into an empty mailbox.
        return limit is None or self._weight + weight <= limit or occupied == 0

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
            with contextlib.suppress(ValueError):  # already let go by let_go()
                self._senders.remove(waiter)
            self._wake_senders()  # it may have been the head that held the others back
