"""The driver's consumer: the library's ``Consumer`` on its own event loop thread, staging reads.

Part of the previous source, ``readPath=driver`` (``_legacy``); the default source plans on the
driver and reads on the executors (``_source``) and does not use it. Spark keeps one long-lived
Python process per streaming query for the reader's driver side (``latestOffset``,
``partitions``, ``commit``). This module runs an actor :class:`Consumer` there, on an anyio
event loop in a daemon thread behind a blocking portal, started from the offset Spark asked
for. Each batch is staged and committed to the consumer at once: the consumer's own positions
do not matter here, Spark's offset log does. Staging is bounded in records and bytes; while it
is full the loop stops taking batches, so the consumer's per-shard buffers fill and its readers
stop reading (memory stays O(shards x prefetch + staging bound)).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from kinesis_actors import Consumer, ConsumerConfig, KinesisClient
from kinesis_actors.consumer import ShardKey

from ._options import SourceOptions
from ._stage import Plan, Stage

__all__ = ["DriverConsumer"]

log = logging.getLogger("spark_bridge.source")

_CLOSE_TIMEOUT = 30.0


def canonical(offset: Any) -> str:
    """One spelling per offset, to compare what Spark hands back with what we returned."""
    return json.dumps(offset, sort_keys=True, separators=(",", ":"))


class DriverConsumer:
    """A consumer reading from ``start`` into a :class:`Stage`, on a loop thread of its own."""

    def __init__(self, options: SourceOptions, start: dict[str, Any]) -> None:
        self._options = options
        self.start = canonical(start)
        self.stage = Stage(options.streams)
        self._lock = threading.Condition()
        self._failure: BaseException | None = None
        self._parents: dict[ShardKey, tuple[str, ...]] = {}
        self._finished: set[ShardKey] = set()
        self._consumer: Consumer | None = None
        self._room: anyio.Event | None = None
        self._in_hand = False
        self._stopping = False
        self._reads_at_cutoff: dict[tuple[str, str], int] = {}
        self._stack = ExitStack()
        self._portal: BlockingPortal = self._stack.enter_context(start_blocking_portal())
        self._opened = threading.Event()
        self._future = self._portal.start_task_soon(self._run, start)

    # -- the loop thread ---------------------------------------------------------------------

    async def _run(self, start: dict[str, Any]) -> None:
        options = self._options
        config = ConsumerConfig(
            mode=options.mode,  # type: ignore[arg-type]
            consumer_name=options.consumer_name,
            registration=options.registration,  # type: ignore[arg-type]
            positions=start,
            deregister_on_close=options.deregister_consumer,
        )
        self._room = anyio.Event()
        try:
            async with (
                KinesisClient(**options.connection.client_kwargs()) as client,
                Consumer(client, list(options.refs or options.streams), config) as consumer,
            ):
                self._consumer = consumer
                self._opened.set()
                async for batch in consumer:
                    self._in_hand = True
                    key = (batch.stream, batch.shard_id)
                    with self._lock:
                        self._note_finished()
                        self.stage.add(key, batch.arrow)
                        self._lock.notify_all()
                    consumer.commit(batch)
                    self._in_hand = False
                    while self._full() and not self._stopping:
                        self._room = anyio.Event()
                        await self._room.wait()
                    if self._stopping:
                        break
        except BaseException as exc:
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                log.exception("the kinesis source's consumer failed")
                with self._lock:
                    self._failure = exc
                    self._lock.notify_all()
            raise
        finally:
            self._opened.set()

    def _full(self) -> bool:
        with self._lock:
            stage = self.stage
            return (
                stage.records >= self._options.max_staged_records
                or stage.nbytes >= self._options.max_staged_bytes
            )

    def _note_finished(self) -> None:
        """Stage a marker for every shard the consumer now says is finished (lock held).

        Called before each batch is staged: a child's first batch comes only after its
        parents are finished, so their markers are staged before it.
        """
        consumer = self._consumer
        if consumer is None:
            return
        for stream, shards in consumer.positions()["streams"].items():
            for shard_id, entry in shards.items():
                key = (stream, shard_id)
                if entry.get("finished") and key not in self._finished:
                    self._finished.add(key)
                    self.stage.add_finished(key)
        for key, parents in consumer.shard_parents().items():
            self._parents[key] = parents

    def _sync_state(self) -> None:
        with self._lock:
            self._note_finished()

    def _request_stop(self) -> None:
        self._stopping = True
        if self._consumer is not None:
            self._consumer.stop()
        self._signal_room()

    def _signal_room(self) -> None:
        if self._room is not None:
            self._room.set()

    def _caught_up(self) -> bool:
        """AvailableNow: every shard read past the cutoff, to its tip, or to its end."""
        consumer = self._consumer
        if consumer is None or self._in_hand:
            return False
        statistics = consumer.statistics()
        if statistics.buffered_batches or statistics.waiting_shards:
            return False
        for key, shard in statistics.shards.items():
            if key in self._finished or self.stage.past_cutoff(key):
                continue
            reads_then = self._reads_at_cutoff.get(key, 0)
            if shard.reads < reads_then + 2 or shard.millis_behind_latest != 0:
                return False
        return True

    def _mark_cutoff(self, cutoff_ms: int) -> None:
        consumer = self._consumer
        self.stage.cutoff_ms = cutoff_ms
        if consumer is not None:
            self._reads_at_cutoff = {
                key: shard.reads for key, shard in consumer.statistics().shards.items()
            }

    # -- the Spark thread --------------------------------------------------------------------

    def _call(self, function: Callable[[], Any]) -> Any:
        self._raise_failure()
        return self._portal.call(function)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._future.done() and not self._future.cancelled():
            self._future.result()

    def wait_open(self, timeout: float) -> None:
        """Wait until the consumer is open (or failed) so the first offsets see its shards."""
        self._opened.wait(timeout)
        self._raise_failure()

    def set_cutoff(self, cutoff_ms: int) -> None:
        self.wait_open(60.0)
        self._call(lambda: self._mark_cutoff(cutoff_ms))

    def take(self, start: dict[str, Any], max_rows: int | None, max_bytes: int | None) -> Plan:
        """Cut the next micro-batch from what is staged (never waits for data)."""
        self._call(self._sync_state)
        with self._lock:
            plan = self.stage.take(
                start,
                max_rows=max_rows,
                max_bytes=max_bytes,
                parents=lambda key: self._parents.get(key, ()),
            )
        self._call(self._signal_room)
        return plan

    def caught_up(self) -> bool:
        return bool(self._call(self._caught_up))

    def wait_for_data(self, timeout: float) -> None:
        """Block the Spark thread until something is staged (or ``timeout``)."""
        with self._lock:
            if len(self.stage) == 0 and self._failure is None:
                self._lock.wait(timeout)
        self._raise_failure()

    def close(self) -> None:
        """Stop the consumer (deregistering the EFO consumer if asked) and the loop thread.

        The consumer is asked to stop, so it closes cleanly and deregisters; only if that
        takes longer than ``_CLOSE_TIMEOUT`` is it cancelled.
        """
        try:
            if not self._future.done():
                self._portal.call(self._request_stop)
                try:
                    self._future.result(timeout=_CLOSE_TIMEOUT)
                except TimeoutError:
                    self._future.cancel()
            self._stack.close()
        except Exception:  # the query is ending; the failure was logged when it happened
            log.debug("closing the kinesis source's consumer", exc_info=True)
