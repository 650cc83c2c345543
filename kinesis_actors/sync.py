"""Blocking equivalents for threads and Spark tasks.

:class:`SyncProducer` runs a :class:`~kinesis_actors.Producer` on an event loop in a thread of
its own (anyio's blocking portal). ``put`` validates the record in the caller's thread, so bad
input raises at once, and hands records to the loop in batches: one thread hop per batch, not
per record, because a hop costs about as much as a hundred puts. While the producer's queue is
full, the hop waits: the caller's thread is backpressured, memory stays bounded.

Every way out is bounded: ``close(timeout=...)`` returns within its timeout (plus
the client's own bounded shutdown), failing what is left with ProducerClosedError, including
a ``put`` blocked on a full queue in another thread; before, such a close never returned.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from ._validate import check_non_negative
from .client import AssumeRole, ClientConfig, KinesisClient, StreamRef
from .errors import ConfigError, KinesisError, ProducerClosedError, ValidationError
from .producer import (
    Producer,
    ProducerConfig,
    ProducerMetrics,
    PutHandle,
    PutHandles,
    StreamInfo,
    fail_unsent,
)
from .runtime import unwrap_sole

__all__ = ["SyncProducer"]

_Item = tuple[bytes, str, str | None, PutHandle]
_HANDLE_BLOCK = 256  # single puts' handles made together (a kept handle keeps ~6 KB)

#: After an abort, how long the admitting and flushing task may take to end before it is
#: cancelled. The abort settles every record, which ends it at once; this bound is for a
#: bug of ours that would leave one unsettled: close() still returns.
_ABORT_GRACE = 1.0

log = logging.getLogger("kinesis_actors.producer")


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class SyncProducer:
    """A producer for code without an event loop: ``put``, ``flush``, ``close``.

    ``put`` returns the record's :class:`~kinesis_actors.PutHandle`; after ``flush`` every
    handle of an earlier ``put`` is settled (``handle.result()`` gives the result or raises).
    Records are handed to the loop every ``batch_size`` puts, on ``flush`` and on ``close``.
    Thread-safe: threads may share one; each thread's records enter the queue in the order
    it put them. Use it as a context manager; leaving flushes and, unless the block raised, raises
    :class:`~kinesis_actors.errors.ProducerFailedError` if a record failed for good.
    ``stream_info`` is passed on to :class:`~kinesis_actors.Producer` (skips the describe call
    at open; the Spark sink's tasks get their driver's).
    """

    def __init__(
        self,
        stream: str,
        *,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        verify: bool | str = True,
        credentials: tuple[str, ...] | AssumeRole | None = None,
        config: ProducerConfig | None = None,
        client_config: ClientConfig | None = None,
        batch_size: int = 256,
        backend: str = "asyncio",
        stream_info: StreamInfo | None = None,
    ) -> None:
        StreamRef.parse(stream, option="stream", region=region)  # before the loop thread
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if backend not in ("asyncio", "trio"):
            raise ConfigError(f"backend must be 'asyncio' or 'trio', got {backend!r}")
        self._batch_size = batch_size
        self._pending: list[_Item] = []
        self._block = PutHandles(0)  # the block single puts take their handles from
        self._block_slot = 0
        self._lock = threading.Lock()
        self._closed = False
        self._stack = contextlib.ExitStack()
        client = KinesisClient(region, endpoint_url, verify, credentials, config=client_config)
        producer = Producer(client, stream, config, stream_info=stream_info)  # validates first
        try:
            self._portal: BlockingPortal = self._stack.enter_context(start_blocking_portal(backend))
            self._stack.enter_context(self._portal.wrap_async_context_manager(client))
            self._producer = self._stack.enter_context(
                self._portal.wrap_async_context_manager(producer)
            )
        except BaseException:
            self._stack.close()
            raise

    @property
    def producer(self) -> Producer:
        """The async producer underneath (read its properties; call it only via the portal)."""
        return self._producer

    def statistics(self) -> ProducerMetrics:
        """The producer now, as a frozen :class:`~kinesis_actors.producer.ProducerMetrics`
        (``Producer.statistics()``), from any thread.

        While the producer runs, the snapshot is taken on its event loop (one portal round
        trip): the supervision tree in it is the loop's to read. Once the loop has stopped,
        it is read directly.
        """
        try:
            return self._portal.call(self._producer.statistics)
        except RuntimeError:  # the loop has stopped, or this is the loop's own thread
            return self._producer.statistics()

    @property
    def metrics(self) -> ProducerMetrics:
        """The same snapshot as :meth:`statistics`, under the name the public contract
        gives it; both stay."""
        return self.statistics()

    def put(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> PutHandle:
        """Validate and buffer one record; may block while the producer's queue is full.

        Raises :class:`~kinesis_actors.errors.ProducerClosedError` after ``close``, and when
        ``close`` gave up waiting while this call was blocked.
        """
        self._check_open()
        data = self._producer.prepare(data, partition_key, explicit_hash_key)[0]
        with self._lock:
            self._check_open()  # under the lock: close takes the buffer under it
            # A slot of the current block of handles (one object per block, not per record).
            slot = self._block_slot
            if slot == len(self._block):
                self._block, slot = PutHandles(_HANDLE_BLOCK), 0
            self._block_slot = slot + 1
            handle = self._block[slot]
            self._pending.append((data, partition_key, explicit_hash_key, handle))
            if len(self._pending) >= self._batch_size:
                self._submit()
        return handle

    def put_many(self, records: Iterable[Sequence[Any]]) -> PutHandles:
        """Validate and buffer many ``(data, partition_key[, explicit_hash_key])`` records;
        a handle per record. May block while the producer's queue is full.

        Every record is validated first: a bad one raises its typed error naming its index
        ("record 3 of the batch: ...") and none of the batch is buffered. Then the batch
        enters the buffer under one lock (one thread's records stay in order) and crosses to
        the loop through the producer's ``put_many``.
        """
        self._check_open()
        prepare = self._producer.prepare
        items: list[tuple[bytes, str, str | None]] = []
        for index, record in enumerate(records):
            if not 2 <= len(record) <= 3:
                raise ValidationError(
                    f"record {index} of the batch: expected (data, partition_key[, "
                    f"explicit_hash_key]), got {len(record)} fields"
                )
            key = record[1]
            hash_key = record[2] if len(record) == 3 else None
            try:
                data = prepare(record[0], key, hash_key)[0]
            except KinesisError as exc:
                raise type(exc)(f"record {index} of the batch: {exc}") from exc
            items.append((data, key, hash_key))
        handles = PutHandles(len(items))
        with self._lock:
            self._check_open()
            self._pending.extend(
                (data, key, hash_key, handle)
                for (data, key, hash_key), handle in zip(items, handles, strict=True)
            )
            if len(self._pending) >= self._batch_size:
                self._submit()
        return handles

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait until every record so far is settled.

        With ``timeout`` (seconds), raise :class:`TimeoutError` if that takes longer; the
        records stay in flight. After ``close``, raises
        :class:`~kinesis_actors.errors.ProducerClosedError`.
        """
        with self._lock:
            self._check_open()
            self._submit()
        try:
            self._portal.call(self._flush_within, timeout)
        except RuntimeError:  # the portal stopped: close ran meanwhile
            self._check_open()
            raise

    async def _flush_within(self, seconds: float | None) -> None:
        with anyio.fail_after(seconds):
            await self._producer.flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the producer, the client and the loop thread. Idempotent.

        With ``timeout`` (seconds), stop waiting for the flush after that long: every record
        not yet settled then fails with :class:`~kinesis_actors.errors.ProducerClosedError`
        (those in flight "may or may not have been written"), as does every ``put`` still
        blocked on a full queue in any thread, and ``close`` returns. Raises
        :class:`~kinesis_actors.errors.ProducerFailedError` if a record failed for good
        before (``fail_on_error``).
        """
        if timeout is not None:
            check_non_negative("SyncProducer.close timeout", timeout)
        self._close(timeout, self._closed_error(f"closed after its {timeout}s timeout"))

    def _close(self, timeout: float | None, error: ProducerClosedError) -> None:
        """Close, failing with ``error`` what is not settled within ``timeout`` seconds."""
        if self._closed:
            return
        self._closed = True
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            # A put blocked on a full queue holds the lock until room comes, or until the
            # deadline's abort below wakes it.
            wait = _remaining(deadline)
            if self._lock.acquire(timeout=-1 if wait is None else wait):
                try:
                    batch, self._pending = self._pending, []
                    self._portal.call(self._close_within, batch, _remaining(deadline), error)
                finally:
                    self._lock.release()
            else:
                self._portal.call(self._producer.abort, error)
                with self._lock:
                    batch, self._pending = self._pending, []
                self._fail(batch, error)
        finally:
            self._stack.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ProducerClosedError(f"SyncProducer for {self._producer.stream!r} is closed")

    def _closed_error(self, why: str) -> ProducerClosedError:
        return ProducerClosedError(
            f"SyncProducer for {self._producer.stream!r} {why} before this record was acknowledged"
        )

    async def _close_within(
        self, batch: list[_Item], seconds: float | None, error: ProducerClosedError
    ) -> None:
        """Admit ``batch`` and wait until everything is settled; past ``seconds``, abort with
        ``error``.

        The admitting and flushing task is not cancelled at the deadline (a cancelled admit
        would leave its records in limbo): the abort fails what is left, which ends it.
        """
        done = anyio.Event()

        async def admit_and_flush() -> None:
            try:
                await self._admit_all(batch)
                await self._producer.flush()
            except KinesisError:
                pass  # on the records' handles; a failure is raised by the producer's exit
            finally:
                done.set()

        with unwrap_sole():  # a bug of ours as itself, not a group of one
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(admit_and_flush)
                with anyio.move_on_after(math.inf if seconds is None else seconds):
                    await done.wait()
                if not done.is_set():
                    self._producer.abort(error)
                    with anyio.move_on_after(_ABORT_GRACE):
                        await done.wait()
                    if not done.is_set():
                        log.error(
                            "SyncProducer for %r: the flush did not end %.1f s after the "
                            "abort (a bug); cancelled so that close() returns",
                            self._producer.stream,
                            _ABORT_GRACE,
                        )
                        task_group.cancel_scope.cancel()

    @staticmethod
    def _fail(batch: list[_Item], error: BaseException) -> None:
        fail_unsent((handle for *_, handle in batch), error)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leave the block: normally, :meth:`close`; because of an exception, a bounded close.

        An :class:`Exception` gives the records put so far ``config.exit_grace`` to be
        acknowledged, any other exception (``KeyboardInterrupt``, ``SystemExit``) none; what
        is left fails with ProducerClosedError, as in ``close(timeout=...)``. The exception
        then leaves as itself: it never enters the loop thread (there a ``SystemExit`` would
        stop the loop and reach the caller as "This portal is not running"), and a failure
        of ours while closing is on the handles, not raised over the block's own.
        """
        if exc is None:
            self.close()
            return
        grace, why = 0.0, f"left its block on {type(exc).__name__}"
        if isinstance(exc, Exception):
            grace = self._producer.config.exit_grace
            why += f" (exit_grace={grace}s)"
        with contextlib.suppress(KinesisError):  # the block's own exception wins
            self._close(grace, self._closed_error(why))

    def _submit(self) -> None:
        """Hand the buffer to the loop. Callers hold ``_lock``: batches enter in put order."""
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        self._portal.call(self._admit_all, batch)

    async def _admit_all(self, batch: list[_Item]) -> None:
        """The batch through the producer's public ``put_many``, settling our handles; a
        record that never got in has the error on its handle too."""
        await self._producer.put_many(
            [(data, key, hash_key) for data, key, hash_key, _ in batch],
            handles=[handle for *_, handle in batch],
        )
