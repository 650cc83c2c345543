"""The mailbox's vocabulary: its full policies, why an item became a dead letter, its two
errors and its statistics (a frozen snapshot, like every ``statistics()`` of the runtime)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


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


class MailboxFull(anyio.WouldBlock):
    """The mailbox (or its control lane) is full and the policy says not to wait.

    An :class:`anyio.WouldBlock`, as ``receive_nowait`` raises on an empty mailbox: one
    ``except WouldBlock`` serves both sides, as with anyio's own streams."""


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
    held: int = 0
    """Received items still holding their room (``hold`` mailboxes), not yet released."""
    weight: int = 0
    """Total weight of the queued, held and granted items."""
    max_weight: int | None = None
    peak_occupied: int = 0
    """The most items queued and held at once."""
    peak_weight: int = 0
    blocked_sends: int = 0
    """Sends that had to wait for room."""


class SendWaiter:
    """A sender blocked for room: its weight, since when, and whether room was granted."""

    __slots__ = ("event", "granted", "since", "weight")

    def __init__(self, weight: int, since: float) -> None:
        self.event = anyio.Event()
        self.granted = False
        self.weight = weight
        self.since = since
