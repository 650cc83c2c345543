"""The handoffs a worker asked for: asking a lease's owner to hand it over, and what the
table's listings say of each ask since.

With ``graceful_handoff`` a take round steals toward the even share by asking: the ask
writes our id as the lease's owner and keeps the live owner's in ``checkpointOwner``, and the
owner, seeing it at its next renewal, stops its reader and hands the lease over (clears
``checkpointOwner``; see :class:`~._events.LeaseHandoff`). :class:`HandoffsAsked` owns the
asks in progress and settles each by the next listings: handed over (to hold and read at
once), not handed over within ``handoff_timeout`` plus a failover time or its owner dead (to
take as before), or changed hands otherwise (forgotten). Once ``release_all`` began it
withdraws them instead (:meth:`HandoffsAsked.withdraw`): a worker that leaves does not leave
a lease named after it to expire a failover time later. The take round
(:class:`~._taker.LeaseTaker`) decides what to ask for, and holds or takes what this settles;
it writes none of these fields. Kept apart because the asks are state of their own, read by
the round (whether one is pending, whether a lease under our id is one of ours) and written
here only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ._config import LeaseConfig
from ._holder import LeaseHolder
from ._items import Lease
from ._streams import Streams
from ._table import LeaseTable

__all__ = ["HandoffsAsked"]

logger = logging.getLogger("kinesis_actors.leases")

#: Writes tried to withdraw one ask, each after reading what a failed one met.
_WITHDRAW_ATTEMPTS = 3


class HandoffsAsked:
    """The handoffs this worker asked for and has not settled yet, and how many it asked.

    ``known`` gives the coordinator's streams: a lease of a stream not read here is never
    asked for.
    """

    def __init__(
        self,
        table: LeaseTable,
        holder: LeaseHolder,
        worker_id: str,
        config: LeaseConfig,
        *,
        clock: Callable[[], float],
        known: Callable[[], Streams],
    ) -> None:
        self._table = table
        self._holder = holder
        self._worker_id = worker_id
        self._patience = config.handoff_timeout + config.failover_time
        self._clock = clock
        self._known = known
        # Lease key -> (asked at, asked of). Bounded by the leases of the table: one ask a
        # lease, settled by the first listing that shows it handed over, overdue or gone.
        self._asked: dict[str, tuple[float, str]] = {}
        self._stopped = False  # release_all began: withdraw, ask nothing more
        self.count = 0  # asks that landed, since the coordinator opened
        self.withdrawn = 0  # asks withdrawn, or leases handed over released, at release_all

    @property
    def pending(self) -> bool:
        """Whether an ask is in progress (the round then lists the table every round)."""
        return bool(self._asked)

    def __contains__(self, key: str) -> bool:
        """Whether ``key`` is a lease this worker asked for and has not settled."""
        return key in self._asked

    async def ask(self, lease: Lease) -> None:
        """Ask ``lease``'s live owner to hand it over, conditional on the lease as listed."""
        owner = lease.owner
        if owner is None or self._stopped or self._known().owner_of(lease) is None:
            return
        new = await self._table.ask_handoff(lease, self._worker_id)
        if new is None:  # lost to a renewal or a take - or landed with its reply lost
            current = await self._table.get(lease.key)
            if current is None or (current.owner, current.checkpoint_owner) != (
                self._worker_id,
                owner,
            ):
                return
            new = current
        self._asked[lease.key] = (self._clock(), owner)
        self._holder.learn(new)
        self.count += 1
        logger.info("%s asked %s to hand %s over", self._worker_id, owner, lease.key)
        if self._stopped:  # release_all began while the ask was on its way
            await self.withdraw(lease.key)

    def stop(self) -> list[str]:
        """``release_all`` began: the asks to withdraw now; one still on its way withdraws
        itself once it lands (the take round it is part of runs to its end: ``release_all``
        waits for it), and none is made any more."""
        self._stopped = True
        return list(self._asked)

    async def withdraw(self, key: str, *, settled: bool = False) -> None:
        """Take back the ask for ``key``: its owner keeps the lease as if it had not been
        asked (:meth:`~._table.LeaseTable.withdraw_handoff`), or, once it has stopped its
        reader, releases it at its final checkpoint when it answers (see
        :meth:`~._holder.LeaseHolder.hand_over`). A lease handed over already is ours: it is
        released at once, unread, as ``release_all`` releases those it holds. The write is
        conditional on the counter, which the owner moves at each renewal while it hands
        over: a failed condition is read back and tried again, a few times (an owner renews
        once in ``renew_interval``); after that, or on a transient fault, the lease is left
        as it is, to be handed over and expire (logged). ``settled``: an ask :meth:`settle`
        gave the round as overdue, and that ``release_all`` kept the round from taking."""
        if self._asked.pop(key, None) is None and not settled:
            return
        lease = self._holder.by_key.get(key)
        for attempt in range(_WITHDRAW_ATTEMPTS + 1):
            if lease is None or lease.owner != self._worker_id or key in self._holder.held:
                return  # gone, changed hands, or held (released with the others)
            if attempt == _WITHDRAW_ATTEMPTS:
                break
            if lease.checkpoint_owner is None:
                new = await self._table.release(lease, self._worker_id)
                outcome = "handed over already: released"
            else:
                new = await self._table.withdraw_handoff(
                    lease, self._worker_id, lease.checkpoint_owner
                )
                outcome = f"{lease.checkpoint_owner} keeps it"
            if new is not None:
                self._holder.learn(new)
                self.withdrawn += 1
                logger.info("%s withdrew its ask for %s (%s)", self._worker_id, key, outcome)
                return
            # The owner renewed or handed over meanwhile - or our write landed and only its
            # reply was lost (the lease no longer names us then): read it and look again.
            lease = await self._table.get(key)
            if lease is not None:
                self._holder.learn(lease)
        logger.warning(
            "%s could not withdraw its ask for %s after %d tries: left to be handed over "
            "and expire",
            self._worker_id,
            key,
            _WITHDRAW_ATTEMPTS,
        )

    def settle(self, now: float) -> tuple[list[tuple[Lease, str]], list[Lease]]:
        """The asks, by the table as last known (the last listing and the asks since), at
        ``now``: the leases handed over, each with the worker that handed it (to hold), and
        those not handed over in time or whose owner died (to take); both forgotten here, as
        are asks whose lease changed hands otherwise or that we hold already. The rest stay."""
        by_key = self._holder.by_key
        held = self._holder.held
        handed: list[tuple[Lease, str]] = []
        overdue: list[Lease] = []
        for key, (asked_at, owner) in list(self._asked.items()):
            lease = by_key.get(key)
            if lease is None or lease.owner != self._worker_id or key in held:
                del self._asked[key]
            elif lease.checkpoint_owner is None:
                del self._asked[key]
                handed.append((lease, owner))
            elif now - asked_at > self._patience or self._holder.expired(lease, now):
                del self._asked[key]
                overdue.append(lease)
        return handed, overdue
