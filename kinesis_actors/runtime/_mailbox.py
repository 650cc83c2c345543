"""A bounded mailbox with an explicit policy for when it is full.

Built on a deque and anyio events rather than a memory object stream, because the stream can
neither report its peak depth and blocked time, nor let control signals overtake data, nor say
what happened to the items it drops.

Two invariants carry the design:

* ``depth + reserved <= capacity`` at every await point, where *reserved* counts blocked senders
  that were granted a slot but have not run yet. A bound nobody can exceed is the point.
* ``send`` either queues its item and returns, or raises without queuing it. A blocked sender
  that is cancelled withdraws its item, even if it had already been granted a slot: the slot is
  handed to the next waiting sender instead.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from ._clock import MONOTONIC, Clock

T = TypeVar("T")

logger = logging.getLogger("kinesis_actors.runtime")

YIELD_EVERY = 16
"""Operations that did not wait between two scheduler yields (see ``Mailbox._fair_share``)."""


class FullPolicy(enum.Enum):
    """What a send does when the mailbox is full."""

    BLOCK = "block"
    """The sender awaits room (``try_send`` returns False)."""
    FAIL = "fail"
    """The sender gets :class:`MailboxFull`."""
    DROP_OLDEST = "drop_oldest"
    """The oldest queued item is evicted to make room; it goes to the dead-letter hook."""
    DROP_NEWEST = "drop_newest"
    """The item being sent is discarded; it goes to the dead-letter hook."""


class DropReason(enum.Enum):
    """Why an item ended up as a dead letter."""

    DROPPED_OLDEST = "dropped_oldest"
    DROPPED_NEWEST = "dropped_newest"
    UNDELIVERED = "undelivered"
    """Still queued when the mailbox was purged at final stop."""
    LOST_IN_FLIGHT = "lost_in_flight"
    """Being handled when its actor crashed or was cancelled."""


class MailboxFull(Exception):
    """The mailbox (or its control lane) is full and the policy says not to wait."""


class MailboxClosed(Exception):
    """The mailbox was closed: it accepts nothing more."""


@dataclass(frozen=True)
class DeadLetter(Generic[T]):
    """An item the mailbox could not deliver, and why."""

    mailbox: str
    item: T
    reason: DropReason
    error: BaseException | None = None


@dataclass(frozen=True)
class MailboxStats:
    """A point-in-time view of one mailbox. Counters are totals since creation."""

    name: str
    capacity: int
    policy: str
    depth: int
    peak_depth: int
    control_depth: int
    senders_waiting: int
    blocked_seconds: float
    """Total time senders spent blocked, including waits still in progress."""
    sent: int
    received: int
    dropped: int
    """Items discarded by a drop policy."""
    rejected: int
    """Sends refused with :class:`MailboxFull` or a False ``try_send``."""
    dead_letters: int
    """Items reported to the dead-letter hook, for any reason."""
    closed: bool


class _SendWaiter:
    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False


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
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if control_capacity < 1:
            raise ValueError(f"control_capacity must be at least 1, got {control_capacity}")
        self._capacity = capacity
        self._control_capacity = control_capacity
        self._policy = policy
        self._name = name
        self._on_drop = on_drop
        self._clock = clock
        # Bounded by `capacity`: every append is preceded by a room check.
        self._data: deque[T] = deque()
        # Bounded by `control_capacity`, checked in send_control.
        self._control: deque[T] = deque()
        # Bounded by the number of tasks blocked in send; each holds one entry.
        self._senders: deque[_SendWaiter] = deque()
        self._reserved = 0
        self._not_empty: anyio.Event | None = None
        self._closed = False
        self._unyielded = 0
        # statistics
        self._peak = 0
        self._blocked = 0
        self._blocked_seconds = 0.0
        self._blocked_since_sum = 0.0
        self._sent = 0
        self._received = 0
        self._dropped = 0
        self._rejected = 0
        self._dead_letters = 0

    # -- properties -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def policy(self) -> FullPolicy:
        return self._policy

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """Queued data items (the control lane is not counted)."""
        return len(self._data)

    def __repr__(self) -> str:
        return (
            f"<Mailbox {self._name!r} {len(self._data)}/{self._capacity} "
            f"{self._policy.value}{' closed' if self._closed else ''}>"
        )

    # -- sending ----------------------------------------------------------------------------

    async def send(self, item: T) -> None:
        """Queue ``item``, applying the full policy; with ``BLOCK``, wait for room.

        :raises MailboxFull: when full under the ``FAIL`` policy.
        :raises MailboxClosed: when the mailbox is (or gets) closed; the item is not queued.
        """
        await checkpoint_if_cancelled()
        if self._closed or self._has_room() or self._policy is not FullPolicy.BLOCK:
            self.send_nowait(item)
            await self._fair_share()
            return
        waiter = _SendWaiter()
        self._senders.append(waiter)
        self._blocked += 1
        started = self._clock.now()
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
        if self._closed:
            raise MailboxClosed(self._name)
        self._append(item)

    def send_nowait(self, item: T) -> None:
        """Queue ``item`` without waiting, applying the full policy.

        Under ``BLOCK`` a full mailbox raises :class:`MailboxFull` instead of waiting. A reader
        holding a credit uses this: the credit guarantees room, so a failure here is a bug.
        """
        if not self.try_send(item) and self._policy in (FullPolicy.BLOCK, FullPolicy.FAIL):
            raise MailboxFull(f"mailbox {self._name!r} is full ({self._capacity})")

    def try_send(self, item: T) -> bool:
        """Queue ``item`` without waiting; return whether it is now queued.

        Full under ``BLOCK`` or ``FAIL``: nothing happens (counted as rejected), False.
        Full under ``DROP_OLDEST``: the oldest item is evicted, True.
        Full under ``DROP_NEWEST``: ``item`` is discarded, False.

        :raises MailboxClosed: when the mailbox is closed.
        """
        if self._closed:
            raise MailboxClosed(self._name)
        if self._has_room():
            self._append(item)
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

    def purge(self) -> int:
        """Remove every queued item, reporting each as undelivered; return how many.

        Used at final stop so nothing is lost silently.
        """
        count = 0
        while self._control or self._data:
            lane = self._control if self._control else self._data
            self.dead_letter(lane.popleft(), DropReason.UNDELIVERED)
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

    def stats(self) -> MailboxStats:
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
        )

    # -- internals --------------------------------------------------------------------------

    async def _fair_share(self) -> None:
        """Yield to the scheduler every few operations that did not have to wait.

        A yield per operation (trio's rule) costs an event-loop iteration each and divides
        throughput by ten; never yielding would let a producer that always finds room (or a
        drop policy) starve the loop. Cancellation is still checked on every call; this
        yield is shielded, so an operation that completed is never reported as cancelled.
        """
        self._unyielded += 1
        if self._unyielded >= YIELD_EVERY:
            self._unyielded = 0
            await cancel_shielded_checkpoint()

    def _has_room(self) -> bool:
        return not self._senders and len(self._data) + self._reserved < self._capacity

    def _append(self, item: T) -> None:
        self._data.append(item)
        self._sent += 1
        self._peak = max(self._peak, len(self._data))
        self._notify_receivers()

    def _notify_receivers(self) -> None:
        if self._not_empty is not None:
            self._not_empty.set()
            self._not_empty = None

    def _wake_senders(self) -> None:
        while self._senders and len(self._data) + self._reserved < self._capacity:
            waiter = self._senders.popleft()
            waiter.granted = True
            self._reserved += 1
            waiter.event.set()

    def _withdraw(self, waiter: _SendWaiter) -> None:
        if waiter.granted:
            # Granted a slot but cancelled before using it: pass the slot on.
            waiter.granted = False
            self._reserved -= 1
            self._wake_senders()
        else:
            with contextlib.suppress(ValueError):  # already released by close()
                self._senders.remove(waiter)
