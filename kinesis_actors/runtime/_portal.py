"""The sync facade: an actor system on a background event loop, driven from plain threads.

A Spark task or any synchronous caller starts a :class:`BlockingRuntime`, starts children, and
sends through anyio's blocking portal. A portal round trip costs hundreds of microseconds, so
:meth:`BlockingRuntime.send_batch` and :class:`BatchSender` move many items per round trip.

:meth:`BlockingRuntime.stop` never hangs the caller: the graceful stop gets most of the budget,
then the loop is cancelled (shielded cleanup in the runtime is always bounded), and whatever
happens the caller gets control back by the deadline. Signals to the loop are posted from a
helper thread, because even posting to a wedged event loop can block.
"""

from __future__ import annotations

import contextlib
import logging
import random as _random
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Generic, TypeVar, TypeVarTuple, Unpack, overload

import anyio
from anyio.from_thread import BlockingPortal

from .._deprecated import renamed
from ._actor import ActorRef
from ._clock import MONOTONIC, Clock
from ._intensity import Backoff
from ._snapshot import SupervisorSnapshot
from ._spec import ChildSpec, Strategy
from ._supervisor import Supervisor

T = TypeVar("T")
R = TypeVar("R")
PosArgsT = TypeVarTuple("PosArgsT")

logger = logging.getLogger("kinesis_actors.runtime")


class BlockingRuntime:
    """A :class:`Supervisor` running on its own event-loop thread.

    Usage::

        with BlockingRuntime(backend="trio") as runtime:
            ref = runtime.start_child(ChildSpec("sink", Sink))
            with runtime.batcher(ref, size=512) as batch:
                for row in rows:
                    batch.send(row)
        # leaving stops the actors gracefully, bounded by ``stop_timeout``

    Thread-safe: any number of threads may call in. Not to be called from the loop itself.
    """

    def __init__(
        self,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        *,
        name: str = "runtime",
        intensity: tuple[int, float] = (3, 5.0),
        backoff: Backoff | None = None,
        backend: str = "asyncio",
        stop_timeout: float = 10.0,
        clock: Clock = MONOTONIC,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self._supervisor = Supervisor(
            strategy, name=name, intensity=intensity, backoff=backoff, clock=clock, random=random
        )
        self._name = name
        self._backend = backend
        self._stop_timeout = stop_timeout
        self._thread: threading.Thread | None = None
        self._portal: BlockingPortal | None = None
        self._ready = threading.Event()
        self._done = threading.Event()
        self._failure: BaseException | None = None
        self._stop_requested: anyio.Event | None = None
        self._main_scope: anyio.CancelScope | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> BlockingRuntime:
        """Start the loop thread and the supervisor; return once both are running."""
        if self._thread is not None:
            raise RuntimeError(f"runtime {self._name!r} was already started")
        self._thread = threading.Thread(
            target=self._thread_main, name=f"{self._name}-loop", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"runtime {self._name!r} did not start within {timeout} s")
        if self._portal is None:
            raise RuntimeError(f"runtime {self._name!r} failed to start") from self._failure
        return self

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the actors (gracefully, then by cancellation) and the loop thread.

        Returns within ``timeout`` seconds (default ``stop_timeout``) whatever the actors do:
        True if everything stopped in time, False if the loop thread had to be abandoned (it
        is a daemon thread, so it does not keep the process alive).

        :raises RestartIntensityExceeded: if the supervisor gave up while running.
        """
        thread = self._thread
        if thread is None:
            return True
        if thread is threading.current_thread():
            raise RuntimeError("stop() cannot be called from the runtime's own loop")
        budget = self._stop_timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        hard_reserve = min(1.0, budget / 4)
        if not self._done.is_set():
            self._post(self._request_stop)
            thread.join(max(0.0, deadline - hard_reserve - time.monotonic()))
        if thread.is_alive():
            logger.warning("[%s] graceful stop overran; cancelling the loop", self._name)
            self._post(self._cancel_everything)
            thread.join(max(0.0, deadline - time.monotonic()))
        stopped = not thread.is_alive()
        if not stopped:
            logger.error(
                "[%s] loop thread did not stop within %.3f s; abandoned", self._name, budget
            )
        failure = self._supervisor.failure
        if failure is not None:
            raise failure
        return stopped

    def __enter__(self) -> BlockingRuntime:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
            return
        try:
            self.stop()
        except Exception:
            # Do not hide the exception already on its way out.
            logger.exception("[%s] runtime failed while stopping", self._name)

    # -- calls ------------------------------------------------------------------------------

    @overload
    def call(self, fn: Callable[[Unpack[PosArgsT]], Awaitable[R]], *args: *PosArgsT) -> R: ...

    @overload
    def call(self, fn: Callable[[Unpack[PosArgsT]], R], *args: *PosArgsT) -> R: ...

    def call(self, fn: Callable[[Unpack[PosArgsT]], Any], *args: *PosArgsT) -> Any:
        """Run ``fn(*args)`` on the loop (awaiting it if it is async) and return its result."""
        return self._running_portal().call(fn, *args)

    def start_child(self, spec: ChildSpec[T]) -> ActorRef[T]:
        """Start a supervised child; return once it is ready."""
        return self.call(self._supervisor.start_child, spec)

    def send(self, ref: ActorRef[T], message: T) -> None:
        """Send one message (one portal round trip: prefer batches on hot paths)."""
        self.call(ref.send, message)

    def send_batch(self, ref: ActorRef[T], messages: Iterable[T]) -> int:
        """Send many messages in one portal round trip, in order; return how many.

        Blocks while the mailbox is full (under the ``BLOCK`` policy), like ``send``.
        """
        batch = list(messages)
        if batch:
            self.call(_send_all, ref, batch)
        return len(batch)

    def batcher(self, ref: ActorRef[T], size: int = 256) -> BatchSender[T]:
        """A sender that buffers up to ``size`` messages per round trip."""
        return BatchSender(self, ref, size)

    def statistics(self) -> SupervisorSnapshot:
        """The supervisor's :meth:`~Supervisor.statistics`, taken on its loop."""
        return self.call(self._supervisor.statistics)

    def snapshot(self) -> SupervisorSnapshot:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed("BlockingRuntime.snapshot()", "BlockingRuntime.statistics()")
        return self.statistics()

    @property
    def supervisor(self) -> Supervisor:
        """The supervisor (use it on the loop, through :meth:`call`)."""
        return self._supervisor

    # -- internals --------------------------------------------------------------------------

    def _running_portal(self) -> BlockingPortal:
        if self._portal is None or self._done.is_set():
            raise RuntimeError(f"runtime {self._name!r} is not running") from (
                self._supervisor.failure
            )
        return self._portal

    def _thread_main(self) -> None:
        try:
            anyio.run(self._main, backend=self._backend)
        except BaseException as exc:
            self._failure = exc
            logger.exception("[%s] event loop ended with an error", self._name)
        finally:
            self._done.set()
            self._ready.set()

    async def _main(self) -> None:
        with anyio.CancelScope() as scope:
            self._main_scope = scope
            async with BlockingPortal() as portal:
                try:
                    async with self._supervisor:
                        self._stop_requested = anyio.Event()
                        self._portal = portal
                        self._ready.set()
                        await self._stop_requested.wait()
                except Exception as exc:
                    self._failure = exc  # reported by stop()
                finally:
                    # Calls still in flight must not keep the loop alive after the actors stop.
                    await portal.stop(cancel_remaining=True)

    def _request_stop(self) -> None:
        if self._stop_requested is not None:
            self._stop_requested.set()

    def _cancel_everything(self) -> None:
        if self._main_scope is not None:
            self._main_scope.cancel()

    def _post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop without ever blocking the calling thread."""
        portal = self._portal
        if portal is None:
            return

        def deliver() -> None:
            with contextlib.suppress(Exception):  # the loop is already gone: nothing to do
                portal.call(fn)

        threading.Thread(target=deliver, name=f"{self._name}-signal", daemon=True).start()


async def _send_all(ref: ActorRef[T], messages: list[T]) -> None:
    for message in messages:
        await ref.send(message)


class BatchSender(Generic[T]):
    """Buffers messages on the calling thread and sends them ``size`` at a time.

    The buffer is bounded by ``size``: reaching it triggers a flush (which blocks while the
    mailbox is full). Leaving the ``with`` block flushes the rest. One sender per thread.
    """

    def __init__(self, runtime: BlockingRuntime, ref: ActorRef[T], size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self._runtime = runtime
        self._ref = ref
        self._size = size
        self._buffer: list[T] = []
        self.sent = 0

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def send(self, message: T) -> None:
        self._buffer.append(message)
        if len(self._buffer) >= self._size:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            batch, self._buffer = self._buffer, []
            self.sent += self._runtime.send_batch(self._ref, batch)

    def __enter__(self) -> BatchSender[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.flush()
