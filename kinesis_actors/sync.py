"""Blocking equivalents for threads and Spark tasks.

:class:`SyncProducer` runs a :class:`~kinesis_actors.Producer` on an event loop in a thread of
its own (anyio's blocking portal). ``put`` validates the record in the caller's thread, so bad
input raises at once, and hands records to the loop in batches: one thread hop per batch, not
per record, because a hop costs about as much as a hundred puts. While the producer's queue is
full, the hop waits: the caller's thread is backpressured, memory stays bounded.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from .client import ClientConfig, KinesisClient
from .errors import ConfigError, ProducerClosedError
from .producer import Producer, ProducerConfig, ProducerMetrics, PutHandle, StreamInfo

__all__ = ["SyncProducer"]

_Item = tuple[bytes, str, str | None, int, int, PutHandle]


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
        credentials: tuple[str, ...] | None = None,
        config: ProducerConfig | None = None,
        client_config: ClientConfig | None = None,
        batch_size: int = 256,
        backend: str = "asyncio",
        stream_info: StreamInfo | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if backend not in ("asyncio", "trio"):
            raise ConfigError(f"backend must be 'asyncio' or 'trio', got {backend!r}")
        self._batch_size = batch_size
        self._pending: list[_Item] = []
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

    @property
    def metrics(self) -> ProducerMetrics:
        """A snapshot of the producer's counters."""
        return self._producer.metrics

    def put(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> PutHandle:
        """Validate and buffer one record; may block while the producer's queue is full."""
        if self._closed:
            raise ProducerClosedError(f"SyncProducer for {self._producer.stream!r} is closed")
        data, size, hashed = self._producer.prepare(data, partition_key, explicit_hash_key)
        handle = PutHandle()
        with self._lock:
            self._pending.append((data, partition_key, explicit_hash_key, size, hashed, handle))
            if len(self._pending) >= self._batch_size:
                self._submit()
        return handle

    def put_many(self, records: Iterable[tuple[Any, ...]]) -> list[PutHandle]:
        """``put`` for each ``(data, partition_key[, explicit_hash_key])``."""
        return [self.put(*record) for record in records]

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait until every record so far is settled.

        With ``timeout`` (seconds), raise :class:`TimeoutError` if that takes longer; the
        records stay in flight.
        """
        with self._lock:
            self._submit()
        self._portal.call(self._flush_within, timeout)

    async def _flush_within(self, seconds: float | None) -> None:
        with anyio.fail_after(seconds):
            await self._producer.flush()

    def close(self) -> None:
        """Flush, then stop the producer, the client and the loop thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            with self._lock:
                self._submit()
        finally:
            self._stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        self._closed = True
        with contextlib.suppress(Exception), self._lock:  # the block's own error wins
            self._submit()
        self._stack.__exit__(exc_type, exc, tb)

    def _submit(self) -> None:
        """Hand the buffer to the loop. Callers hold ``_lock``: batches enter in put order."""
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        self._portal.call(self._admit_all, batch)

    async def _admit_all(self, batch: list[_Item]) -> None:
        admit = self._producer._admit
        for index, (data, key, hash_key, size, hashed, handle) in enumerate(batch):
            try:
                await admit(data, key, hash_key, size, hashed, handle)
            except BaseException as exc:
                # The caller sees this error; the records that never got in must say so too.
                for *_, unsent in batch[index:]:
                    unsent._set_error(exc)
                raise
