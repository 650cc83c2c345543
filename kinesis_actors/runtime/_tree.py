"""Nested supervisors: a supervisor that is itself the child of another one."""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Sequence
from typing import Any

from ._actor import Actor, ActorContext
from ._clock import MONOTONIC, Clock
from ._intensity import Backoff
from ._snapshot import SupervisorSnapshot
from ._spec import GRACE, ChildSpec, Restart, StopOrder, Strategy, stop_bound
from ._supervisor import Supervisor


class SupervisorActor(Actor[Any]):
    """Runs a :class:`Supervisor` over ``children`` as one actor.

    It is ready once all its children are; a graceful stop (its mailbox closed) shuts the
    subtree down gracefully; if the subtree gives up, the :class:`RestartIntensityExceeded`
    is this actor's failure, and its own supervisor applies its strategy. Messages sent to it
    are ignored: its mailbox is only the stop signal.
    """

    ready_after_start = False

    def __init__(
        self,
        children: Sequence[ChildSpec[Any]],
        strategy: Strategy,
        *,
        intensity: tuple[int, float],
        backoff: Backoff | None,
        clock: Clock,
        random: Callable[[], float],
        stop_order: StopOrder = StopOrder.REVERSE,
    ) -> None:
        self._children = tuple(children)
        self._stop_order = stop_order
        self._strategy = strategy
        self._intensity = intensity
        self._backoff = backoff
        self._clock = clock
        self._random = random
        self._supervisor: Supervisor | None = None

    async def run(self, ctx: ActorContext[Any]) -> None:
        supervisor = Supervisor(
            self._strategy,
            name=ctx.path,
            intensity=self._intensity,
            backoff=self._backoff,
            clock=self._clock,
            random=self._random,
            stop_order=self._stop_order,
        )
        self._supervisor = supervisor
        async with supervisor:
            for spec in self._children:
                await supervisor.start_child(spec)
            ctx.ready()
            async for _ in ctx:
                ctx.done()

    def subtree(self) -> SupervisorSnapshot | None:
        return None if self._supervisor is None else self._supervisor.statistics()


def supervisor_spec(
    name: str,
    children: Sequence[ChildSpec[Any]],
    strategy: Strategy = Strategy.ONE_FOR_ONE,
    *,
    intensity: tuple[int, float] = (3, 5.0),
    backoff: Backoff | None = None,
    restart: Restart = Restart.PERMANENT,
    shutdown_timeout: float = 30.0,
    clock: Clock = MONOTONIC,
    random: Callable[[], float] = _random.random,
    stop_order: StopOrder = StopOrder.REVERSE,
) -> ChildSpec[Any]:
    """A child spec for a nested supervisor over ``children``.

    ``shutdown_timeout`` bounds the whole subtree's graceful stop, so it defaults higher than
    a plain actor's. Its ``cleanup_timeout`` is the subtree's own stop bound
    (:func:`stop_bound` of ``children`` in ``stop_order``) plus a grace, so the nested
    deadlines fit inside this one.
    """

    def factory() -> Actor[Any]:
        return SupervisorActor(
            children,
            strategy,
            intensity=intensity,
            backoff=backoff,
            clock=clock,
            random=random,
            stop_order=stop_order,
        )

    # A cancelled subtree stops its own children, each bounded: allow for all of them.
    cleanup_timeout = stop_bound(children, stop_order) + GRACE
    return ChildSpec(
        name,
        factory,
        restart=restart,
        capacity=1,
        shutdown_timeout=shutdown_timeout,
        cleanup_timeout=cleanup_timeout,
    )
