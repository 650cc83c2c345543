"""One accepted user record on its way through the producer (recycled: see :class:`Entry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._handle import NO_OUTCOMES, Outcomes

if TYPE_CHECKING:
    from ._domains import Lane

__all__ = ["Entry"]


class Entry:
    """One accepted user record on its way, settled into slot ``slot`` of ``outcomes``.

    Entries are recycled: the producer's ledger keeps settled ones (up to the queue's record
    bound) and the put path refills them with :meth:`fill`, so a steady stream of records
    allocates none (see :mod:`._handle` for what that saves). Hence the rule every holder
    keeps: once settled, an entry is referenced by nothing but the spares (its call's parts
    are dropped with the answer that settled them) and a place it left in a lane's queue as
    a key's lone record (until the queue's head reaches it or the lane is swept), which the
    waiting room tells from a live one by ``lone_lane`` (see ``WaitingRoom.head``). Settling
    drops ``data``, so a spare holds no record.

    A record sent alone is its call's part itself: it has the fields a call reads of a
    :class:`Part` (data, keys, ``lane``, set when it is taken, size and ``entries``). So no
    part, record or list per record, which, held while the call is out, were what the
    collector promoted (measured, without aggregation: three full collections per 100,000
    records, 1.3-2.0 us a record on this machine).
    """

    __slots__ = (
        "attempts",
        "data",
        "enqueued",
        "epoch",
        "explicit_hash_key",
        "hash_key",
        "lane",
        "last_error",
        "lone_lane",
        "outcomes",
        "partition_key",
        "size",
        "slot",
        "unknown_outcomes",
    )

    def __init__(  # noqa: PLR0917 - the fields, in fill's order
        self,
        data: bytes = b"",
        partition_key: str = "",
        explicit_hash_key: str | None = None,
        hash_key: int = 0,
        size: int = 0,
        enqueued: float = 0.0,
        outcomes: Outcomes = NO_OUTCOMES,
        slot: int = 0,
        epoch: int = 0,
    ) -> None:
        self.fill(data, partition_key, explicit_hash_key, hash_key, size, outcomes, slot, epoch)
        self.enqueued = enqueued
        self.lane = ""  # the lane it was last taken from to be sent alone
        # The lane whose queue it waits in as a key's lone record (see ``_waiting``): a place
        # it left there stays until the queue's head reaches it, and must not pass for it
        # once the entry is refilled and waits lone elsewhere. Set when placed; not in fill.
        self.lone_lane: Lane | None = None

    @property
    def entries(self) -> list[Entry]:
        """As a call's part (sent alone): the user records inside it, itself."""
        return [self]

    def fill(  # noqa: PLR0917 - once per record on the hot path
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | None,
        hash_key: int,
        size: int,
        outcomes: Outcomes,
        slot: int,
        epoch: int,
    ) -> Entry:
        """(Re)initialize for a new record, settling into ``outcomes[slot]``."""
        self.data = data
        self.partition_key = partition_key
        self.explicit_hash_key = explicit_hash_key
        self.hash_key = hash_key
        self.size = size
        self.enqueued = 0.0  # stamped when the pipeline takes it
        self.outcomes = outcomes
        self.slot = slot
        self.epoch = epoch
        self.attempts = 0
        self.unknown_outcomes = 0  # attempts whose outcome was unknown (see _retries)
        self.last_error: BaseException | None = None
        return self
