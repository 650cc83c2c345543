"""A supervised child: its slot, its incarnations, and how one incarnation is run and stopped.

A :class:`Slot` is a child as its :class:`~._supervisor.Supervisor` knows it: the spec, its
mailbox (which outlives incarnations, so messages queued across a restart are kept; owned
and closed by the slot when the supervisor made it, not when the caller passed one in; a
source child has none),
its restart count, backoff and last failure. An :class:`Incarnation` is one run of it, a task
in the supervisor's task group. What happens to one child is here: running an incarnation
(so that no ``Exception`` escapes into the group: its exit is handed to the supervisor's
decision loop instead), stopping it now or gracefully, each within its deadline, and the
final stop, which reports whatever is still queued. Which children to start, restart or stop,
and in which order, is the supervisor's.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import TaskStatus

from ._actor import ActorContext, ActorLog, ActorRef, logger, serve
from ._intensity import RestartBackoff, RestartIntensity
from ._letters import DropReason
from ._mailbox import Mailbox
from ._spec import GRACE, ChildSpec

__all__ = ["ChildState", "Incarnation", "Slot"]

T = TypeVar("T")


class ChildState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Incarnation:
    __slots__ = ("cancelled", "finished", "number", "scope", "started")

    def __init__(self, number: int) -> None:
        self.number = number
        self.scope: anyio.CancelScope | None = None
        self.finished = anyio.Event()
        self.started = False
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()


class Slot(Generic[T]):
    """A child as the supervisor knows it; outlives incarnations, like its mailbox.

    Every field is written here alone: the supervisor moves a slot through its states with
    the methods below (:meth:`begin`, :meth:`ended`, :meth:`schedule_restart`, ...), and its
    incarnation's task with :meth:`run`'s readiness, so a state change has one place to look.
    """

    def __init__(
        self,
        spec: ChildSpec[T],
        path: str,
        backoff: RestartBackoff,
        *,
        intensity: RestartIntensity | None = None,
    ) -> None:
        self.spec = spec
        self.path = path
        # None for a source; the caller's for a child that brings its own (not ours to close).
        self.mailbox: Mailbox[T] | None = spec.mailbox
        if spec.own_mailbox:
            self.mailbox = Mailbox(
                spec.capacity,
                spec.policy,
                name=path,
                on_drop=spec.on_drop,
                max_weight=spec.max_weight,
                hold=spec.hold,
            )
        self.ref = ActorRef(path, self.mailbox)
        self.backoff = backoff
        self.log = ActorLog(logger, {"actor": path})
        self.state = ChildState.STARTING
        self.incarnation: Incarnation | None = None
        self.behaviour: Any = None
        self.restarts = 0
        #: Its own restart budget, under ``IntensityScope.CHILD`` (None: the supervisor's).
        self.intensity = intensity
        self.last_failure: Exception | None = None
        self.restart_due: float | None = None

    # -- the supervisor's transitions ---------------------------------------------------------

    def begin(self) -> Incarnation:
        """A new incarnation, about to start: the slot is starting."""
        incarnation = self.incarnation = Incarnation(self.restarts)
        self.state = ChildState.STARTING
        return incarnation

    def ended(self, incarnation: Incarnation) -> None:
        """``incarnation`` is over (its start failed, or its exit was handled): forgotten,
        unless a newer one took its place."""
        if self.incarnation is incarnation:
            self.incarnation = None

    def stopping(self) -> None:
        """Being stopped on purpose: its exit is no longer a reason to restart it."""
        self.state = ChildState.STOPPING

    def failed(self, error: Exception) -> None:
        """Its incarnation crashed with ``error`` (kept for the snapshot)."""
        self.last_failure = error

    def schedule_restart(self, due: float) -> None:
        """Down, to start again at ``due`` (or at a later time already set)."""
        self.state = ChildState.RESTARTING
        self.restarts += 1
        self.restart_due = max(self.restart_due or 0.0, due)

    def restart_now(self) -> None:
        """Its restart is due and begins: no longer waiting."""
        self.restart_due = None

    async def run(
        self,
        incarnation: Incarnation,
        on_exit: Callable[[Slot[Any], Incarnation, Exception | None], None],
        *,
        task_status: TaskStatus[None],
    ) -> None:
        """Run ``incarnation`` until it returns, crashes or is cancelled; ready once its
        ``on_start`` has returned. A failure before then is raised to the starter; after it,
        the exit (with the error, if any) goes to ``on_exit`` and nothing escapes."""
        ctx = ActorContext(self.path, self.mailbox, incarnation.number)

        def ready() -> None:
            if anyio.current_effective_deadline() == -math.inf:
                # The start is being cancelled (the supervisor began to stop while this
                # child started): stay unstarted, so the next checkpoint ends it. Shielded
                # and started, it would outlive its cancelled starter, which trio does not
                # move it away from: the supervisor's exit waited on it forever.
                return
            # From now on only the supervisor stops this child, in its order, even when an
            # outer scope is cancelled (the starter could still cancel a start in progress).
            if incarnation.scope is not None:
                incarnation.scope.shield = True
            incarnation.started = True
            self.state = ChildState.RUNNING
            self.backoff.started()
            task_status.started()

        error: Exception | None = None
        try:
            with anyio.CancelScope() as scope:
                incarnation.scope = scope
                if incarnation.cancelled:
                    scope.cancel()
                behaviour = self.spec.factory()
                self.behaviour = behaviour
                await serve(behaviour, ctx, ready=ready, cleanup_timeout=self.spec.cleanup_timeout)
        except Exception as exc:
            if not incarnation.started:
                raise  # the starter gets it
            error = exc
        finally:
            for item in ctx.in_flight:  # only an actor with a mailbox receives
                assert self.mailbox is not None
                self.mailbox.dead_letter(item, DropReason.LOST_IN_FLIGHT, error)
            incarnation.finished.set()
            if incarnation.started:
                on_exit(self, incarnation, error)

    async def stop_now(self) -> None:
        """Cancel the current incarnation and wait (bounded) for it to finish."""
        incarnation = self.cancel_now()
        if incarnation is None:
            return
        with anyio.move_on_after(self.spec.cleanup_timeout + GRACE):
            await incarnation.finished.wait()
        self.stopped_now(incarnation)

    def cancel_now(self) -> Incarnation | None:
        """The first half of :meth:`stop_now`: cancel the current incarnation, if any, and
        return it, for the caller to wait on (bounded) and give to :meth:`stopped_now`."""
        self.state = ChildState.STOPPING
        incarnation = self.incarnation
        if incarnation is not None:
            incarnation.cancel()
        return incarnation

    def stopped_now(self, incarnation: Incarnation) -> None:
        """The second half of :meth:`stop_now`, once ``incarnation`` finished or its time
        was up."""
        if not incarnation.finished.is_set():
            self.log.error("ignored cancellation; abandoned while still running")
        self.incarnation = None

    async def stop_gracefully(self) -> None:
        """Close the mailbox so the actor drains and returns; cancel it at the deadline. A
        child without a mailbox of ours is given its ``shutdown_timeout`` to return, then
        cancelled."""
        self.state = ChildState.STOPPING
        if self.spec.own_mailbox:
            assert self.mailbox is not None
            self.mailbox.close()
        incarnation = self.incarnation
        if incarnation is not None:
            with anyio.move_on_after(self.spec.shutdown_timeout):
                await incarnation.finished.wait()
            if not incarnation.finished.is_set():
                self.log.warning(
                    "did not stop within %.3f s (%d queued); cancelling",
                    self.spec.shutdown_timeout,
                    0 if self.mailbox is None else len(self.mailbox),
                )
        await self.stop_now()

    def finish(self) -> None:
        """Final stop: nothing queued is lost silently. A mailbox the child brought stays
        as it is: its maker owns what is queued there."""
        self.state = ChildState.STOPPED
        if not self.spec.own_mailbox:
            return
        assert self.mailbox is not None
        self.mailbox.close()
        undelivered = self.mailbox.purge()
        if undelivered:
            self.log.warning("stopped with %d undelivered message(s)", undelivered)
