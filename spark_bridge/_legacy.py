"""The previous streaming source, where the driver reads every record: ``readPath=driver``.

Kept for comparison (``benchmarks/spark_bench.py`` runs it beside the executor path) and as
a fallback; the default is ``_source`` (the driver plans, the executors read). Design:

* **Offsets** are the consumer's positions documents: per shard the last (sequence,
  sub-sequence) read, ``finished``, or where reading starts. Spark keeps them in its offset
  log; nothing else decides where a micro-batch ends.
* **The driver reads.** ``latestOffset`` starts an actor :class:`~kinesis_actors.Consumer`
  (polling or EFO) in the query's long-lived driver process, from the start offset Spark gives,
  and cuts the next micro-batch from what it has staged, within the read limit. It never
  waits for data on a normal trigger, so idle shards cost nothing.
* **Partitions carry the rows.** ``partitions`` ships each shard's staged rows as Arrow IPC
  inside its partition; ``read`` on the executor yields them as Arrow batches.
* **Replay reads again, exactly.** After a restart, the batch at the end of the offset log has
  no staged rows: its partitions carry only the shard's start and end entries, and the
  executor reads exactly that range with GetRecords (``_replay``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kinesis_actors import KinesisClient, StartingPosition
from kinesis_actors.consumer import POSITIONS_VERSION, list_shards

from ._driver import DriverConsumer, canonical
from ._options import Connection, SourceOptions
from ._replay import read_range
from ._schema import to_spark_batch
from ._stage import Plan

__all__ = ["DriverReadStreamReader", "StagedPartition"]

log = logging.getLogger("spark_bridge.source")

_OPEN_TIMEOUT = 120.0
"""How long the first ``latestOffset`` waits for the consumer to open (EFO registers)."""


class StagedPartition(InputPartition):
    """One shard's part of a micro-batch: its rows (Arrow IPC), or the range to read again."""

    def __init__(
        self,
        *,
        stream: str,
        shard_id: str,
        start: dict[str, Any] | None,
        end: dict[str, Any],
        payload: bytes | None,
        connection: Connection,
        replay_timeout: float,
    ) -> None:
        super().__init__(f"{stream}/{shard_id}")
        self.stream = stream
        self.shard_id = shard_id
        self.start = start
        self.end = end
        self.payload = payload
        self.connection = connection
        self.replay_timeout = replay_timeout


def _ipc(batches: list[pa.RecordBatch]) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _changed_shards(
    start: dict[str, Any], end: dict[str, Any]
) -> list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]]:
    changed = []
    for stream, shards in end["streams"].items():
        before = start.get("streams", {}).get(stream, {})
        for shard_id, entry in shards.items():
            if before.get(shard_id) != entry:
                changed.append((stream, shard_id, before.get(shard_id), entry))
    return changed


class DriverReadStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver side (offsets, partitions) and the executor side (``read``) of the source."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._driver: DriverConsumer | None = None
        self._planned: dict[tuple[str, str], Plan] = {}
        self._initial: str | None = None
        self._cutoff_ms: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the reader pickled: only the options travel.
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        DriverReadStreamReader.__init__(self, state["_options"])

    # -- offsets -------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: every shard listed now, at ``initialPosition``."""
        options = self._options
        streams: dict[str, dict[str, Any]] = {stream: {} for stream in options.streams}
        if options.initial_position != "trim_horizon":
            when = options.initial_timestamp or datetime.now(UTC)
            entry = {"start": StartingPosition("AT_TIMESTAMP", timestamp=when).to_dict()}
            refs = {stream: options.ref(stream) for stream in options.streams}
            listing = anyio.run(_list_shards, options.connection, refs)
            for stream, shard_ids in listing.items():
                for shard_id in sorted(shard_ids):
                    streams[stream][shard_id] = dict(entry)
        offset = {"version": POSITIONS_VERSION, "streams": streams}
        self._initial = canonical(offset)
        return offset

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_records_per_trigger is not None:
            return ReadMaxRows(self._options.max_records_per_trigger)
        if self._options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self._options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def _limits(self, limit: ReadLimit | None) -> tuple[int | None, int | None]:
        """The configured limits, tightened by what the engine asks for."""
        max_rows = self._options.max_records_per_trigger
        max_bytes = self._options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows if max_rows is None else min(max_rows, limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes if max_bytes is None else min(max_bytes, limit.max_bytes)
        return max_rows, max_bytes

    def _driver_at(self, start: dict[str, Any]) -> DriverConsumer:
        key = canonical(start)
        driver = self._driver
        if driver is not None and driver.start == key:
            return driver
        if driver is not None:
            log.warning("the next micro-batch does not start where the last ended: re-reading")
            driver.close()
        elif self._initial is not None and key != self._initial:
            log.info("resuming from the checkpoint's offset; initialPosition is not used")
        elif self._initial is None:
            log.info(
                "resuming from the checkpoint's offset (the checkpoint overrides "
                "initialPosition=%s)",
                self._options.initial_position,
            )
        self._planned.clear()
        driver = self._driver = DriverConsumer(self._options, start)
        driver.wait_open(_OPEN_TIMEOUT)
        if self._cutoff_ms is not None:
            driver.set_cutoff(self._cutoff_ms)
        return driver

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch, within ``limit``; ``start`` when nothing is new."""
        if start is None:
            raise RuntimeError("the kinesis source needs Spark's admission control (Spark 4.2+)")
        driver = self._driver_at(start)
        max_rows, max_bytes = self._limits(limit)
        while True:
            plan = driver.take(start, max_rows, max_bytes)
            if canonical(plan.end) != canonical(start) or self._cutoff_ms is None:
                break
            # AvailableNow: end the query only once every shard is read past the cutoff.
            if driver.caught_up():
                plan = driver.take(start, max_rows, max_bytes)
                if canonical(plan.end) == canonical(start):
                    # The query ends here; Spark may kill this process without calling stop(),
                    # so close (and deregister, if asked) now.
                    self.stop()
                    return start
                break
            driver.wait_for_data(0.5)
        end = plan.end
        if canonical(end) == canonical(start):
            return start
        self._planned[(canonical(start), canonical(end))] = plan
        driver.start = canonical(end)
        log.debug("micro-batch of %d rows, %d bytes", plan.rows, plan.nbytes)
        return end

    def prepareForTriggerAvailableNow(self) -> None:
        """Read what arrived until now, then end: rows that arrive later are left for the next
        query (by their approximate arrival time, the service's clock)."""
        self._cutoff_ms = int(time.time() * 1000)
        if self._driver is not None:
            self._driver.set_cutoff(self._cutoff_ms)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        options = self._options
        plan = self._planned.get((canonical(start), canonical(end)))
        parts = []
        for stream, shard_id, before, after in _changed_shards(start, end):
            if plan is not None:
                batches = plan.batches.get((stream, shard_id))
                if not batches:
                    continue  # only a finished marker: no rows
                payload: bytes | None = _ipc(batches)
            else:
                payload = None
            parts.append(
                StagedPartition(
                    stream=stream,
                    shard_id=shard_id,
                    start=before,
                    end=after,
                    payload=payload,
                    connection=options.connection,
                    replay_timeout=options.replay_timeout,
                )
            )
        if plan is None and parts:
            log.warning("replaying a micro-batch from Kinesis: %d shard ranges", len(parts))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the partition's rows as Arrow batches of the Spark schema."""
        assert isinstance(partition, StagedPartition)
        if partition.payload is not None:
            with pa.ipc.open_stream(partition.payload) as reader:
                for batch in reader:
                    yield to_spark_batch(batch)
            return
        for batch in read_range(
            partition.connection,
            stream=self._options.ref(partition.stream),  # an ARN's calls send StreamARN
            shard_id=partition.shard_id,
            start=partition.start,
            end=partition.end,
            timeout=partition.replay_timeout,
        ):
            yield to_spark_batch(batch)

    def commit(self, end: dict[str, Any]) -> None:
        """The micro-batch ending at ``end`` is done: forget its staged rows."""
        key = canonical(end)
        for planned in [k for k in self._planned if k[1] == key]:
            del self._planned[planned]

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None


async def _list_shards(connection: Connection, streams: Mapping[str, str]) -> dict[str, list[str]]:
    """Every shard of every stream (name → as given), for the initial offset of
    ``latest``/``at_timestamp``."""
    async with KinesisClient(**connection.client_kwargs()) as client:
        return {
            stream: [shard.shard_id for shard in (await list_shards(client, ref, 1000))[0]]
            for stream, ref in streams.items()
        }
