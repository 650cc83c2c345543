"""A bounded mailbox with an explicit policy for when it is full.

Built on a deque and anyio events rather than a memory object stream, because the stream can
neither report its peak depth and blocked time, nor let control signals overtake data, nor say
what happened to the items it drops.

:class:`Mailbox` holds the control lane, the full policies, receiving, close, purge and the
statistics; its queue of data and its room - the bound, what takes room and the line of
senders waiting for it, with the invariants that make the bound hold - are a
:class:`~._room.Room` it owns and calls. ``send`` either queues its item and returns, or
raises without queuing it.

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
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

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


class Mailbox(Generic[T]):
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
        self._name = name
        self._room: Room[T] = Room(
            capacity, name=name, clock=clock, max_weight=max_weight, hold=hold
        )
        self._max_weight = max_weight
        self._control_capacity = control_capacity
        self._policy = policy
        self._on_drop = on_drop
        # Bounded by `control_capacity`, checked in send_control.
        self._control: deque[T] = deque()
        self._not_empty: anyio.Event | None = None
        self._closed = False
        self._unyielded = 0
        # statistics (the room counts the data it puts and takes)
        self._control_received = 0
        self._dropped = 0
        self._rejected = 0
        self._dead_letters = 0

    # -- properties -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def capacity(self) -> int:
        return self._room.capacity

    @property
    def policy(self) -> FullPolicy:
        return self._policy

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """Queued data items (the control lane is not counted)."""
        return len(self._room)

    @property
    def occupied(self) -> int:
        """Items taking room: queued, held (``hold``) and granted to a blocked sender."""
        return self._room.occupied

    @property
    def weight(self) -> int:
        """Their total weight."""
        return self._room.weight

    @property
    def senders_waiting(self) -> int:
        """Senders blocked for room."""
        return self._room.senders_waiting

    def longest_wait(self) -> float:
        """Seconds the first blocked sender has been waiting (0.0 when none is)."""
        return self._room.longest_wait()

    def __repr__(self) -> str:
        return (
            f"<Mailbox {self._name!r} {len(self._room)}/{self._room.capacity} "
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
        if self._closed or self._policy is not FullPolicy.BLOCK:
            self.send_nowait(item, weight)
            await self._fair_share()
            return
        room = self._room
        if room.put(item, weight):
            if self._not_empty is not None:
                self._notify_receivers()
            await self._fair_share()
            return
        await room.wait_for_room(weight)
        if self._closed:
            raise MailboxClosed(self._name)
        room.append(item, weight)
        self._notify_receivers()

    def send_nowait(self, item: T, weight: int = 0) -> None:
        """Queue ``item`` without waiting, applying the full policy.

        Under ``BLOCK`` a full mailbox raises :class:`MailboxFull` instead of waiting. A reader
        holding a credit uses this: the credit guarantees room, so a failure here is a bug.
        """
        if not self.try_send(item, weight) and self._policy in (
            FullPolicy.BLOCK,
            FullPolicy.FAIL,
        ):
            raise MailboxFull(f"mailbox {self._name!r} is full ({self._room.capacity})")

    def try_send(self, item: T, weight: int = 0) -> bool:
        """Queue ``item`` without waiting; return whether it is now queued.

        Full under ``BLOCK`` or ``FAIL``: nothing happens (counted as rejected), False.
        Full under ``DROP_OLDEST``: the oldest item is evicted, True.
        Full under ``DROP_NEWEST``: ``item`` is discarded, False.

        :raises MailboxClosed: when the mailbox is closed.
        """
        if self._closed:
            raise MailboxClosed(self._name)
        if self._room.put(item, weight):
            if self._not_empty is not None:
                self._notify_receivers()
            return True
        if self._policy is FullPolicy.DROP_OLDEST and len(self._room):
            oldest = self._room.evict_oldest()
            self._dropped += 1
            self.dead_letter(oldest, DropReason.DROPPED_OLDEST)
            self._room.append(item)
            self._notify_receivers()
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
        if self._policy not in (FullPolicy.BLOCK, FullPolicy.FAIL):
            sent = 0
            for index in range(start, stop):
                if not self.try_send(items[index], weight(items[index])):
                    break
                sent += 1
            return sent
        sent = self._room.put_many(items, start, stop, weight)
        if start + sent < stop:
            self._rejected += 1  # the item that did not fit, as try_send counts it
        if sent:
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
            self._control_received += 1
            return self._control.popleft()
        try:
            return self._room.take()
        except IndexError:
            pass
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    def receive_held(self) -> list[T]:
        """``hold`` mailboxes: take every queued data item at once, oldest first (a batch
        intake, one call for all instead of one ``receive_nowait`` each; the control lane
        is left to that). Each keeps its room until :meth:`release`; empty: ``[]``."""
        return self._room.receive_held()

    def release(self, count: int = 1, weight: int = 0) -> None:
        """``hold`` mailboxes: ``count`` received items of ``weight`` in total are done; their
        room goes to the senders waiting for it, first come first served.

        :raises RuntimeError: when more is released than was held.
        """
        self._room.release(count, weight)

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
        self._room.let_go()
        self._notify_receivers()

    def reopen(self) -> None:
        """Accept items again after :meth:`close`, for a stream that starts over (a shard
        rewound to its last commit after its reader met the shard's end). Statistics carry
        on.

        :raises RuntimeError: unless the mailbox is empty, holds nothing and no sender woken
            by the close is still on its way: a stream starts over from a purged mailbox,
            never on top of what the old one left.
        """
        if self._control or not self._room.empty:
            raise RuntimeError(f"mailbox {self._name!r}: reopen needs an empty mailbox")
        if self._room.senders_on_their_way:
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
        while self._control:
            self.dead_letter(self._control.popleft(), DropReason.UNDELIVERED)
            count += 1
        return count + self._room.purge(self._undelivered)

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
        room = self._room.statistics()
        return MailboxStats(
            name=self._name,
            capacity=self._room.capacity,
            policy=self._policy.value,
            depth=room.depth,
            peak_depth=room.peak_depth,
            control_depth=len(self._control),
            senders_waiting=room.senders_waiting,
            blocked_seconds=room.blocked_seconds,
            sent=room.put,
            received=room.taken + self._control_received,
            dropped=self._dropped,
            rejected=self._rejected,
            dead_letters=self._dead_letters,
            closed=self._closed,
            held=room.held,
            weight=room.weight,
            max_weight=self._max_weight,
            peak_occupied=room.peak_occupied,
            peak_weight=room.peak_weight,
            blocked_sends=room.blocked_sends,
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

    def _undelivered(self, item: T) -> None:
        self.dead_letter(item, DropReason.UNDELIVERED)

    def _notify_receivers(self) -> None:
        if self._not_empty is not None:
            self._not_empty.set()
            self._not_empty = None
