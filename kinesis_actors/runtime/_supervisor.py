"""The supervisor: starts children in order, restarts them by strategy, stops them in reverse.

Shape: every child incarnation is a task in the supervisor's task group that never lets an
``Exception`` escape into the group (that would cancel the siblings: a task group is OTP's
one_for_all without restarts). Instead it reports its exit to one *decision loop*, which is the
only place that restarts or stops children, so decisions are serialised like an OTP supervisor
process. Backoff delays are timers in that loop, not sleeps, so one child's backoff never
delays another child's restart under one_for_one.

What happens to one child - running an incarnation, stopping it now or gracefully, the final
stop that reports what is still queued - is :mod:`._child`'s (:class:`~._child.Slot`); this
module holds the decisions and their order: starting children, the decision loop (restart by
strategy and backoff, escalation when the intensity is exceeded) and stopping several.

Cancellation is never swallowed: it is how children are stopped, and an outer cancellation
goes through everything after a shielded, time-bounded shutdown.

Stopping several children at once (the shutdown, an escalation, a group restart) follows the
supervisor's :class:`StopOrder`: one at a time in reverse start order, or all at once for
siblings that do not depend on each other. Either way the whole stop is bounded by
:func:`stop_bound`, which a nested supervisor's own cleanup deadline is built from.

The intensity is one budget for all the children (OTP's) or, by :class:`IntensityScope`, one
per child (Akka's one-for-one), for many independent siblings that a shared cause may take
down together. A crash is logged as an error with its traceback, unless the child's spec says
it is ``recoverable``: then as one warning line.
"""

from __future__ import annotations

import enum
import math
import random as _random
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

from .._deprecated import renamed
from ._actor import ActorLog, ActorRef, logger
from ._child import ChildState, Incarnation, Slot
from ._clock import MONOTONIC, Clock
from ._intensity import Backoff, RestartBackoff, RestartIntensity
from ._snapshot import ChildSnapshot, SupervisorSnapshot
from ._spec import (
    GRACE,
    ActorExited,
    ChildSpec,
    IntensityScope,
    Restart,
    RestartIntensityExceeded,
    StopOrder,
    Strategy,
    stop_bound,
)

T = TypeVar("T")


class SupervisorState(enum.Enum):
    """Where a supervisor is in its life; ``statistics()`` carries the value."""

    NEW = "new"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    """Its restart intensity was exceeded: the children are stopped and it escalates."""


class Supervisor:
    """Supervises actors with OTP semantics.

    Usage::

        async with Supervisor(Strategy.ONE_FOR_ONE, intensity=(3, 5.0)) as sup:
            ref = await sup.start_child(ChildSpec("worker", Worker))
            await ref.send(item)
            ...
        # leaving the block stops the children in reverse start order, draining mailboxes

    Leaving normally is a graceful stop; leaving with an exception or a cancellation stops the
    children by cancellation. If restarts exceed the intensity, the children are stopped, the
    body is cancelled, and :class:`RestartIntensityExceeded` is raised.

    ``stop_order`` says how several children are stopped: in reverse start order, one at a
    time (the default, as in OTP), or concurrently, for independent siblings (not with
    ``rest_for_one``, whose later children depend on the earlier ones).

    ``intensity_scope`` says whose restarts ``intensity`` counts: all the children's together
    (the default, as in OTP), or each child's apart (``one_for_one`` only).
    """

    def __init__(
        self,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        *,
        name: str = "supervisor",
        intensity: tuple[int, float] = (3, 5.0),
        backoff: Backoff | None = None,
        clock: Clock = MONOTONIC,
        random: Callable[[], float] = _random.random,
        stop_order: StopOrder = StopOrder.REVERSE,
        intensity_scope: IntensityScope = IntensityScope.SUPERVISOR,
    ) -> None:
        if strategy is Strategy.REST_FOR_ONE and stop_order is StopOrder.CONCURRENT:
            raise ValueError(
                "rest_for_one children depend on the ones started before them: "
                "they stop in reverse order, not concurrently"
            )
        if intensity_scope is IntensityScope.CHILD and strategy is not Strategy.ONE_FOR_ONE:
            raise ValueError(
                f"an intensity per child needs one_for_one: under {strategy.value} a crash "
                "restarts its siblings too"
            )
        self._intensity_scope = intensity_scope
        self._strategy = strategy
        self._stop_order = stop_order
        self._name = name
        self._intensity = RestartIntensity(intensity[0], intensity[1], clock=clock)
        self._backoff = backoff if backoff is not None else Backoff()
        self._clock = clock
        self._random = random
        # By name, in start order: a consumer's readers are a child a shard, and finding one
        # by scanning made opening a thousand shards quadratic.
        self._slots: dict[str, Slot[Any]] = {}
        # The slots waiting for a restart (``restart_due`` set): a wake-up looks at these,
        # not at every child.
        self._due: set[Slot[Any]] = set()
        # Bounded by the number of children: only a started, current incarnation posts, once.
        self._exits: deque[tuple[Slot[Any], Incarnation, Exception | None]] = deque()
        self._state = SupervisorState.NEW
        self._failure: RestartIntensityExceeded | None = None
        self._tg: TaskGroup | None = None
        self._loop_scope: anyio.CancelScope | None = None
        self.log = ActorLog(logger, {"actor": name})

    @property
    def name(self) -> str:
        return self._name

    @property
    def stop_order(self) -> StopOrder:
        return self._stop_order

    @property
    def failure(self) -> RestartIntensityExceeded | None:
        return self._failure

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Supervisor:
        if self._state is not SupervisorState.NEW:
            raise RuntimeError(f"supervisor {self._name!r} can only be entered once")
        self._wakeup = anyio.Event()
        self._lock = anyio.Lock()
        self._loop_done = anyio.Event()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._state = SupervisorState.RUNNING
        await tg.start(self._supervise)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        tg = self._task_group()
        original = exc
        if exc is None and self._failure is None:
            try:
                await self._shutdown(graceful=True)
            except BaseException as interrupted:  # e.g. an outer cancellation mid-drain
                exc_type, exc, tb = type(interrupted), interrupted, interrupted.__traceback__
        with anyio.move_on_after(self._hard_stop_bound(), shield=True):
            await self._shutdown(graceful=False)
        tg.cancel_scope.cancel()
        try:
            suppressed = bool(await tg.__aexit__(exc_type, exc, tb))
        except BaseExceptionGroup as group:
            if exc is None or list(group.exceptions) != [exc]:
                raise
            suppressed = False  # only our own exception, wrapped: re-raise it unwrapped
        if self._failure is not None and (exc is None or suppressed):
            raise self._failure
        if exc is not None and exc is not original and not suppressed:
            raise exc
        return suppressed

    async def start_child(self, spec: ChildSpec[T]) -> ActorRef[T]:
        """Start a child and return once it is ready (its ``on_start`` has returned).

        :raises Exception: whatever the child's factory or ``on_start`` raised; the child is
            then not added.
        """
        if self._state is not SupervisorState.RUNNING:
            raise RuntimeError(f"supervisor {self._name!r} is {self._state.value}")
        async with self._lock:
            if spec.name in self._slots:
                raise ValueError(f"{self._name!r} already has a child named {spec.name!r}")
            backoff = RestartBackoff(
                self._backoff,
                reset_after=self._intensity.period,
                clock=self._clock,
                random=self._random,
            )
            own = None
            if self._intensity_scope is IntensityScope.CHILD:
                own = RestartIntensity(
                    self._intensity.max_restarts, self._intensity.period, clock=self._clock
                )
            slot = Slot(spec, f"{self._name}/{spec.name}", backoff, intensity=own)
            self._slots[spec.name] = slot
            try:
                await self._start(slot)
            except BaseException:
                self._remove(slot)
                slot.finish()
                raise
        slot.log.debug("started")
        return slot.ref

    async def stop_child(self, name: str) -> None:
        """Stop one child gracefully (drain, then cancel after its shutdown timeout), and
        remove it. Other children are not affected."""
        async with self._lock:
            slot = self._slot(name)
            slot.stopping()
        await slot.stop_gracefully()
        async with self._lock:
            slot.finish()
            self._remove(slot)

    def child(self, name: str) -> ActorRef[Any]:
        """The reference of a current child."""
        return self._slot(name).ref

    def statistics(self) -> SupervisorSnapshot:
        """The tree now, as frozen plain data: children, mailbox statistics, restarts, last
        failures."""
        children = tuple(
            ChildSnapshot(
                name=slot.spec.name,
                path=slot.path,
                state=slot.state.value,
                restart=slot.spec.restart.value,
                restarts=slot.restarts,
                incarnation=slot.incarnation.number if slot.incarnation else slot.restarts,
                last_failure=None if slot.last_failure is None else repr(slot.last_failure),
                mailbox=None if slot.mailbox is None else slot.mailbox.statistics(),
                subtree=slot.behaviour.subtree() if slot.behaviour is not None else None,
            )
            for slot in self._slots.values()
        )
        return SupervisorSnapshot(
            name=self._name,
            strategy=self._strategy.value,
            state=self._state.value,
            restarts_in_window=self._restarts_in_window(),
            max_restarts=self._intensity.max_restarts,
            period=self._intensity.period,
            failure=None if self._failure is None else str(self._failure),
            children=children,
            intensity_scope=self._intensity_scope.value,
        )

    def snapshot(self) -> SupervisorSnapshot:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed("Supervisor.snapshot()", "Supervisor.statistics()")
        return self.statistics()

    def _restarts_in_window(self) -> int:
        if self._intensity_scope is IntensityScope.SUPERVISOR:
            return self._intensity.restarts_in_window
        return max(
            (slot.intensity.restarts_in_window for slot in self._slots.values() if slot.intensity),
            default=0,
        )

    # -- children ---------------------------------------------------------------------------

    async def _start(self, slot: Slot[Any]) -> None:
        incarnation = slot.begin()
        try:
            await self._task_group().start(slot.run, incarnation, self._exited)
        except BaseException:
            slot.ended(incarnation)
            raise

    def _exited(self, slot: Slot[Any], incarnation: Incarnation, error: Exception | None) -> None:
        """A started incarnation ended: hand its exit to the decision loop."""
        self._exits.append((slot, incarnation, error))
        self._wakeup.set()

    async def _shutdown(self, *, graceful: bool) -> None:
        if self._loop_scope is not None:
            self._loop_scope.cancel()
        await self._loop_done.wait()
        if self._failure is None:
            self._state = SupervisorState.STOPPING
        running = [s for s in self._slots.values() if s.state is not ChildState.STOPPED]
        await self._stop_all(running, graceful=graceful, finish=True)
        if self._failure is None:
            self._state = SupervisorState.STOPPED

    async def _stop_all(self, slots: list[Slot[Any]], *, graceful: bool, finish: bool) -> None:
        """Stop ``slots`` (given in start order) by the supervisor's :class:`StopOrder`."""

        async def stop(slot: Slot[Any]) -> None:
            if graceful:
                await slot.stop_gracefully()
            else:
                await slot.stop_now()
            if finish:
                slot.finish()

        if self._stop_order is StopOrder.REVERSE or len(slots) < 2:
            for slot in reversed(slots):
                await stop(slot)
            return
        if not graceful:
            await self._cancel_together(slots, finish=finish)
            return
        async with anyio.create_task_group() as tg:
            for slot in reversed(slots):
                tg.start_soon(stop, slot)

    @staticmethod
    async def _cancel_together(slots: list[Slot[Any]], *, finish: bool) -> None:
        """Stop ``slots`` side by side by cancellation: cancel them all, then wait for them
        under one deadline, the longest of their ``cleanup_timeout`` plus :data:`GRACE`.

        The same bound as a stop task each with its own deadline, since those ran side by
        side, without a task and a timer per child: closing a consumer of 4,096 shards spent
        most of its second on them (measured, see docs/runtime.md).
        """
        stopping = [(slot, slot.cancel_now()) for slot in reversed(slots)]
        bound = max(slot.spec.cleanup_timeout for slot in slots) + GRACE
        with anyio.move_on_after(bound):
            for _, incarnation in stopping:
                if incarnation is not None and not incarnation.finished.is_set():
                    await incarnation.finished.wait()
        for slot, incarnation in stopping:
            if incarnation is not None:
                slot.stopped_now(incarnation)
            if finish:
                slot.finish()

    def _hard_stop_bound(self) -> float:
        return stop_bound([slot.spec for slot in self._slots.values()], self._stop_order)

    # -- the decision loop ------------------------------------------------------------------

    async def _supervise(self, *, task_status: TaskStatus[None]) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._loop_scope = scope
                task_status.started()
                while True:
                    await self._wait_for_work()
                    async with self._lock:
                        if not await self._process():
                            return
        finally:
            self._loop_done.set()

    async def _wait_for_work(self) -> None:
        while not self._exits:
            due = min(
                (slot.restart_due for slot in self._due if slot.restart_due is not None),
                default=math.inf,
            )
            delay = due - anyio.current_time()
            if delay <= 0:
                return
            self._wakeup = anyio.Event()
            with anyio.move_on_after(delay):
                await self._wakeup.wait()

    async def _process(self) -> bool:
        """Handle pending exits and due restarts; False once the supervisor has given up."""
        while self._exits:
            slot, incarnation, error = self._exits.popleft()
            if slot.incarnation is not incarnation or slot.state is not ChildState.RUNNING:
                continue  # stopped on purpose, or already superseded
            slot.ended(incarnation)
            if not await self._child_down(slot, error):
                return False
        return await self._restart_due()

    async def _child_down(self, slot: Slot[Any], error: Exception | None) -> bool:
        restart = slot.spec.restart
        if error is not None:
            slot.failed(error)
            recoverable = slot.spec.recoverable
            if recoverable is not None and recoverable(error):
                slot.log.warning("crashed on a recoverable error: %r", error)
            else:
                slot.log.error("crashed: %r", error, exc_info=error)
        else:
            slot.log.info("returned")
        if restart is Restart.TEMPORARY or (restart is Restart.TRANSIENT and error is None):
            slot.finish()
            self._remove(slot)
            return True
        cause = error if error is not None else ActorExited(f"{slot.path} returned")
        intensity = slot.intensity if slot.intensity is not None else self._intensity
        if not intensity.record(cause):
            await self._escalate(intensity)
            return False
        delay = slot.backoff.next_delay()
        due = anyio.current_time() + delay
        group = self._restart_group(slot)
        siblings = [s for s in group if s is not slot and s.state is ChildState.RUNNING]
        await self._stop_all(siblings, graceful=False, finish=False)
        for member in group:
            if member is not slot and member.spec.restart is Restart.TEMPORARY:
                member.finish()
                self._remove(member)
                continue
            member.schedule_restart(due)
            self._due.add(member)
        slot.log.info("restarting %s in %.3f s", [m.spec.name for m in group], delay)
        return True

    def _restart_group(self, slot: Slot[Any]) -> list[Slot[Any]]:
        if self._strategy is Strategy.ONE_FOR_ONE:
            return [slot]
        if self._strategy is Strategy.ONE_FOR_ALL:
            return list(self._slots.values())
        slots = list(self._slots.values())
        return slots[slots.index(slot) :]

    async def _restart_due(self) -> bool:
        if not self._due:
            return True
        ordered = self._strategy is not Strategy.ONE_FOR_ONE
        for slot in [s for s in self._slots.values() if s in self._due]:
            if slot.state is not ChildState.RESTARTING or slot.restart_due is None:
                continue
            if slot.restart_due > anyio.current_time():
                if ordered:
                    break  # later children depend on this one: they wait for it
                continue
            slot.restart_now()
            self._due.discard(slot)
            try:
                await self._start(slot)
            except Exception as exc:
                slot.log.warning("restart failed")
                if not await self._child_down(slot, exc):
                    return False
                if ordered:
                    break
            else:
                slot.log.info("restarted (incarnation %d)", slot.restarts)
        return True

    async def _escalate(self, intensity: RestartIntensity) -> None:
        """Give up: ``intensity`` (the supervisor's, or one child's) was exceeded."""
        failure = RestartIntensityExceeded(
            self._name, intensity.max_restarts, intensity.period, intensity.causes
        )
        self.log.error("%s; stopping children (%s)", failure, self._stop_order.value)
        with anyio.move_on_after(self._hard_stop_bound(), shield=True):
            running = [s for s in self._slots.values() if s.state is not ChildState.STOPPED]
            await self._stop_all(running, graceful=False, finish=True)
        self._failure = failure
        self._state = SupervisorState.FAILED
        self._task_group().cancel_scope.cancel()

    # -- helpers ----------------------------------------------------------------------------

    def _task_group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError(f"supervisor {self._name!r} is not running")
        return self._tg

    def _slot(self, name: str) -> Slot[Any]:
        try:
            return self._slots[name]
        except KeyError:
            raise KeyError(f"{self._name!r} has no child named {name!r}") from None

    def _remove(self, slot: Slot[Any]) -> None:
        """Forget ``slot`` (if it is still the child of its name)."""
        if self._slots.get(slot.spec.name) is slot:
            del self._slots[slot.spec.name]
        self._due.discard(slot)
