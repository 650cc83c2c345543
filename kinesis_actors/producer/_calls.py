"""What travels through the producer: accepted records, and the PutRecords calls built of them.

The call limits are the service's (lesson 21: a client that sent 501-record batches had every
such call rejected); the KPL caps a call at 5 MiB, which is the default here too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..records import OutboundRecord
from ._handle import PutHandle

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_CALL_BYTES",
    "PUT_RECORDS_MAX_BYTES",
    "PUT_RECORDS_MAX_RECORDS",
    "Call",
    "Entry",
    "Part",
]

PUT_RECORDS_MAX_RECORDS = 500
PUT_RECORDS_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_CALL_BYTES = 5 * 1024 * 1024
DEFAULT_LINGER = 0.1


class Entry(PutHandle):
    """One accepted user record on its way, and its own :class:`PutHandle`.

    ``put`` returns the entry itself as the record's handle (one object per record, not an
    entry and a handle: measured, the second allocation cost CPU and garbage collections).
    ``handle`` is another handle to settle instead (``put_many(handles=...)``), else
    ``None``; it is opaque to the pipeline. Settling drops ``data``, so a caller keeping
    handles keeps results, not records.
    """

    __slots__ = (
        "attempts",
        "data",
        "enqueued",
        "epoch",
        "explicit_hash_key",
        "handle",
        "hash_key",
        "last_error",
        "partition_key",
        "size",
        "unknown_outcomes",
    )

    def __init__(  # noqa: PLR0917 - built once per record on the hot path
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | None,
        hash_key: int,
        size: int,
        enqueued: float,
        handle: Any = None,
        epoch: int = 0,
    ) -> None:
        # PutHandle's state, set here rather than by a super().__init__ call (hot path).
        self._error = None
        self._event = None
        self._sequence_number = None
        self.data = data
        self.partition_key = partition_key
        self.explicit_hash_key = explicit_hash_key
        self.hash_key = hash_key
        self.size = size
        self.enqueued = enqueued
        self.handle = handle
        self.epoch = epoch
        self.attempts = 0
        self.unknown_outcomes = 0  # attempts whose outcome was unknown (see _retries)
        self.last_error: BaseException | None = None


class Part(NamedTuple):
    """One Kinesis record of a call and the user records inside it, in sub-sequence order."""

    record: OutboundRecord
    lane: str
    entries: list[Entry]
    size: int


class Call(NamedTuple):
    """One PutRecords call: its Kinesis records and their total size (data plus keys)."""

    parts: list[Part]
    nbytes: int

    def records(self) -> list[tuple[bytes, str, str | None]]:
        """``(data, partition_key, explicit_hash_key)`` per Kinesis record, in call order."""
        return [
            (part.record.data, part.record.partition_key, part.record.explicit_hash_key)
            for part in self.parts
        ]
