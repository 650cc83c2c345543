"""Actors: a behaviour (:class:`Actor`) run by a thin shell around a mailbox it does not own.

The mailbox belongs to the :class:`ActorRef` (as in Akka), so when a supervisor restarts the
behaviour, queued messages stay and senders never notice. The shell tracks the message being
handled so that, if the behaviour dies, exactly that message is reported as lost.

A *source* actor has no mailbox at all (``ChildSpec(source=True)``): its input is outside the
runtime, a network stream for instance, and nothing sends to it. Its context and reference
say so (``TypeError``) rather than hand out a mailbox nobody fills.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, ClassVar, Generic, TypeVar

import anyio

from .._deprecated import renamed
from ._letters import MailboxStats
from ._mailbox import Mailbox
from ._snapshot import SupervisorSnapshot

T = TypeVar("T")

logger = logging.getLogger("kinesis_actors.runtime")


class ActorLog(logging.LoggerAdapter[logging.Logger]):
    """Prefixes every line with the actor's path and attaches it as ``record.actor``."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        path = self.extra["actor"] if self.extra else "?"
        kwargs.setdefault("extra", {})["actor"] = path
        return f"[{path}] {msg}", kwargs


class ActorContext(Generic[T]):
    """What an actor incarnation sees: its name, mailbox, incarnation number and logger."""

    def __init__(self, path: str, mailbox: Mailbox[T] | None, incarnation: int = 0) -> None:
        self._path = path
        self._mailbox = mailbox
        self._incarnation = incarnation
        self._in_flight: list[T] = []  # zero or one item: the message being handled
        self._ready_callback: Callable[[], None] | None = None
        self.log = ActorLog(logger, {"actor": path})

    @property
    def name(self) -> str:
        return self._path.rsplit("/", 1)[-1]

    @property
    def path(self) -> str:
        """``supervisor/child``; names the actor in logs and snapshots."""
        return self._path

    @property
    def mailbox(self) -> Mailbox[T]:
        """What this actor receives from. :raises TypeError: for a source actor."""
        return _mailbox_of(self._path, self._mailbox)

    @property
    def has_mailbox(self) -> bool:
        """False for a source actor (``ChildSpec(source=True)``)."""
        return self._mailbox is not None

    @property
    def incarnation(self) -> int:
        """0 for the first start, incremented by every restart."""
        return self._incarnation

    @property
    def stop_requested(self) -> bool:
        """True once a graceful stop closed the mailbox: finish up and return. A source
        actor is stopped by cancellation only: always False."""
        return self._mailbox is not None and self._mailbox.closed

    @property
    def in_flight(self) -> tuple[T, ...]:
        """The message received and not yet marked done (empty tuple when idle)."""
        return tuple(self._in_flight)

    async def receive(self) -> T:
        """Take the next message; it counts as in flight until :meth:`done` or the next receive.

        :raises anyio.EndOfStream: when the mailbox is closed and drained.
        """
        mailbox = self.mailbox
        self._in_flight.clear()
        item = await mailbox.receive()
        self._in_flight.append(item)
        return item

    def done(self) -> None:
        """The current message is handled: a crash from now on loses nothing."""
        self._in_flight.clear()

    def ready(self) -> None:
        """Signal that the actor is ready (only for actors with ``ready_after_start = False``).

        Called where a cancellation is in effect (its start being cancelled, or a cancelled
        scope of the actor's own), it does not make the actor ready: call it outside such
        scopes, and never inside a shielded one (a start cancelled meanwhile could then not
        end it)."""
        if self._ready_callback is not None:
            callback, self._ready_callback = self._ready_callback, None
            callback()

    def __aiter__(self) -> ActorContext[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class Actor(Generic[T]):
    """Base class for behaviours. Override :meth:`handle`, or :meth:`run` for a custom loop.

    Lifecycle of one incarnation: ``on_start`` (the starter waits for it), ``run``, and always
    ``on_stop`` in a shielded scope bounded by the child's cleanup timeout. A new incarnation is
    a new instance from the factory: state does not survive a restart, the mailbox does.
    """

    ready_after_start: ClassVar[bool] = True
    """If False, the starter waits until ``run`` calls ``ctx.ready()`` (e.g. nested trees)."""

    async def on_start(self, ctx: ActorContext[T]) -> None:
        """Acquire resources; the starter continues only after this returns."""

    async def handle(self, ctx: ActorContext[T], message: T) -> None:
        """Handle one message."""
        raise NotImplementedError(f"{type(self).__name__} must override handle() or run()")

    async def run(self, ctx: ActorContext[T]) -> None:
        """The default loop: handle messages until the mailbox is closed and drained."""
        async for message in ctx:
            await self.handle(ctx, message)
            ctx.done()

    async def on_stop(self, ctx: ActorContext[T]) -> None:
        """Release resources. Runs shielded, bounded by the cleanup timeout."""

    def subtree(self) -> SupervisorSnapshot | None:
        """A snapshot of a nested supervision tree, if this actor runs one."""
        return None


class _HandlerActor(Actor[T]):
    def __init__(self, handler: Callable[[T], Awaitable[None]]) -> None:
        self._handler = handler

    async def handle(self, ctx: ActorContext[T], message: T) -> None:
        await self._handler(message)


def actor(handler: Callable[[T], Awaitable[None]]) -> Callable[[], Actor[T]]:
    """Make an actor factory from an async function that handles one message."""

    def factory() -> Actor[T]:
        return _HandlerActor(handler)

    factory.__name__ = getattr(handler, "__name__", "actor")
    return factory


class ActorRef(Generic[T]):
    """The stable address of a supervised actor: it outlives restarts, and so does its mailbox.

    A source actor's reference has no mailbox: sending to it raises :class:`TypeError`.
    """

    def __init__(self, path: str, mailbox: Mailbox[T] | None) -> None:
        self._path = path
        self._mailbox = mailbox

    @property
    def name(self) -> str:
        return self._path.rsplit("/", 1)[-1]

    @property
    def path(self) -> str:
        return self._path

    @property
    def mailbox(self) -> Mailbox[T]:
        """:raises TypeError: for a source actor."""
        return _mailbox_of(self._path, self._mailbox)

    async def send(self, message: T) -> None:
        await self.mailbox.send(message)

    def try_send(self, message: T) -> bool:
        return self.mailbox.try_send(message)

    def send_nowait(self, message: T) -> None:
        self.mailbox.send_nowait(message)

    def send_control(self, message: T) -> None:
        self.mailbox.send_control(message)

    def statistics(self) -> MailboxStats | None:
        """The mailbox's statistics now (a frozen :class:`MailboxStats`); None for a source
        actor, which has no mailbox."""
        return None if self._mailbox is None else self._mailbox.statistics()

    def stats(self) -> MailboxStats | None:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed("ActorRef.stats()", "ActorRef.statistics()")
        return self.statistics()

    def __repr__(self) -> str:
        return f"<ActorRef {self._path!r}>"


def _mailbox_of(path: str, mailbox: Mailbox[T] | None) -> Mailbox[T]:
    if mailbox is None:
        raise TypeError(f"actor {path!r} is a source: it has no mailbox and takes no messages")
    return mailbox


async def serve(
    behaviour: Actor[T],
    ctx: ActorContext[T],
    *,
    ready: Callable[[], None],
    cleanup_timeout: float,
) -> None:
    """Run one incarnation: ``on_start``, signal ready, ``run``, then a bounded ``on_stop``.

    An ``on_stop`` failure after a clean run is the incarnation's failure; after a crash or a
    cancellation it is only logged, so it never hides the original exception.
    """
    if behaviour.ready_after_start:
        ctx._ready_callback = None
    else:
        ctx._ready_callback = ready
    try:
        await behaviour.on_start(ctx)
        if behaviour.ready_after_start:
            ready()
        await behaviour.run(ctx)
        _check_ready(ctx)
    except BaseException:
        await _cleanup(behaviour, ctx, cleanup_timeout, swallow=True)
        raise
    await _cleanup(behaviour, ctx, cleanup_timeout, swallow=False)


def _check_ready(ctx: ActorContext[T]) -> None:
    if ctx._ready_callback is not None:
        raise RuntimeError(f"actor {ctx.path!r} returned without calling ctx.ready()")


async def _cleanup(
    behaviour: Actor[T], ctx: ActorContext[T], limit: float, *, swallow: bool
) -> None:
    with anyio.move_on_after(limit, shield=True) as scope:
        try:
            await behaviour.on_stop(ctx)
        except Exception:
            if not swallow:
                raise
            ctx.log.exception("on_stop failed")
    if scope.cancelled_caught:
        ctx.log.warning("on_stop did not finish within %.3f s; abandoned", limit)
