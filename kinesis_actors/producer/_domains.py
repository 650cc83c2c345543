"""The pipeline's waiting rooms: ordering domains (one per key) inside lanes (one per shard).

A key's only record waits in its lane as itself, with no domain (see ``_waiting``).

Plain state, owned by :class:`~kinesis_actors.producer._waiting.WaitingRoom`, which alone
writes it and moves a domain between its states: idle (nothing waiting), ready (queued in its lane),
in flight (with ``preserve_order``, its next records wait for the one out) and waiting
(backing off after a failure, until ``not_before``).
"""

from __future__ import annotations

from collections import deque

from ._entry import Entry

__all__ = [
    "IDLE",
    "IN_FLIGHT",
    "READY",
    "WAITING",
    "Domain",
    "DomainKey",
    "Lane",
    "domain_key",
    "key_bytes",
]

IDLE, READY, IN_FLIGHT, WAITING = range(4)

DomainKey = str | tuple[str, str]
"""A domain's key: the partition key alone, or with the explicit hash key when there is one
(a str never equals a tuple, so the two kinds cannot collide). Not a tuple per record in the
common case: that was an allocation and a tuple hash per record, at intake and at release."""


def domain_key(partition_key: str, explicit_hash_key: str | None) -> DomainKey:
    """The key of the domain of a record with these keys (the hot paths inline it)."""
    return partition_key if explicit_hash_key is None else (partition_key, explicit_hash_key)


class Domain:
    """A key's records waiting to be sent, in order, and where they go.

    ``hash_key`` places the domain in its lane and ``explicit_hash_key`` is what its Kinesis
    records carry (``None``: their partition key's hash). Both are the key's own unless the
    domain is ``pinned``: some of its records landed on a child shard that does not own the
    key (an aggregate in flight across a split), so the rest follow them to a hash key that
    child owns (see ``_waiting``).
    """

    __slots__ = (
        "entries",
        "explicit_hash_key",
        "hash_key",
        "key",
        "lane",
        "nbytes",
        "not_before",
        "pinned",
        "queued",
        "state",
    )

    explicit_hash_key: str | None

    def __init__(self, key: DomainKey, hash_key: int, lane: Lane) -> None:
        # Bounded by the producer's queue: every entry here holds room in it until settled. A
        # list, not a deque: a deque is 760 bytes from birth, and keys that come a few times
        # each make a domain each. Taking from the front is then a memmove of the
        # rest, bounded by the queue, and a shard drains one key's backlog at most 1,000
        # Kinesis records a second.
        self.entries: list[Entry] = []
        self.state = IDLE
        self.queued = False  # present in lane.ready (possibly stale: state is the truth)
        self.key = key
        self.hash_key = hash_key
        self.explicit_hash_key = None if isinstance(key, str) else key[1]
        self.pinned = False
        self.lane = lane
        self.nbytes = 0
        self.not_before = 0.0


class Lane:
    """A queue of ready domains whose records may share an aggregate, and of keys' lone
    records (waiting as themselves, with no domain): one half of a shard's hash range (see
    ``_waiting``), or a lane with no prediction.

    ``stale``: its shard is known to be gone or unknown (an acknowledgement came from another
    shard, or no listed shard owns its keys), so its records may land on shards it cannot
    predict; a Kinesis record built from it then holds one domain's records, a single hash
    key, which lands whole wherever the service places it.
    """

    __slots__ = ("left", "oldest", "ready", "resume_at", "shard_id", "stale")

    def __init__(self, shard_id: str, *, stale: bool = False) -> None:
        self.shard_id = shard_id
        self.stale = stale
        # One entry per domain object (the ``queued`` flag) or lone record waiting, plus the
        # places left (``left``): entries whose domain moved on, or whose lone record joined
        # a domain or expired (see WaitingRoom.head), are stale and dropped when they reach
        # the head. So bounded like the domains and the records: the waiting room sweeps the
        # places left out once they are half the queue.
        self.ready: deque[Domain | Entry] = deque()
        self.left = 0  # places left by lone records that joined a domain, or by expiries
        self.resume_at = 0.0
        self.oldest = 0.0  # when its head record was accepted, as read by the last call built


def key_bytes(partition_key: str) -> int:
    """A partition key's size in UTF-8 bytes (ASCII keys, the common case, without encoding)."""
    return len(partition_key) if partition_key.isascii() else len(partition_key.encode("utf-8"))
