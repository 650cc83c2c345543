"""What travels through the producer: the PutRecords calls built of accepted records
(:class:`~._entry.Entry`).

The call limits are the service's (a client that sent 501-record batches had every
such call rejected); the KPL caps a call at 5 MiB, which is the default here too.
"""

from __future__ import annotations

from typing import NamedTuple

from ._domains import Domain
from ._entry import Entry

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_CALL_BYTES",
    "PUT_RECORDS_MAX_BYTES",
    "PUT_RECORDS_MAX_RECORDS",
    "Call",
    "Part",
]

PUT_RECORDS_MAX_RECORDS = 500
PUT_RECORDS_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_CALL_BYTES = 5 * 1024 * 1024
DEFAULT_LINGER = 0.1


class Part(NamedTuple):
    """One Kinesis record of a call holding several user records (an aggregate), those
    records in sub-sequence order, and the ordering domains they were taken from (with
    ``preserve_order``, released once per domain when the answer comes), a key's lone record
    standing for its key. A record sent alone is its own part (an :class:`Entry`)."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | None
    lane: str
    entries: list[Entry]
    size: int
    domains: list[Domain | Entry]


class Call(NamedTuple):
    """One PutRecords call: its Kinesis records and their total size (data plus keys)."""

    parts: list[Part | Entry]
    nbytes: int

    def records(self) -> list[tuple[bytes, str, str | None]]:
        """``(data, partition_key, explicit_hash_key)`` per Kinesis record, in call order."""
        return [(part.data, part.partition_key, part.explicit_hash_key) for part in self.parts]
