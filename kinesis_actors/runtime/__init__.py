"""The actor runtime: bounded mailboxes, credit-based demand, supervised actors, a sync facade.

Everything a subscription, processor or producer queue runs on, usable on its own:

* :class:`Mailbox` - bounded, with an explicit :class:`FullPolicy`, statistics and a control
  lane that overtakes data; optionally bounded in weight (bytes) too, and holding each
  received item's room until it is released (the producer's queue).
* :class:`Credits` / :class:`CreditGate` / :func:`wait_any` - "request n after consuming", so
  a network reader never awaits a full mailbox.
* :class:`Actor`, :func:`actor`, :class:`ActorRef` - behaviours and their stable addresses.
* :class:`Supervisor`, :class:`ChildSpec`, :class:`Strategy`, :class:`Restart`,
  :class:`Backoff`, :class:`RestartIntensityExceeded`, :class:`StopOrder`,
  :class:`IntensityScope` - OTP supervision on anyio, every stop bounded (:func:`stop_bound`).
* :class:`BlockingRuntime` - the same from synchronous code, with batched sends.
* :class:`SupervisorSnapshot` - the tree as plain data.
* :func:`unwrap_sole` - at an API edge, a task group's group of one exception raised as that
  exception, so a user's ``KeyError`` is caught by ``except KeyError``.

Runs on asyncio and trio (anyio only).
"""

from ._actor import Actor, ActorContext, ActorRef, actor
from ._clock import Clock, ManualClock, MonotonicClock
from ._credits import CreditError, CreditGate, Credits, wait_any
from ._groups import raise_as_itself, sole_exception, unwrap_sole
from ._intensity import Backoff, RestartBackoff, RestartIntensity
from ._letters import DeadLetter, DropReason, FullPolicy, MailboxClosed, MailboxFull, MailboxStats
from ._mailbox import Mailbox
from ._portal import BatchSender, BlockingRuntime
from ._snapshot import ChildSnapshot, SupervisorSnapshot
from ._spec import (
    ActorExited,
    ChildSpec,
    IntensityScope,
    Restart,
    RestartIntensityExceeded,
    StopOrder,
    Strategy,
    stop_bound,
)
from ._supervisor import Supervisor
from ._tree import SupervisorActor, supervisor_spec

__all__ = [
    "Actor",
    "ActorContext",
    "ActorExited",
    "ActorRef",
    "Backoff",
    "BatchSender",
    "BlockingRuntime",
    "ChildSnapshot",
    "ChildSpec",
    "Clock",
    "CreditError",
    "CreditGate",
    "Credits",
    "DeadLetter",
    "DropReason",
    "FullPolicy",
    "IntensityScope",
    "Mailbox",
    "MailboxClosed",
    "MailboxFull",
    "MailboxStats",
    "ManualClock",
    "MonotonicClock",
    "Restart",
    "RestartBackoff",
    "RestartIntensity",
    "RestartIntensityExceeded",
    "StopOrder",
    "Strategy",
    "Supervisor",
    "SupervisorActor",
    "SupervisorSnapshot",
    "actor",
    "raise_as_itself",
    "sole_exception",
    "stop_bound",
    "supervisor_spec",
    "unwrap_sole",
    "wait_any",
]
