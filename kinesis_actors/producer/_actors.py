"""The producer's two actor behaviours: the dispatcher and a call sender.

Both are thin drivers of the producer's :class:`~._sender.Sender`: the dispatcher, whose
mailbox is the bounded queue, runs :meth:`Sender.dispatch`; a call sender, whose mailbox holds
one call at a time, runs :meth:`Sender.send` on each. What they drive, the supervisor they
run under and what a crash of each means are the sender module's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from ..runtime import Actor, ActorContext, unwrap_sole
from ._entry import Entry

if TYPE_CHECKING:
    from ._pipeline import Call
    from ._sender import Sender

__all__ = ["CallSender", "Delivery", "Dispatcher"]


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


class Dispatcher(Actor[Entry]):
    """Runs :meth:`Sender.dispatch`; shard-map listings run in its own task group."""

    def __init__(self, sender: Sender) -> None:
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

    def __init__(self, sender: Sender) -> None:
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
