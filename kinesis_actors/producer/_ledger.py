"""The producer's ledger: what was accepted, and how each record ended.

Every record ends here exactly once: acknowledged (:meth:`Ledger._acknowledge`, a PutRecords
answer's written records together) or failed (:meth:`Ledger._settle`). Settling gives the
record's room back to the queue, counts it, and counts it off its flush epoch, so a ``flush``
knows when everything accepted before it has settled. A failure with ``fail_on_error`` is kept
as the producer's failure; the senders' supervisor giving up is kept apart, as ``_broken``.

Sans-IO but for the clock read that rate-limits the failure log; :class:`~._producer.Producer`
extends it (inheritance, not delegation: the put path gains no call).
"""

from __future__ import annotations

import logging
import math

import anyio

from .. import errors
from ..runtime import Mailbox, RestartIntensityExceeded
from ._calls import Entry, Part
from ._config import ProducerConfig
from ._handle import NO_OUTCOMES, PutResult

__all__ = ["Ledger"]

log = logging.getLogger("kinesis_actors.producer")


class Ledger:
    """Counts, flush epochs and failures of one producer; see the module's docstring."""

    def __init__(self, stream: str, config: ProducerConfig) -> None:
        self._stream = stream
        self._config = config
        self._queue: Mailbox[Entry] | None = None  # the dispatcher's mailbox, once open
        self._counters = dict.fromkeys(("records_sent", "records_failed"), 0)
        self._epoch = 0
        self._epoch_outstanding: dict[int, int] = {}  # records not settled, per flush epoch
        self._settled: anyio.Event | None = None
        self._failure: BaseException | None = None
        self._broken: RestartIntensityExceeded | None = None  # the senders' supervisor gave up
        self._last_failure_log = -math.inf
        # Settled entries, refilled by the put path (see Entry): at most a queue's worth.
        self._spares: list[Entry] = []
        self._spare_limit = config.queue_limit_records

    def _acknowledge(
        self, parts: list[Part | Entry], shard_ids: list[str], sequence_numbers: list[str]
    ) -> None:
        """A PutRecords answer's written Kinesis records (``parts``, each with its shard and
        sequence number): settle their user records together (one release of their room and
        one count per answer, not one per record), and keep the entries as spares."""
        records = nbytes = 0
        epoch, count = parts[0].entries[0].epoch, 0
        settled_in = self._settled_in
        spares = self._spares
        for part, shard_id, sequence_number in zip(parts, shard_ids, sequence_numbers, strict=True):
            entries = part.entries  # a record sent alone: [itself], made here, dropped here
            for index, entry in enumerate(entries):
                # Outcomes.acknowledge, inlined (the call was ~5 % of an aggregated put_many).
                outcomes, slot = entry.outcomes, entry.slot
                if outcomes.sequence_numbers[slot] is not None or slot in outcomes.errors:
                    raise RuntimeError("a put handle settles once")
                outcomes.shard_ids[slot] = shard_id
                outcomes.sub_sequence_numbers[slot] = index
                outcomes.sequence_numbers[slot] = sequence_number
                if outcomes.events is not None:
                    outcomes.wake(slot)
                # A spare holds no record, nor a retried failure's traceback (its call's
                # frames), nor the caller's block (its results, maybe failures with frames).
                entry.data = b""
                entry.last_error = None
                entry.outcomes = NO_OUTCOMES
                nbytes += entry.size
                if entry.epoch != epoch:
                    settled_in(epoch, count)
                    epoch, count = entry.epoch, 0
                count += 1
            records += len(entries)
            room = self._spare_limit - len(spares)
            if room > 0:
                spares += entries if len(entries) <= room else entries[:room]
        settled_in(epoch, count)
        self._counters["records_sent"] += records
        assert self._queue is not None
        self._queue.release(records, nbytes)

    def _settled_in(self, epoch: int, count: int) -> None:
        remaining = self._epoch_outstanding[epoch] - count
        if remaining:
            self._epoch_outstanding[epoch] = remaining
        else:
            del self._epoch_outstanding[epoch]
            if self._settled is not None:
                self._settled.set()

    def _settle(self, entry: Entry, result: PutResult | None, error: BaseException | None) -> None:
        """Every record ends here exactly once (called by the pipeline)."""
        outcomes, slot = entry.outcomes, entry.slot
        entry.data = b""  # a spare holds no record,
        entry.last_error = None  # no failure (a final error holds it as its __cause__),
        entry.outcomes = NO_OUTCOMES  # and no caller's block
        counters = self._counters
        if error is None:
            assert result is not None
            outcomes.acknowledge(slot, *result)
            counters["records_sent"] += 1
        else:
            outcomes.fail(slot, error)
            counters["records_failed"] += 1
            self._record_failure(error)
        queue = self._queue
        if queue is not None:
            queue.release(1, entry.size)
        self._settled_in(entry.epoch, 1)
        if len(self._spares) < self._spare_limit:
            self._spares.append(entry)

    def _record_failure(self, error: BaseException) -> None:
        closing = isinstance(
            error, errors.ProducerClosedError
        )  # the closer's doing, not the stream's
        if self._config.fail_on_error and self._failure is None and not closing:
            self._failure = error
        now = anyio.current_time()
        if now - self._last_failure_log >= self._config.backpressure_warning_interval:
            self._last_failure_log = now
            log.error(
                "producer for stream %r gave up on a record: %s (%d failed so far)",
                self._stream,
                error,
                self._counters["records_failed"],
            )

    def _forget(self, epoch: int) -> None:
        """A record counted in ``epoch`` was not queued after all."""
        self._settled_in(epoch, 1)

    def _stopped_error(self) -> errors.KinesisError:
        if self._broken is not None or self._failure is not None:
            return self._failed_error()
        return errors.ProducerClosedError(
            f"producer for {self._stream!r} closed while this put waited for room"
        )

    def _failed_error(self) -> errors.ProducerFailedError:
        broken = self._broken
        if broken is not None:
            failed = errors.ProducerFailedError(
                f"producer for {self._stream!r} failed: its senders crashed more than "
                f"{broken.max_restarts} time(s) within {broken.period} s (restart_intensity); "
                f"causes: {'; '.join(repr(cause) for cause in broken.causes)}"
            )
            failed.__cause__ = broken
            return failed
        error = errors.ProducerFailedError(
            f"producer for {self._stream!r} failed: a record could not be written "
            f"({self._failure}); fail_on_error=True stops the producer"
        )
        error.__cause__ = self._failure
        return error
