"""How records get into a producer: validation, a slot for each outcome, and admission
into the bounded queue, waiting while it is full (the backpressure).

:class:`Intake` is the put side of :class:`~._producer.Producer`, which extends it
(inheritance: the put path gains no call). It owns the flush epoch records are admitted in
and the blocks single puts settle into, and holds the producer's
:class:`~._ledger.Ledger`; what it reads of the lifecycle (``_state``, ``_queue``,
``_sender``, ``_max_record_bytes``) is the Producer's to write. The queue is the dispatcher
actor's mailbox; a record is admitted with its room (one record, its size in bytes) and a
count in the ledger's ``outstanding`` for its flush epoch, and that room comes back when
the ledger settles it. Entries come from the ledger's spares first (see
:class:`~._entry.Entry`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NoReturn

import anyio

from .. import errors
from ..runtime import Mailbox, MailboxClosed
from ._config import ProducerConfig
from ._entry import Entry
from ._handle import NO_OUTCOMES, PUT_BLOCK, Outcomes, PutHandle, PutHandles, fail_unsent
from ._ledger import Ledger
from ._lifecycle import OPEN, ProducerState
from ._validation import batch_entries, key_size, known_hash_key, prepare_record, valid_hash_key

if TYPE_CHECKING:
    from ._sender import Sender

__all__ = ["Intake"]

# Puts that never wait still yield to the loop this often (put_many: records). Each yield
# is a trip through the loop and the dispatcher; measured against boto3 in the same runs
# (100-byte records, aggregation): put 1.20x at 64 -> 0.94x at 256; put_many 0.97x -> 0.81x
# at 500 (a PutRecords call's worth). 256 puts are well under a millisecond of the loop.
_CHECKPOINT_EVERY = 256
_CHECKPOINT_EVERY_MANY = 500


_view = PutHandle._view
_entry_size = attrgetter("size")  # a C callable: the mailbox calls it once per record


class Intake:
    """The put side of a producer; see the module's docstring."""

    # The lifecycle's, written by the Producer alone; read here on every put.
    _state: ProducerState
    _queue: Mailbox[Entry] | None  # the dispatcher's mailbox, once open
    _sender: Sender | None  # the dispatcher's owner, once open
    _max_record_bytes: int  # the stream's, once described

    def __init__(self, stream: str, config: ProducerConfig) -> None:
        self._stream = stream
        self._config = config
        ledger = self._ledger = Ledger(stream, config)
        # The ledger's containers the put path adds to and takes from (see _ledger): held
        # here to spare every put an attribute load.
        self._outstanding = ledger.outstanding
        self._spares = ledger.spares
        self._epoch = 0  # the flush epoch records are admitted in
        self._puts_since_checkpoint = 0
        self._put_outcomes = Outcomes(PUT_BLOCK)  # the block single puts settle into
        self._put_slot = 0

    async def put(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> PutHandle:
        """Queue one record; returns once it is inside the bounded queue.

        Waits while the queue is full (records or bytes). Raises a typed error at once for bad
        input: :class:`~kinesis_actors.errors.ValidationError` for empty data, a bad partition
        key or explicit hash key, :class:`~kinesis_actors.errors.RecordTooLargeError` for a
        record above the stream's limit; and :class:`~kinesis_actors.errors.ProducerFailedError`
        or :class:`~kinesis_actors.errors.ProducerClosedError` when it takes no more records.
        """
        # A slot of the current block (_next_slot, inlined: put is the hot path).
        outcomes, slot = self._put_outcomes, self._put_slot
        if slot == PUT_BLOCK:
            outcomes = self._put_outcomes = Outcomes(PUT_BLOCK)
            slot = 0
        self._put_slot = slot + 1
        entry: Entry | None = None  # _offer checks that the producer is open
        if explicit_hash_key is None and type(partition_key) is str and type(data) is bytes:
            # The common record, without prepare_record's call and tuple; anything else,
            # or a bad record, goes the long way for its typed error.
            hashed = known_hash_key(partition_key)
            if hashed is None:
                hashed = valid_hash_key(partition_key)
            if hashed is not None:
                if partition_key.isascii():
                    size = len(data) + len(partition_key)
                else:
                    size = len(data) + key_size(partition_key)
                if data and size <= self._max_record_bytes:
                    spares = self._spares
                    entry = spares.pop() if spares else Entry()
                    entry.fill(data, partition_key, None, hashed, size, outcomes, slot, 0)
        if entry is None:
            self._check_open()  # a closed producer's error before a bad record's
            data, size, hashed = prepare_record(
                data, partition_key, explicit_hash_key, self._max_record_bytes, self._stream
            )
            entry = Entry(data, partition_key, explicit_hash_key, hashed, size, 0.0, outcomes, slot)
        if not self._offer(entry):
            await self._send(entry)
        elif self._puts_since_checkpoint >= _CHECKPOINT_EVERY:
            self._puts_since_checkpoint = 0
            await anyio.lowlevel.cancel_shielded_checkpoint()  # accepted: never "cancelled"
        return _view(outcomes, slot)

    def put_nowait(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> PutHandle:
        """Queue one record if there is room now; raises :class:`anyio.WouldBlock` if not.

        Validates and raises as :meth:`put` does; never waits, never yields to the loop (a
        caller putting many records this way should ``await`` something now and then).
        """
        self._check_open()
        data, size, hashed = prepare_record(
            data, partition_key, explicit_hash_key, self._max_record_bytes, self._stream
        )
        outcomes, slot = self._next_slot()  # a refused record leaves its slot unused
        spares = self._spares
        entry = spares.pop() if spares else Entry()
        entry.fill(data, partition_key, explicit_hash_key, hashed, size, outcomes, slot, 0)
        if not self._offer(entry):
            entry.data, entry.outcomes = b"", NO_OUTCOMES  # never queued: a spare again
            spares.append(entry)
            raise anyio.WouldBlock
        return _view(outcomes, slot)

    def _next_epoch(self) -> int:
        """Admit records into a new flush epoch from now on: the one that ends."""
        epoch = self._epoch
        self._epoch = epoch + 1
        return epoch

    def _next_slot(self) -> tuple[Outcomes, int]:
        """A slot of the current block of single puts, taken before any wait (a concurrent
        put takes the next one)."""
        slot = self._put_slot
        if slot == PUT_BLOCK:
            self._put_outcomes, slot = Outcomes(PUT_BLOCK), 0
        self._put_slot = slot + 1
        return self._put_outcomes, slot

    async def put_many(
        self,
        records: Iterable[Sequence[Any]],
        *,
        handles: Sequence[PutHandle] | None = None,
    ) -> Sequence[PutHandle]:
        """Queue many ``(data, partition_key[, explicit_hash_key])`` records, in order; returns
        their handles (a sequence, one per record, in order), once the last is inside the
        bounded queue.

        Every record is validated before any is queued: a bad one raises its typed error
        (naming its index) and queues nothing. Then each waits for room as :meth:`put` does,
        so the queue's bounds hold whatever the batch's size. If queueing stops part way (the
        producer closed or failed, or the call was cancelled), the records before are queued
        and will settle; the others are not, and the error is raised (their ``handles``, if
        given, get it too). ``handles`` (one per record) are settled instead of new ones, for
        callers that hand out handles before the records reach the loop (``SyncProducer``).
        """
        try:
            self._check_open()
            entries, outcomes = batch_entries(
                records,
                handles,
                self._max_record_bytes,
                self._stream,
                self._epoch,
                spares=self._spares,
            )
        except BaseException as exc:
            fail_unsent(handles or (), exc)  # none was queued: every given handle says why
            raise
        offer_many, index, count = self._offer_many, 0, len(entries)
        try:
            while index < count:
                # As many as fit, up to the next checkpoint, in one go; then wait for room.
                room = _CHECKPOINT_EVERY_MANY - self._puts_since_checkpoint
                index += offer_many(entries, index, min(count, index + max(room, 1)))
                if index < count and self._puts_since_checkpoint < _CHECKPOINT_EVERY_MANY:
                    await self._send(entries[index])
                    index += 1
                elif self._puts_since_checkpoint >= _CHECKPOINT_EVERY_MANY:
                    self._puts_since_checkpoint = 0
                    await anyio.lowlevel.cancel_shielded_checkpoint()
        except BaseException as exc:
            if outcomes is None:  # the given handles of the records not queued say why
                for unsent in entries[index:]:
                    if not unsent.outcomes.done(unsent.slot):
                        unsent.outcomes.fail(unsent.slot, exc)
            raise
        if outcomes is None:
            assert handles is not None
            return handles  # the caller's own, now settling
        return PutHandles._over(outcomes)

    # -- admission ---------------------------------------------------------------------------

    def prepare(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> tuple[bytes, int, int]:
        """Validate a record without queueing it: ``(data as bytes, size, hash key)``.

        Raises the typed error ``put`` would raise. Pure, so other threads may call it.
        """
        return prepare_record(
            data, partition_key, explicit_hash_key, self._max_record_bytes, self._stream
        )

    def _offer(self, entry: Entry) -> bool:
        """Queue ``entry`` if there is room now (the put path's fast way); False if full."""
        queue = self._queue
        if queue is None or self._state is not OPEN or self._ledger.stopped:
            self._check_open()
        assert queue is not None
        epoch = entry.epoch = self._epoch
        outstanding = self._outstanding
        outstanding[epoch] = outstanding.get(epoch, 0) + 1
        try:
            queued = queue.try_send(entry, entry.size)
        except MailboxClosed:
            self._ledger.forget(epoch)
            self._raise_stopped()
        if not queued:
            self._ledger.forget(epoch)
            return False
        if len(queue) == 1:
            self._wake_sender()  # the first record of an empty queue: the dispatcher takes it
        self._puts_since_checkpoint += 1
        return True

    def _offer_many(self, entries: list[Entry], start: int, stop: int) -> int:
        """Queue ``entries[start:stop]`` while they fit (put_many's fast way): how many did."""
        queue = self._queue
        if queue is None or self._state is not OPEN or self._ledger.stopped:
            self._check_open()
        assert queue is not None
        was_empty = len(queue) == 0
        try:
            sent = queue.try_send_many(entries, start, stop, _entry_size)
        except MailboxClosed:
            self._raise_stopped()
        if sent:
            epoch = self._epoch
            if entries[start].epoch != epoch:  # a flush began since batch_entries stamped them
                for index in range(start, start + sent):
                    entries[index].epoch = epoch
            outstanding = self._outstanding
            outstanding[epoch] = outstanding.get(epoch, 0) + sent
            if was_empty:
                self._wake_sender()  # an empty queue's first records: the dispatcher takes them
            self._puts_since_checkpoint += sent
        return sent

    async def _send(self, entry: Entry) -> None:
        """Queue ``entry``, waiting for room: the backpressure (woken by acknowledgements)."""
        queue = self._queue
        assert queue is not None
        epoch = entry.epoch = self._epoch
        outstanding = self._outstanding
        outstanding[epoch] = outstanding.get(epoch, 0) + 1
        self._wake_sender()  # it watches waiting puts, to say why they wait
        try:
            await queue.send(entry, entry.size)
        except MailboxClosed:
            self._ledger.forget(epoch)
            self._raise_stopped()
        except BaseException:
            self._ledger.forget(epoch)
            raise
        self._wake_sender()

    def _raise_stopped(self) -> NoReturn:
        """Raise what a put that found the queue closed raises, with its own cause (the
        producer's failure), not the closed mailbox as its context."""
        error = self._ledger.stopped_error()
        raise error from error.__cause__

    def _wake_sender(self) -> None:
        if self._sender is not None:
            self._sender.wake()

    def _check_open(self) -> None:
        if self._state is not OPEN:
            raise errors.ProducerClosedError(
                f"producer for {self._stream!r} is {self._state}; put and flush need an open "
                "producer ('async with Producer(...)')"
            )
        if self._ledger.stopped:
            raise self._ledger.failed_error()
