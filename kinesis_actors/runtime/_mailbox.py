"""A bounded mailbox with an explicit policy for when it is full.

Built on a deque and anyio events rather than a memory object stream, because the stream can
neither report its peak depth and blocked time, nor let control signals overtake data, nor say
what happened to the items it drops.

:class:`Mailbox` holds the queue and its control lane, the full policies, receiving, close,
purge and the statistics; its room - the bound, what takes room and the line of senders
waiting for it, with the invariants that make the bound hold - is its base
:class:`~._room.Room`'s. ``send`` either queues its item and returns, or raises without
queuing it.

Two options make it the producer's queue:

* ``max_weight`` bounds the items' total weight as well as their number (a weight is given per
  send, bytes say). An item heavier than the bound alone is still accepted into an empty
  mailbox, so it cannot block forever.
* ``hold``: a received item keeps its room (its slot and its weight) until the receiver calls
  :meth:`Mailbox.release`, for a receiver whose work on an item ends later than the receive (a
  record occupies the producer's queue until it is acknowledged). Blocked senders are then
  woken by the releases, in first-in, first-out order.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import TypeVar

import anyio
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from .._deprecated import renamed
from ._clock import MONOTONIC, Clock
from ._letters import (
    DeadLetter,
    DropReason,
    FullPolicy,
    MailboxClosed,
    MailboxFull,
    MailboxStats,
)
from ._room import Room

T = TypeVar("T")

logger = logging.getLogger("kinesis_actors.runtime")

YIELD_EVERY = 16
"""Operations that did not wait between two scheduler yields (see ``Mailbox._fair_share``)."""


class Mailbox(Room[T]):
    """A bounded FIFO with a priority control lane.

    Receivers always get control items before data. ``close()`` refuses new items; receivers
    drain what is queued and then see the end of the stream. Not thread-safe: use it from the
    event loop that owns it (the sync facade gets there through a blocking portal).
    """

    def __init__(
        self,
        capacity: int,
        policy: FullPolicy = FullPolicy.BLOCK,
        *,
        name: str = "mailbox",
        on_drop: Callable[[DeadLetter[T]], None] | None = None,
        control_capacity: int = 16,
        clock: Clock = MONOTONIC,
        max_weight: int | None = None,
        hold: bool = False,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if control_capacity < 1:
            raise ValueError(f"control_capacity must be at least 1, got {control_capacity}")
        if max_weight is not None and max_weight < 1:
            raise ValueError(f"max_weight must be at least 1, got {max_weight}")
        if (max_weight is not None or hold) and policy not in (FullPolicy.BLOCK, FullPolicy.FAIL):
            raise ValueError("max_weight and hold need the BLOCK or FAIL policy")
        super().__init__(capacity, name=name, clock=clock, max_weight=max_weight, hold=hold)
        self._control_capacity = control_capacity
        self._policy = policy
        self._on_drop = on_drop
        # Bounded by `control_capacity`, checked in send_control.
        self._control: deque[T] = deque()
        self._not_empty: anyio.Event | None = None
        self._closed = False
        self._unyielded = 0
        # statistics
        self._peak = 0
        self._peak_occupied = 0
        self._peak_weight = 0
        self._sent = 0
        self._dropped = 0
        self._rejected = 0
        self._dead_letters = 0

    # -- properties -------------------------------------------------------------------------

    @property
    def policy(self) -> FullPolicy:
        return self._policy

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"<Mailbox {self._name!r} {len(self._data)}/{self._capacity} "
            f"{self._policy.value}{' closed' if self._closed else ''}>"
        )

    # -- sending ----------------------------------------------------------------------------

    async def send(self, item: T, weight: int = 0) -> None:
        """Queue ``item`` (of ``weight``, counted against ``max_weight``), applying the full
        policy; with ``BLOCK``, wait for room.

        :raises MailboxFull: when full under the ``FAIL`` policy.
        :raises MailboxClosed: when the mailbox is (or gets) closed; the item is not queued.
        """
        await checkpoint_if_cancelled()
        if self._closed or self._has_room(weight) or self._policy is not FullPolicy.BLOCK:
            self.send_nowait(item, weight)
            await self._fair_share()
            return
        await self._wait_for_room(weight)
        if self._closed:
            raise MailboxClosed(self._name)
        self._append(item, weight)

    def send_nowait(self, item: T, weight: int = 0) -> None:
        """Queue ``item`` without waiting, applying the full policy.

        Under ``BLOCK`` a full mailbox raises :class:`MailboxFull` instead of waiting. A reader
        holding a credit uses this: the credit guarantees room, so a failure here is a bug.
        """
        if not self.try_send(item, weight) and self._policy in (
            FullPolicy.BLOCK,
            FullPolicy.FAIL,
        ):
            raise MailboxFull(f"mailbox {self._name!r} is full ({self._capacity})")

    def try_send(self, item: T, weight: int = 0) -> bool:
        """Queue ``item`` without waiting; return whether it is now queued.

        Full under ``BLOCK`` or ``FAIL``: nothing happens (counted as rejected), False.
        Full under ``DROP_OLDEST``: the oldest item is evicted, True.
        Full under ``DROP_NEWEST``: ``item`` is discarded, False.

        :raises MailboxClosed: when the mailbox is closed.
        """
        if self._closed:
            raise MailboxClosed(self._name)
        if not self._senders:
            # _fits and _append inlined: this is every put's way in (measured: the three
            # calls were ~15 % of an aggregated put's CPU).
            data = self._data
            occupied = len(data) + self._held + self._reserved
            total = self._weight + weight
            limit = self._max_weight
            if occupied < self._capacity and (limit is None or total <= limit or occupied == 0):
                data.append(item)
                self._sent += 1
                if self._weights is not None:
                    self._weights.append(weight)
                self._weight = total
                depth = len(data)
                if depth > self._peak:  # noqa: PLR1730
                    self._peak = depth
                if depth + self._held > self._peak_occupied:  # noqa: PLR1730
                    self._peak_occupied = depth + self._held
                if total > self._peak_weight:  # noqa: PLR1730
                    self._peak_weight = total
                if self._not_empty is not None:
                    self._notify_receivers()
                return True
        if self._policy is FullPolicy.DROP_OLDEST and self._data:
            oldest = self._data.popleft()
            self._dropped += 1
            self.dead_letter(oldest, DropReason.DROPPED_OLDEST)
            self._append(item)
            return True
        if self._policy is FullPolicy.DROP_NEWEST:
            self._dropped += 1
            self.dead_letter(item, DropReason.DROPPED_NEWEST)
            return False
        self._rejected += 1
        return False

    def try_send_many(
        self, items: Sequence[T], start: int, stop: int, weight: Callable[[T], int]
    ) -> int:
        """Queue ``items[start:stop]`` in order while they fit, without waiting; return how many.

        For ``BLOCK`` and ``FAIL`` mailboxes (the others take :meth:`try_send` one by one): the
        same room as that many :meth:`try_send` calls, for a batch's cost of one call (measured
        on the producer's ``put_many``). Stops at the first item that does not fit.

        :raises MailboxClosed: when the mailbox is closed.
        :raises IndexError: when ``stop`` is past the end of ``items``.
        """
        if self._closed:
            raise MailboxClosed(self._name)
        if stop > len(items):
            raise IndexError(f"try_send_many: stop {stop} is past {len(items)} items")
        if self._senders or self._policy not in (FullPolicy.BLOCK, FullPolicy.FAIL):
            sent = 0
            for index in range(start, stop):
                if not self.try_send(items[index], weight(items[index])):
                    break
                sent += 1
            return sent
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
        if sent:
            data.extend(batch if sent == len(batch) else batch[:sent])
            if weights is not None:
                weights.extend(item_weights[:sent])
            total = ends[sent]
        index, wanted = start + sent, stop
        if index < wanted:
            self._rejected += 1  # the item that did not fit, as try_send counts it
        if sent == 0:
            return 0
        self._sent += sent
        self._weight = total
        depth = len(data)
        if depth > self._peak:  # noqa: PLR1730
            self._peak = depth
        if depth + self._held > self._peak_occupied:  # noqa: PLR1730
            self._peak_occupied = depth + self._held
        if total > self._peak_weight:  # noqa: PLR1730
            self._peak_weight = total
        self._notify_receivers()
        return sent

    def send_control(self, item: T) -> None:
        """Queue ``item`` on the control lane, delivered before any data.

        Never waits: control must not queue behind data nor behind blocked senders.

        :raises MailboxFull: when the (small, bounded) control lane is full.
        :raises MailboxClosed: when the mailbox is closed.
        """
        if self._closed:
            raise MailboxClosed(self._name)
        if len(self._control) >= self._control_capacity:
            self._rejected += 1
            raise MailboxFull(f"control lane of {self._name!r} is full ({self._control_capacity})")
        self._control.append(item)
        self._notify_receivers()

    # -- receiving --------------------------------------------------------------------------

    async def receive(self) -> T:
        """Take the next item: control first, then data in FIFO order.

        :raises anyio.EndOfStream: when closed and drained.
        """
        await checkpoint_if_cancelled()
        while True:
            try:
                item = self.receive_nowait()
            except anyio.WouldBlock:
                if self._not_empty is None:
                    self._not_empty = anyio.Event()
                # Woken receivers re-check; a cancelled one has taken nothing.
                await self._not_empty.wait()
            else:
                await self._fair_share()
                return item

    def receive_nowait(self) -> T:
        """Take the next item if there is one.

        :raises anyio.WouldBlock: when empty and open.
        :raises anyio.EndOfStream: when closed and drained.
        """
        if self._control:
            self._received += 1
            return self._control.popleft()
        if self._data:
            item = self._data.popleft()
            self._received += 1
            if self._hold:
                self._held += 1  # its room comes back with release()
            else:
                if self._weights is not None:
                    self._weight -= self._weights.popleft()
                self._wake_senders()
            return item
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    def __aiter__(self) -> Mailbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new items; blocked senders get :class:`MailboxClosed`; receivers drain.

        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        while self._senders:
            self._senders.popleft().event.set()
        self._notify_receivers()

    def reopen(self) -> None:
        """Accept items again after :meth:`close`, for a stream that starts over (a shard
        rewound to its last commit after its reader met the shard's end). Statistics carry
        on.

        :raises RuntimeError: unless the mailbox is empty, holds nothing and no sender woken
            by the close is still on its way: a stream starts over from a purged mailbox,
            never on top of what the old one left.
        """
        if self._control or self._data or self._held or self._weight:
            raise RuntimeError(f"mailbox {self._name!r}: reopen needs an empty mailbox")
        if self._blocked or self._reserved:
            # Woken by close() without room: reopened, they would append past capacity.
            raise RuntimeError(f"mailbox {self._name!r}: reopen with senders still waking")
        self._closed = False

    def purge(self) -> int:
        """Remove every queued item, reporting each as undelivered; return how many.

        Used at final stop so nothing is lost silently. In a ``hold`` mailbox a purged item
        still holds its room until released, like a received one: the dead-letter hook's
        owner settles it.
        """
        count = 0
        while self._control or self._data:
            if self._control:
                item = self._control.popleft()
            else:
                item = self._data.popleft()
                if self._hold:
                    self._held += 1
                elif self._weights is not None:
                    self._weight -= self._weights.popleft()
            self.dead_letter(item, DropReason.UNDELIVERED)
            count += 1
        self._wake_senders()
        return count

    def dead_letter(self, item: T, reason: DropReason, error: BaseException | None = None) -> None:
        """Report an item this mailbox could not deliver to the dead-letter hook."""
        self._dead_letters += 1
        if self._on_drop is None:
            return
        try:
            self._on_drop(DeadLetter(self._name, item, reason, error))
        except Exception:
            # An observer must not break the flow it observes; say so loudly instead.
            logger.exception("[%s] dead-letter hook failed", self._name)

    def statistics(self) -> MailboxStats:
        """The mailbox now, as a frozen :class:`MailboxStats` (trio's ``statistics()``)."""
        blocked = self._blocked_seconds
        if self._blocked:
            blocked += self._blocked * self._clock.now() - self._blocked_since_sum
        return MailboxStats(
            name=self._name,
            capacity=self._capacity,
            policy=self._policy.value,
            depth=len(self._data),
            peak_depth=self._peak,
            control_depth=len(self._control),
            senders_waiting=self._blocked,
            blocked_seconds=blocked,
            sent=self._sent,
            received=self._received,
            dropped=self._dropped,
            rejected=self._rejected,
            dead_letters=self._dead_letters,
            closed=self._closed,
            held=self._held,
            weight=self._weight,
            max_weight=self._max_weight,
            peak_occupied=self._peak_occupied,
            peak_weight=self._peak_weight,
            blocked_sends=self._blocked_sends,
        )

    def stats(self) -> MailboxStats:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed("Mailbox.stats()", "Mailbox.statistics()")
        return self.statistics()

    # -- internals --------------------------------------------------------------------------

    async def _fair_share(self) -> None:
        """Yield to the scheduler every few operations that did not have to wait.

        A yield per operation (trio's rule) costs an event-loop iteration each: it cut a
        two-task chain to a third of its items a second (measured, ``docs/runtime.md``); never
        yielding would let a producer that always finds room (or a
        drop policy) starve the loop. Cancellation is still checked on every call; this
        yield is shielded, so an operation that completed is never reported as cancelled.
        """
        self._unyielded += 1
        if self._unyielded >= YIELD_EVERY:
            self._unyielded = 0
            await cancel_shielded_checkpoint()

    def _append(self, item: T, weight: int = 0) -> None:
        data = self._data
        data.append(item)
        self._sent += 1
        if self._weights is not None:
            self._weights.append(weight)
        total = self._weight = self._weight + weight
        depth = len(data)
        # Plain comparisons, not max(): this runs once per item sent.
        if depth > self._peak:  # noqa: PLR1730
            self._peak = depth
        occupied = depth + self._held
        if occupied > self._peak_occupied:  # noqa: PLR1730
            self._peak_occupied = occupied
        if total > self._peak_weight:  # noqa: PLR1730
            self._peak_weight = total
        if self._not_empty is not None:
            self._notify_receivers()

    def _notify_receivers(self) -> None:
        if self._not_empty is not None:
            self._not_empty.set()
            self._not_empty = None
