"""The producer's two actor behaviours: the dispatcher and a call sender.

Both are thin drivers of the producer's :class:`~._sender.Sender`: the dispatcher, whose
mailbox is the bounded queue, runs :meth:`Sender.dispatch`; a call sender, whose mailbox holds
one call at a time, runs :meth:`Sender.send` on each. What they drive, the supervisor they
run under and what a crash of each means are the sender module's; what the actors need of it
is :class:`Driven`, so that this module depends on nothing of the sender's.
"""

from __future__ import annotations

from typing import Protocol

import anyio
from anyio.abc import TaskGroup

from ..runtime import Actor, ActorContext, Mailbox, unwrap_sole
from ._calls import Call
from ._entry import Entry

__all__ = ["CallSender", "Delivery", "Dispatcher", "Driven"]


class Delivery:
    """One call handed to a sender, with the scope an abort cancels it by.

    ``settled`` is set by whoever gives the call's outcome to the pipeline first (the sender,
    or the supervisor's report of a crash): a call is settled once.
    """

    __slots__ = ("call", "scope", "settled")

    def __init__(self, call: Call) -> None:
        self.call = call
        self.scope = anyio.CancelScope()
        self.settled = False


class Driven(Protocol):
    """What the two actors drive (the producer's :class:`~._sender.Sender`)."""

    async def dispatch(self, queue: Mailbox[Entry], task_group: TaskGroup) -> None:
        """Own the queue: take records in, build calls, hand them to senders."""

    def dispatcher_crashed(self, error: Exception) -> None:
        """The dispatcher raised ``error``: what it held must not be left in flight."""

    def ready(self, mailbox: Mailbox[Delivery]) -> None:
        """A call sender (re)started or finished a call: it can take the next one."""

    async def send(self, delivery: Delivery) -> None:
        """Send one call and settle it."""


class Dispatcher(Actor[Entry]):
    """Runs :meth:`Sender.dispatch`; shard-map listings run in its own task group."""

    def __init__(self, sender: Driven) -> None:
        self._sender = sender

    async def run(self, ctx: ActorContext[Entry]) -> None:
        try:
            with unwrap_sole():
                async with anyio.create_task_group() as task_group:
                    await self._sender.dispatch(ctx.mailbox, task_group)
                    task_group.cancel_scope.cancel()
        except Exception as exc:
            self._sender.dispatcher_crashed(exc)
            raise


class CallSender(Actor[Delivery]):
    """Sends the calls the dispatcher hands it, one at a time."""

    def __init__(self, sender: Driven) -> None:
        self._sender = sender

    async def on_start(self, ctx: ActorContext[Delivery]) -> None:
        self._sender.ready(ctx.mailbox)

    async def run(self, ctx: ActorContext[Delivery]) -> None:
        # Not the default loop, whose variable keeps the last message while it waits for the
        # next: an idle sender held its last call's records (8 calls, 1.6x the queue's bound).
        sender = self._sender
        while True:
            try:
                delivery = await ctx.receive()
            except anyio.EndOfStream:
                return
            await sender.send(delivery)
            del delivery
            ctx.done()
            sender.ready(ctx.mailbox)
