"""Take a snapshot on the event loop that owns its source, whichever thread asks for it.

An exporter collects on its own thread (OpenTelemetry's periodic reader, the Prometheus HTTP
server), but the snapshots belong to the event loop: ``Consumer.statistics()`` walks the shard
table the consumer's tasks change and reads the loop's clock. So a request from another
thread is posted to the loop and answered between two of its steps; a request made on the
loop's own thread (an async web handler serving ``/metrics``) is answered at once.

A collector never hangs on us: it waits at most ``timeout`` for the loop, and a loop that
has finished, or is still busy with the previous request, gets no new one and yields
``None`` (the exporter then has no value for this collection, rather than a stale one).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import anyio.lowlevel

__all__ = ["LoopSampler"]

log = logging.getLogger("kinesis_actors.metrics")

T = TypeVar("T")


class _TrioToken(Protocol):
    def run_sync_soon(self, sync_fn: Callable[[], object]) -> None: ...


class LoopSampler(Generic[T]):
    """Calls ``read`` on the current event loop's thread, on behalf of any thread.

    Create it on the loop (it remembers the loop's token and thread); then :meth:`sample`
    is safe from anywhere.
    """

    def __init__(self, read: Callable[[], T], *, timeout: float = 1.0) -> None:
        self._read = read
        self._timeout = timeout
        self._token = anyio.lowlevel.current_token()  # NoEventLoopError outside a loop
        self._thread = threading.get_ident()
        self._pending: concurrent.futures.Future[T] | None = None
        self._lock = threading.Lock()

    def sample(self) -> T | None:
        """A fresh snapshot, or ``None`` when the loop cannot answer within the timeout."""
        if threading.get_ident() == self._thread:
            # On the loop's thread, between two of its steps: nothing else runs now.
            return self._read()
        with self._lock:
            if self._pending is not None and not self._pending.done():
                return None  # the loop has not answered the last one: it is stuck
            try:
                self._pending = future = self._post()
            except RuntimeError:  # the loop has finished (asyncio: closed; trio: run over)
                return None
        try:
            return future.result(self._timeout)
        except concurrent.futures.TimeoutError:
            log.debug("event loop did not answer a metrics snapshot within %ss", self._timeout)
            return None

    def _post(self) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(self._read())
                except Exception as exc:
                    future.set_exception(exc)

        native = self._token.native_token
        if isinstance(native, asyncio.AbstractEventLoop):
            # A task rather than a bare callback, so anyio (and sniffio) see the loop.
            async def in_task() -> None:
                run()

            coroutine = in_task()
            try:
                asyncio.run_coroutine_threadsafe(coroutine, native)
            except RuntimeError:
                coroutine.close()
                raise
        else:  # trio: system callbacks run inside the run, where anyio sees trio
            token: _TrioToken = native  # type: ignore[assignment]
            token.run_sync_soon(run)
        return future
