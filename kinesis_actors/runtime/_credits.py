"""Credit-based demand between a network reader and its consumer (reactive-streams style).

The lesson of FLINK-34071: a task that reads the network for several shards must never await a
downstream queue, or one stalled consumer stalls every shard. So a reader takes a credit
*before* it reads, and then offers the item with a non-blocking send: the credit guarantees
room. The consumer returns the credit once it has taken the item, which is the demand signal
("request one more").

:class:`Credits` is the sans-IO counter. :class:`CreditGate` adds waiting with anyio events;
:func:`wait_any` lets one reader serving many shards sleep until *any* of them has demand.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from anyio.lowlevel import checkpoint


class CreditError(Exception):
    """The credit protocol was violated (delivering without a credit, consuming twice...)."""


class Credits:
    """A demand counter with the invariant ``buffered + outstanding <= prefetch``.

    * ``outstanding``: credits taken by the reader for items not delivered yet.
    * ``buffered``: items delivered to the consumer's mailbox and not yet taken.

    The reader calls :meth:`try_acquire` before reading, then :meth:`delivered` when it hands
    the item over (or :meth:`withdraw` if the read produced nothing). The consumer calls
    :meth:`consumed` when it takes the item, which makes the credit available again.
    """

    __slots__ = ("_buffered", "_delivered_total", "_outstanding", "_prefetch")

    def __init__(self, prefetch: int) -> None:
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, got {prefetch}")
        self._prefetch = prefetch
        self._outstanding = 0
        self._buffered = 0
        self._delivered_total = 0

    @property
    def prefetch(self) -> int:
        return self._prefetch

    @property
    def outstanding(self) -> int:
        return self._outstanding

    @property
    def buffered(self) -> int:
        return self._buffered

    @property
    def available(self) -> int:
        """Credits that can be taken right now."""
        return self._prefetch - self._outstanding - self._buffered

    @property
    def delivered_total(self) -> int:
        return self._delivered_total

    def try_acquire(self, n: int = 1) -> bool:
        """Take ``n`` credits if all are available (all or nothing)."""
        _check_positive(n)
        if n > self.available:
            return False
        self._outstanding += n
        return True

    def acquire_up_to(self, n: int) -> int:
        """Take as many credits as are available, at most ``n``; return how many."""
        _check_positive(n)
        granted = min(n, self.available)
        self._outstanding += granted
        return granted

    def delivered(self, n: int = 1) -> None:
        """``n`` items for outstanding credits were handed to the consumer."""
        _check_positive(n)
        if n > self._outstanding:
            raise CreditError(f"delivered {n} item(s) with only {self._outstanding} credit(s)")
        self._outstanding -= n
        self._buffered += n
        self._delivered_total += n

    def withdraw(self, n: int = 1) -> None:
        """Give back ``n`` outstanding credits whose read produced nothing."""
        _check_positive(n)
        if n > self._outstanding:
            raise CreditError(f"withdrew {n} credit(s) with only {self._outstanding} outstanding")
        self._outstanding -= n

    def consumed(self, n: int = 1) -> None:
        """The consumer took ``n`` delivered items: their credits are available again."""
        _check_positive(n)
        if n > self._buffered:
            raise CreditError(f"consumed {n} item(s) with only {self._buffered} buffered")
        self._buffered -= n

    def __repr__(self) -> str:
        return (
            f"<Credits prefetch={self._prefetch} outstanding={self._outstanding} "
            f"buffered={self._buffered}>"
        )


def _check_positive(n: int) -> None:
    if n < 1:
        raise ValueError(f"a credit count must be at least 1, got {n}")


class CreditGate:
    """:class:`Credits` plus the ability to wait for a credit.

    Waiters are woken by :meth:`consumed` and :meth:`withdraw`. Like the mailbox it is meant
    for the event loop that owns it.
    """

    def __init__(self, prefetch: int, *, name: str = "credits") -> None:
        self._credits = Credits(prefetch)
        self._name = name
        # Bounded by the number of tasks waiting on this gate: each holds one event.
        self._listeners: set[anyio.Event] = set()

    @property
    def name(self) -> str:
        return self._name

    @property
    def credits(self) -> Credits:
        """The counter (read it for statistics; mutate through the gate so waiters wake)."""
        return self._credits

    @property
    def available(self) -> int:
        return self._credits.available

    def try_acquire(self, n: int = 1) -> bool:
        return self._credits.try_acquire(n)

    async def acquire(self, n: int = 1) -> None:
        """Wait until ``n`` credits are available and take them."""
        if n > self._credits.prefetch:
            raise ValueError(
                f"cannot acquire {n} credits with a prefetch of {self._credits.prefetch}"
            )
        await checkpoint()
        while not self._credits.try_acquire(n):
            await self._wait_for_change()

    def delivered(self, n: int = 1) -> None:
        self._credits.delivered(n)

    def withdraw(self, n: int = 1) -> None:
        self._credits.withdraw(n)
        self._notify()

    def consumed(self, n: int = 1) -> None:
        self._credits.consumed(n)
        self._notify()

    async def _wait_for_change(self) -> None:
        event = anyio.Event()
        self._listeners.add(event)
        try:
            await event.wait()
        finally:
            self._listeners.discard(event)

    def _notify(self) -> None:
        for event in self._listeners:
            event.set()
        self._listeners.clear()

    def __repr__(self) -> str:
        return f"<CreditGate {self._name!r} {self._credits!r}>"


async def wait_any(gates: Sequence[CreditGate]) -> None:
    """Return once any of ``gates`` has a credit available.

    A reader serving several shards sleeps here when every shard is out of demand, and so never
    waits on behalf of one particular shard.
    """
    if not gates:
        raise ValueError("wait_any needs at least one gate")
    await checkpoint()
    while not any(gate.available > 0 for gate in gates):
        event = anyio.Event()
        for gate in gates:
            gate._listeners.add(event)
        try:
            await event.wait()
        finally:
            for gate in gates:
                gate._listeners.discard(event)
