"""The producer's sender actor: turns the pipeline's calls into PutRecords requests.

One dispatcher task asks the sans-IO :class:`~._pipeline.Pipeline` for calls and starts a
task per call, at most ``max_in_flight_calls`` at once; each call's outcome goes back into
the pipeline, which settles its records. It sleeps until the pipeline's next wakeup or until
something wakes it (a record that makes a call worth sending, a flush, a finished call), and
lists the shards again when the pipeline finds its shard map stale, at most once per
``shard_map_min_refresh_interval``.

The producer owns the intake and the settling; this owns what is in flight.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from .. import errors
from ..client import RetrySettings
from ._config import ProducerConfig
from ._pipeline import Call, Pipeline
from ._retries import put_records_results
from ._stream import list_open_shards

if TYPE_CHECKING:
    from ..client import KinesisClient

__all__ = ["Sender"]

log = logging.getLogger("kinesis_actors.producer")

# The producer owns PutRecords retries (lesson 32): one client attempt per producer attempt,
# so record_ttl holds, attempts are counted right, and every throttle reaches the pacing.
_ONE_ATTEMPT = RetrySettings(max_retries=0)


class Sender:
    """Sends the pipeline's calls; ``flushing`` (a count of waiting flushes) ignores linger.

    ``calls``, ``failed_calls`` and ``shard_map_refreshes`` count what it did;
    ``in_flight`` is the number of calls outstanding.
    """

    __slots__ = (
        "_client",
        "_config",
        "_next_refresh",
        "_pipeline",
        "_refreshing",
        "_scopes",
        "_stream",
        "_wake",
        "calls",
        "failed_calls",
        "flushing",
        "in_flight",
        "shard_map_refreshes",
    )

    def __init__(
        self, client: KinesisClient, stream: str, config: ProducerConfig, pipeline: Pipeline
    ) -> None:
        self._client = client
        self._stream = stream
        self._config = config
        self._pipeline = pipeline
        self._wake = anyio.Event()
        self._scopes: set[anyio.CancelScope] = set()  # one per call in flight
        self._refreshing = False
        self._next_refresh = 0.0
        self.flushing = 0
        self.in_flight = 0
        self.calls = 0
        self.failed_calls = 0
        self.shard_map_refreshes = 0

    def wake(self) -> None:
        """Look at the pipeline now (a record made a call worth sending, a flush began)."""
        self._wake.set()

    def cancel_calls(self) -> None:
        """Abandon every call in flight, and any started but not yet running (an abort).

        Their records fail through :meth:`Pipeline.abandon`: "may or may not have been
        written".
        """
        for scope in self._scopes:
            scope.cancel()

    async def run(self, task_group: TaskGroup) -> None:
        """The dispatcher: runs until cancelled, starting senders in ``task_group``."""
        pipeline = self._pipeline
        limit = self._config.max_in_flight_calls
        while True:
            self._wake = anyio.Event()
            now = anyio.current_time()
            if pipeline.needs_refresh and not self._refreshing and now >= self._next_refresh:
                self._refreshing = True
                task_group.start_soon(self._refresh_shard_map)
            force = self.flushing > 0
            while self.in_flight < limit:
                call = pipeline.next_call(now, force=force)
                if call is None:
                    break
                self.in_flight += 1
                # Registered before the task runs, so an abort in between cancels it too (a
                # sender not yet started sent its call after the abort, into a drained
                # pipeline, and the close with exit_grace=0 waited forever).
                scope = anyio.CancelScope()
                self._scopes.add(scope)
                task_group.start_soon(self._send, call, scope)
            wakeup = pipeline.next_wakeup(now, force=force)
            if self.in_flight >= limit:
                wakeup = None  # a finishing call wakes us
            if pipeline.needs_refresh and not self._refreshing:
                wakeup = self._next_refresh if wakeup is None else min(wakeup, self._next_refresh)
            timeout = math.inf if wakeup is None else max(0.0, wakeup - now)
            with anyio.move_on_after(timeout):
                await self._wake.wait()

    async def _send(self, call: Call, scope: anyio.CancelScope) -> None:
        """Send one call inside ``scope``, which an abort cancels (not the task group's host)."""
        pipeline = self._pipeline
        settled = False
        try:
            with scope:
                client = self._client
                response = await client.send(
                    client.codec.encode_put_records(self._stream, call.records()),
                    retry=_ONE_ATTEMPT,
                )
                results = put_records_results(response)
        except errors.KinesisError as exc:  # a MalformedReplyError: an unknown outcome
            self.failed_calls += 1
            pipeline.fail(call, exc, anyio.current_time())
            settled = True
        else:
            if not scope.cancelled_caught:
                self.calls += 1
                pipeline.complete(call, results, anyio.current_time())
                settled = True
        finally:
            self._scopes.discard(scope)
            if not settled:
                pipeline.abandon(
                    call,
                    errors.ProducerClosedError(
                        f"producer for {self._stream!r} stopped while this record was in "
                        "flight: it may or may not have been written"
                    ),
                )
            self.in_flight -= 1
            self.wake()

    async def _refresh_shard_map(self) -> None:
        pipeline = self._pipeline
        try:
            shard_map = await list_open_shards(self._client, self._stream)
        except errors.KinesisError as exc:
            log.warning("producer for stream %r could not list shards: %s", self._stream, exc)
        else:
            pipeline.set_shard_map(shard_map)
            self.shard_map_refreshes += 1
        finally:
            self._refreshing = False
            self._next_refresh = anyio.current_time() + self._config.shard_map_min_refresh_interval
            self.wake()
