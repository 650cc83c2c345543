"""The producer's ledger: what was accepted, and how each record ended.

Every record ends here exactly once: acknowledged (:meth:`Ledger.acknowledge`, a PutRecords
answer's written records together) or failed (:meth:`Ledger.settle`). Settling gives the
record's room back to the queue, counts it, and counts it off its flush epoch, so a ``flush``
knows when everything accepted before it has settled. A failure with ``fail_on_error`` is kept
as the producer's failure; the senders' supervisor giving up, or the dispatcher crashing, is
kept apart, as ``broken``.

A failure with ``fail_on_error`` stops the producer (``put`` and ``flush`` raise) whoever looked
at it, but leaving the block raises only for failures no handle gave to the caller
(:meth:`Ledger.exit_error`): an error the caller took from its record's handle was
reported once, where it was asked for, and raising it again at the exit would punish the code
that handled it. One nobody retrieved must not pass in silence, so the exit raises it.

Sans-IO but for the clock read that rate-limits the failure log and the event a flush
waits on. A component of the :class:`~._producer.Producer`, which alone holds one, and the
one writer of its fields. Two of its containers are written from the put path as well, by
rule: the intake counts each admitted record in ``outstanding`` (its flush epoch's count,
which :meth:`Ledger.settle` counts off) and takes entries from ``spares`` (which settling
refills); a method call per record there was what the put path could not afford.
"""

from __future__ import annotations

import logging
import math

import anyio

from .. import errors
from ..runtime import Mailbox, RestartIntensityExceeded
from ._calls import Part
from ._config import ProducerConfig
from ._entry import Entry
from ._handle import NO_OUTCOMES, Outcomes, PutResult

__all__ = ["Ledger"]

log = logging.getLogger("kinesis_actors.producer")


class Ledger:
    """Counts, flush epochs and failures of one producer; see the module's docstring."""

    def __init__(self, stream: str, config: ProducerConfig) -> None:
        self._stream = stream
        self._config = config
        self._queue: Mailbox[Entry] | None = None  # the dispatcher's mailbox, once open
        self._counters = dict.fromkeys(("records_sent", "records_failed"), 0)
        # Records not settled, per flush epoch: counted in by the intake, off here.
        self.outstanding: dict[int, int] = {}
        self._settled: anyio.Event | None = None  # set when an epoch has nothing outstanding
        self._failure: BaseException | None = None
        # The senders' supervisor gave up (RestartIntensityExceeded), or the dispatcher crashed.
        self._broken: Exception | None = None
        # A failure counts against the producer, or the senders gave up: it takes no more
        # records. One flag, read by every put.
        self.stopped = False
        # Failed slots that count against the producer, in failure order; their Outcomes say
        # which are still unretrieved. Bounded by what was accepted before the first failure
        # (after it, put takes no more records).
        self._counted_failures: list[tuple[Outcomes, int]] = []
        self._last_failure_log = -math.inf
        # Settled entries, taken by the put path (see Entry): at most a queue's worth.
        self.spares: list[Entry] = []
        self._spare_limit = 0  # the queue's capacity in records, once open

    @property
    def records_sent(self) -> int:
        """Records acknowledged."""
        return self._counters["records_sent"]

    @property
    def records_failed(self) -> int:
        """Records failed for good."""
        return self._counters["records_failed"]

    def open(self, queue: Mailbox[Entry]) -> None:
        """Settling gives each record's room back to ``queue`` from now on."""
        self._queue = queue
        self._spare_limit = queue.capacity

    def mark_broken(self, failure: Exception) -> None:
        """The senders' supervisor gave up (``failure`` is its
        :class:`RestartIntensityExceeded`), or the dispatcher crashed (``failure`` is the
        crash): the producer has failed."""
        self._broken = failure
        self.stopped = True
        if self._settled is not None:
            self._settled.set()  # a flush waiting for records no one may settle now: see below

    async def wait_settled(self, target: int) -> None:
        """Wait until no record of epoch ``target`` or earlier is outstanding, or until the
        producer failed by a crash (:meth:`mark_broken`): then the caller raises the failure
        at once, rather than wait for records whose settling the crash may have lost (the
        exit's drain and the senders' cancellation settle every record still known)."""
        while self._broken is None and any(epoch <= target for epoch in self.outstanding):
            # Shared by concurrent flushes: replacing an unset event would strand the flush
            # already waiting on it (two flushes at once hung the first).
            if self._settled is None or self._settled.is_set():
                self._settled = anyio.Event()
            await self._settled.wait()

    def acknowledge(
        self, parts: list[Part | Entry], shard_ids: list[str], sequence_numbers: list[str]
    ) -> None:
        """A PutRecords answer's written Kinesis records (``parts``, each with its shard and
        sequence number): settle their user records together (one release of their room and
        one count per answer, not one per record), and keep the entries as spares."""
        records = nbytes = 0
        epoch, count = parts[0].entries[0].epoch, 0
        settled_in = self._settled_in
        spares = self.spares
        for part, shard_id, sequence_number in zip(parts, shard_ids, sequence_numbers, strict=True):
            entries = part.entries  # a record sent alone: [itself], made here, dropped here
            landing = (shard_id, sequence_number)  # one for the Kinesis record's records
            for index, entry in enumerate(entries):
                # Outcomes.acknowledge, inlined (the call was ~5 % of an aggregated put_many).
                outcomes, slot = entry.outcomes, entry.slot
                landed = outcomes.landed
                if landed[slot] is not None:
                    raise RuntimeError("a put handle settles once")
                outcomes.sub_sequence_numbers[slot] = index  # first: done() reads landed
                landed[slot] = landing
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
        remaining = self.outstanding[epoch] - count
        if remaining:
            self.outstanding[epoch] = remaining
        else:
            del self.outstanding[epoch]
            if self._settled is not None:
                self._settled.set()

    def settle(self, entry: Entry, result: PutResult | None, error: BaseException | None) -> None:
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
            if self._record_failure(error):
                # Before failing the slot: a caller who sees the error can claim it.
                if outcomes.unretrieved is None:
                    outcomes.unretrieved = set()
                outcomes.unretrieved.add(slot)
                self._counted_failures.append((outcomes, slot))
            outcomes.fail(slot, error)
            counters["records_failed"] += 1
        queue = self._queue
        if queue is not None:
            queue.release(1, entry.size)
        self._settled_in(entry.epoch, 1)
        if len(self.spares) < self._spare_limit:
            self.spares.append(entry)

    def _record_failure(self, error: BaseException) -> bool:
        """Count and log a record's failure; whether it counts against the producer."""
        closing = isinstance(
            error, errors.ProducerClosedError
        )  # the closer's doing, not the stream's
        counts = self._config.fail_on_error and not closing
        if counts and self._failure is None:
            self._failure = error
            self.stopped = True
        now = anyio.current_time()
        if now - self._last_failure_log >= self._config.backpressure_warning_interval:
            self._last_failure_log = now
            log.error(
                "producer for stream %r gave up on a record: %s (%d failed so far)",
                self._stream,
                error,
                self._counters["records_failed"] + 1,
            )
        return counts

    def _unretrieved_failure(self) -> tuple[BaseException, int] | None:
        """The first failure that counts against the producer and that no handle gave to the
        caller, with how many such failures there are; ``None`` when there is none."""
        first: BaseException | None = None
        count = 0
        for outcomes, slot in self._counted_failures:
            unretrieved = outcomes.unretrieved
            if unretrieved is not None and slot in unretrieved:
                count += 1
                if first is None:
                    first = outcomes.errors.get(slot)
        return None if first is None else (first, count)

    def forget(self, epoch: int) -> None:
        """A record counted in ``epoch`` was not queued after all."""
        self._settled_in(epoch, 1)

    def stopped_error(self) -> errors.KinesisError:
        """What a put that found the queue closed raises."""
        if self._broken is not None or self._failure is not None:
            return self.failed_error()
        return errors.ProducerClosedError(
            f"producer for {self._stream!r} closed while this put waited for room"
        )

    def exit_error(self) -> errors.ProducerFailedError | None:
        """What a normal exit raises: the senders' supervisor giving up, or a failure that
        counts against the producer and that no handle gave to the caller; else ``None``."""
        if self._broken is not None:
            return self.failed_error()
        unretrieved = self._unretrieved_failure()
        if unretrieved is None:
            return None
        first, count = unretrieved
        error = errors.ProducerFailedError(
            f"producer for {self._stream!r} failed: {count} record(s) could not be written and "
            f"no handle gave their error to the caller; the first: {first} (await each "
            "handle, or call its exception(), to handle a failure yourself; "
            "ProducerConfig(fail_on_error=False) leaves failures on the handles only)"
        )
        error.__cause__ = first
        return error

    def failed_error(self) -> errors.ProducerFailedError:
        """What ``put`` and ``flush`` raise once the producer has failed (:attr:`stopped`)."""
        broken = self._broken
        if isinstance(broken, RestartIntensityExceeded):
            failed = errors.ProducerFailedError(
                f"producer for {self._stream!r} failed: its senders crashed more than "
                f"{broken.max_restarts} time(s) within {broken.period} s (restart_intensity); "
                f"causes: {'; '.join(repr(cause) for cause in broken.causes)}"
            )
            failed.__cause__ = broken
            return failed
        if broken is not None:
            failed = errors.ProducerFailedError(
                f"producer for {self._stream!r} failed: its dispatcher crashed ({broken!r}), "
                "a bug; it was not restarted over the queue's state it was changing, and every "
                "record not acknowledged failed"
            )
            failed.__cause__ = broken
            return failed
        error = errors.ProducerFailedError(
            f"producer for {self._stream!r} failed: a record could not be written "
            f"({self._failure}); fail_on_error=True stops the producer"
        )
        error.__cause__ = self._failure
        return error
