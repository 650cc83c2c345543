"""What becomes of a record whose PutRecords attempt failed: again, later, or never.

The producer is the one owner of PutRecords retries: it sends each call with the
client's retries off, so every failure of a call, whole or per record, lands here once. A
client that retried ten times inside each producer attempt made ``record_ttl=1`` fail records
after 12.8-14.1 s, said "after 1 attempt(s)", and hid 9 throttles of 11 from the shard's
pacing.

Three kinds of failure, three answers:

- *Retryable* (throttling, 5xx, a dropped connection): again after a full-jitter backoff,
  until the record's deadline (``record_ttl`` after ``put``).
- *Unknown outcome* (a 2xx reply that cannot be believed, :class:`MalformedReplyError`): the
  service may or may not have written the record, so sending it again is at-least-once; it is
  sent again at most until ``max_unknown_outcomes`` such outcomes, then it fails. Resending
  without a bound wrote 100 distinct records 1,270 times.
- *Permanent* (validation, access, a missing stream, a certificate): fails at once.

Sans-IO: nothing here awaits or reads a clock; ``now`` comes in, and the jitter's random
source is injectable.
"""

from __future__ import annotations

import random
from typing import Any

from .. import errors
from ..client import is_retryable
from ._entry import Entry

__all__ = ["RecordRetries", "put_records_results"]


class RecordRetries:
    """The retry rules of one producer: deadlines, backoff and the unknown-outcome bound.

    ``record_ttl`` (None: no deadline) counts from the moment ``put`` accepted a record;
    ``retry_base``/``retry_max`` shape the backoff ceiling ``min(retry_max, retry_base *
    2**(attempts - 1))``, drawn with full jitter.
    """

    __slots__ = ("_base", "_max", "_max_unknown", "_random", "ttl")

    def __init__(
        self,
        *,
        retry_base: float,
        retry_max: float,
        record_ttl: float | None,
        max_unknown_outcomes: int,
        rng: random.Random | None = None,
    ) -> None:
        self._base = retry_base
        self._max = retry_max
        self._max_unknown = max_unknown_outcomes
        self._random = rng or random.Random()
        self.ttl = record_ttl

    def deadline(self, entry: Entry) -> float | None:
        """When ``entry`` expires, or None if records never do."""
        ttl = self.ttl
        return None if ttl is None else entry.enqueued + ttl

    def expired(self, entry: Entry, now: float) -> bool:
        """Whether ``entry`` outlived ``record_ttl`` (it must not be sent again)."""
        ttl = self.ttl
        return ttl is not None and now - entry.enqueued >= ttl

    def after_failure(
        self, entry: Entry, error: BaseException, now: float, *, unknown: bool = False
    ) -> BaseException | None:
        """Count the attempt; None means "send it again", else the error to settle it with.

        ``unknown``: the call's outcome is unknown (the record may have been written).
        """
        entry.attempts += 1
        entry.last_error = error
        if unknown:
            entry.unknown_outcomes += 1
            if entry.unknown_outcomes >= self._max_unknown:
                return self.unknown_error(entry, error)
        elif not is_retryable(error):
            return error
        if self.expired(entry, now):
            return self.expired_error(entry)
        return None

    def backoff_until(self, attempts: int, now: float) -> float:
        """When a record that failed ``attempts`` times may go again (full jitter)."""
        ceiling = min(self._max, self._base * 2 ** min(attempts - 1, 64))
        return now + self._random.uniform(0, ceiling)

    def expired_error(self, entry: Entry) -> errors.RecordExpiredError:
        """The error of a record given up at its deadline; its cause is the last failure."""
        error = errors.RecordExpiredError(
            f"record not acknowledged within record_ttl={self.ttl}s "
            f"after {entry.attempts} attempt(s)"
        )
        error.__cause__ = entry.last_error
        return error

    def unknown_error(self, entry: Entry, cause: BaseException) -> errors.MalformedReplyError:
        """The error of a record whose calls kept ending in an unknown outcome."""
        error = errors.MalformedReplyError(
            f"the outcome of {entry.unknown_outcomes} PutRecords call(s) carrying this record "
            f"was unknown (a reply that cannot be believed), in {entry.attempts} attempt(s); "
            f"it may have been written up to {entry.unknown_outcomes} time(s). Given up after "
            "max_unknown_outcomes",
            operation="PutRecords",
        )
        error.__cause__ = cause
        return error


def put_records_results(response: Any) -> list[Any]:
    """The ``Records`` of a PutRecords reply, or :class:`MalformedReplyError` (an unknown
    outcome) when there is no such list: never a bare ``KeyError`` out of the sender."""
    results = response.get("Records") if isinstance(response, dict) else None
    if not isinstance(results, list):
        raise errors.MalformedReplyError(
            f"a PutRecords reply without a Records list: {response!r:.99}",
            operation="PutRecords",
        )
    return results
