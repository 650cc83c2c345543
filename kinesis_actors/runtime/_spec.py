"""The vocabulary of supervision: strategies, restart types, child specs and the escalation."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._actor import Actor
from ._letters import DeadLetter, FullPolicy
from ._mailbox import Mailbox

T = TypeVar("T")


class Strategy(enum.Enum):
    """Which children a supervisor restarts when one goes down (OTP's names)."""

    ONE_FOR_ONE = "one_for_one"
    """Only the child that went down."""
    ONE_FOR_ALL = "one_for_all"
    """Every child: the others are stopped in reverse order, then all start in order."""
    REST_FOR_ONE = "rest_for_one"
    """The child and every child started after it (they depend on it)."""


class StopOrder(enum.Enum):
    """How a supervisor stops several children at once (its shutdown, an escalation, a group
    restart)."""

    REVERSE = "reverse"
    """One at a time, the last started first (OTP's order): for children that depend on the
    ones started before them."""
    CONCURRENT = "concurrent"
    """All at once, each within its own bounds (OTP stops a ``simple_one_for_one``
    supervisor's children this way): for siblings that do not depend on each other, such as
    one reader per shard. Stopping N children then takes as long as the slowest one, not the
    sum."""


class IntensityScope(enum.Enum):
    """Whose restarts a supervisor's intensity counts."""

    SUPERVISOR = "supervisor"
    """All the children's together (OTP's): more than ``max_restarts`` restarts of any of
    them within ``period`` and the supervisor gives up."""
    CHILD = "child"
    """Each child's apart, every child with the whole budget (Akka's one-for-one): the
    supervisor gives up when one child restarted more than ``max_restarts`` times within
    ``period``. For many independent siblings (one reader per shard), where a cause they all
    meet at once (a network blip) must not add up to a give-up that no one of them would have
    reached alone, and where a shared budget would tolerate less the more siblings there are.
    Only with ``ONE_FOR_ONE``: under the other strategies a crash restarts siblings too."""


class Restart(enum.Enum):
    """When a child that went down is restarted."""

    PERMANENT = "permanent"
    """Always, even after a normal return."""
    TRANSIENT = "transient"
    """Only after a failure (an exception)."""
    TEMPORARY = "temporary"
    """Never; the child is removed when it ends."""


@dataclass(frozen=True)
class ChildSpec(Generic[T]):
    """How to run one supervised actor.

    ``factory`` builds a fresh behaviour for each incarnation. The mailbox (``capacity``,
    ``policy``, ``on_drop``) is created once, when the child is first started, and survives
    restarts; ``max_weight`` and ``hold`` are the mailbox's (see :class:`Mailbox`). A graceful
    stop closes the mailbox and gives the actor ``shutdown_timeout``
    seconds to drain before it is cancelled; ``on_stop`` is always bounded by
    ``cleanup_timeout``.

    Two other kinds of child have no mailbox of the supervisor's making:

    * ``mailbox=`` a mailbox made by the caller, for messages that exist before the child
      and outlive it (a shard's buffer: filled by the shard's reader, kept across the
      processor's restarts and across a ``run()`` that ends and starts again). The child
      receives from it as from its own; the supervisor never closes or purges it (its maker
      does), so stopping such a child is a cancellation after ``shutdown_timeout``.
      ``capacity``, ``policy``, ``on_drop``, ``max_weight`` and ``hold`` are then the
      mailbox's own and must be left at their defaults.
    * ``source=True``: a child that receives no messages, whose input is outside the runtime
      (a network stream). It gets no mailbox: its :class:`ActorRef` refuses sends
      (``TypeError``), its snapshot's ``mailbox`` is None, and it is stopped by
      cancellation.

    ``recoverable`` tells a crash that is expected from one that is an error: for an
    exception it accepts (a network failure that the next incarnation will retry), the
    supervisor logs one warning line without a traceback; any other crash is logged as an
    error with its traceback. Either way the child is restarted by its ``restart`` and the
    restart counts toward the intensity.
    """

    name: str
    factory: Callable[[], Actor[T]]
    restart: Restart = Restart.PERMANENT
    capacity: int = 64
    policy: FullPolicy = FullPolicy.BLOCK
    on_drop: Callable[[DeadLetter[T]], None] | None = None
    shutdown_timeout: float = 5.0
    cleanup_timeout: float = 1.0
    max_weight: int | None = None
    hold: bool = False
    mailbox: Mailbox[T] | None = None
    source: bool = False
    recoverable: Callable[[Exception], bool] | None = None

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ValueError(f"a child name must be non-empty and contain no '/': {self.name!r}")
        if self.shutdown_timeout < 0 or self.cleanup_timeout < 0:
            raise ValueError("timeouts must be >= 0")
        if self.mailbox is not None and self.source:
            raise ValueError("a source child has no mailbox: give mailbox= or source=True")
        if self.mailbox is not None or self.source:
            own = (self.capacity, self.policy, self.on_drop, self.max_weight, self.hold)
            if own != (64, FullPolicy.BLOCK, None, None, False):
                raise ValueError(
                    f"child {self.name!r}: capacity, policy, on_drop, max_weight and hold "
                    "describe a mailbox the supervisor makes; this child brings its own "
                    "(mailbox=) or has none (source=True)"
                )

    @property
    def own_mailbox(self) -> bool:
        """The supervisor makes this child's mailbox (and closes and purges it)."""
        return self.mailbox is None and not self.source


GRACE = 0.5
"""Extra time allowed for a cancelled child to finish after its cleanup timeout."""


def stop_bound(specs: Sequence[ChildSpec[Any]], order: StopOrder) -> float:
    """The longest a supervisor takes to stop ``specs`` by cancellation: each child gets its
    ``cleanup_timeout`` plus :data:`GRACE`, one after the other (``REVERSE``) or side by side
    (``CONCURRENT``), plus one :data:`GRACE` for the supervisor itself.

    A nested supervisor's ``cleanup_timeout`` is this bound, so every deadline fits inside the
    one around it.
    """
    budgets = [spec.cleanup_timeout + GRACE for spec in specs]
    if order is StopOrder.CONCURRENT:
        return max(budgets, default=0.0) + GRACE
    return sum(budgets) + GRACE


class ActorExited(Exception):
    """A permanent child returned on its own; recorded as the cause of its restart."""


class RestartIntensityExceeded(Exception):
    """A supervisor gave up: more than ``max_restarts`` restarts within ``period`` seconds.

    Its children were stopped in its stop order (:class:`StopOrder`) before this was raised.
    ``causes`` holds the exceptions behind the restarts in the window, oldest first; the last
    one is also the ``__cause__``.
    """

    def __init__(
        self, supervisor: str, max_restarts: int, period: float, causes: Sequence[Exception]
    ) -> None:
        self.supervisor = supervisor
        self.max_restarts = max_restarts
        self.period = period
        self.causes = list(causes)
        summary = "; ".join(repr(cause) for cause in self.causes[-3:])
        super().__init__(
            f"supervisor {supervisor!r} gave up after more than {max_restarts} restart(s) "
            f"within {period} s (last causes: {summary})"
        )
        if self.causes:
            self.__cause__ = self.causes[-1]
