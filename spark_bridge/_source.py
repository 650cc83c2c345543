"""The streaming source: ``spark.readStream.format("kinesis")``. The driver plans, the
executors read.

* **Offsets** (``_offsets``) are cuts on records the driver saw, plus each stream's identity;
  they live in Spark's offset log only (a side store drifts from it and a restart cannot
  replay a micro-batch).
* **The driver plans** (``_planner`` over ``_policy``): per shard and trigger a few small
  calls find an exact end without reading the data; with read limits it reads to count.
* **Partitions carry only ranges**: per shard its stream, id, start and end entries, and the
  connection (a few hundred bytes a shard, whatever the rows). A task reads a group of the
  moved shards (``_grouping``, the ``shardsPerTask`` option); idle shards get no task.
* **Executors read the ranges** (``_range``), concurrently, on a client kept per Python worker
  process (``_worker``): first runs, retries, speculative tasks and replays after a restart
  are the same code reading the same records.

docs/spark.md has the long form, with figures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kinesis_actors import StartingPosition

from ._grouping import group, shards_per_task
from ._hints import spoken
from ._offsets import OFFSET_VERSION, Offset, ShardEntry, canonical, changed_shards, parse_offset
from ._options import Connection, SourceOptions
from ._planner import Planner
from ._range import ShardRange, read_ranges
from ._schema import to_spark_batch
from ._starts import initial_entries

__all__ = ["KinesisPartition", "KinesisStreamReader"]

log = logging.getLogger("spark_bridge.source")

_MIN_PLAN_INTERVAL = 0.5
"""Seconds after a plan that found nothing before the next one. Spark asks for the latest
offset every 10 ms while a query is idle; planning at most twice a second then keeps an idle
shard at two GetRecords a second from the driver at most, inside the service's 5 per shard
(past a few dozen idle shards, ``_idle`` probes each less often)."""


class KinesisPartition(InputPartition):
    """One Spark task's part of a micro-batch: the ranges of a group of shards (``_grouping``),
    nothing else. ``ranges`` are ``(stream, shard_id, start, end)`` with the entries in their
    offset JSON form (``start`` None: from where the shard begins)."""

    def __init__(
        self,
        *,
        ranges: list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]],
        connection: Connection,
        wait_timeout: float,
    ) -> None:
        stream, shard_id = ranges[0][0], ranges[0][1]
        more = f"+{len(ranges) - 1}" if len(ranges) > 1 else ""
        super().__init__(f"{stream}/{shard_id}{more}")
        self.ranges = ranges
        self.connection = connection
        self.wait_timeout = wait_timeout


def _entry(stream: str, shard_id: str, entry: dict[str, Any] | None) -> ShardEntry:
    if entry is None:
        return ShardEntry()
    document = {"version": 1, "streams": {stream: {shard_id: entry}}}
    return parse_offset(document, (stream,)).shards[(stream, shard_id)]


class KinesisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver side (offsets, partitions) and the executor side (``read``) of the source."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._planner: Planner | None = None
        self._target_ms: int | None = None
        self._last_plan = -1e9
        self._initial: str | None = None
        self._resumed_logged = False
        # The last start offset latestOffset parsed, and what it parsed to: an idle query is
        # handed the same offset twice a second, and parsing every shard's entry was a tenth
        # of its CPU at 1,000 shards.
        self._parsed: tuple[dict[str, Any], Offset] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the reader pickled: only the options travel.
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        KinesisStreamReader.__init__(self, state["_options"])

    def _get_planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self._options)
        return self._planner

    def _spoken(self) -> AbstractContextManager[None]:
        """A certificate, unreachable-endpoint or missing-stream error said for a Spark user
        (``verifySsl``, ``endpointUrl``, ``openTimeout``)."""
        options = self._options
        return spoken(
            stream=", ".join(options.streams), connection=options.connection, hint="verifySsl"
        )

    # -- offsets -------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: the shards ``startingPositions`` names where it says,
        every other shard at ``initialPosition`` (TRIM_HORIZON shards are found by the first
        plan; the others are listed now, at the start time)."""
        options = self._options
        offset = Offset()
        default: StartingPosition | None = None
        if options.initial_position != "trim_horizon":
            when = options.initial_timestamp or datetime.now(UTC)
            default = StartingPosition("AT_TIMESTAMP", timestamp=when)
        if default is not None or options.starting_positions:
            with self._spoken():
                listed = self._get_planner().list_now()
            offset.shards.update(initial_entries(options.starting_positions, listed, default))
        document = offset.to_json(options.streams)
        self._initial = canonical(document)
        return document

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_records_per_trigger is not None:
            return ReadMaxRows(self._options.max_records_per_trigger)
        if self._options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self._options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def _limits(self, limit: ReadLimit | None) -> tuple[int | None, int | None]:
        """The engine's limit decides; ``ReadAllAvailable`` means everything available."""
        if limit is None:
            return self._options.max_records_per_trigger, self._options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows, None
        if isinstance(limit, ReadMaxBytes):
            return None, limit.max_bytes
        return None, None

    def _log_resume(self, start: dict[str, Any]) -> None:
        if self._resumed_logged:
            return
        self._resumed_logged = True
        if self._initial is None or canonical(start) != self._initial:
            log.info(
                "resuming from the checkpoint's offset (the checkpoint overrides "
                "initialPosition=%s)",
                self._options.initial_position,
            )

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch within ``limit``; ``start`` when nothing is new."""
        if start is None:
            raise RuntimeError("the kinesis source needs Spark's admission control (Spark 4.2+)")
        streams = self._options.streams
        parsed = self._parse(start)
        self._log_resume(start)
        max_rows, max_bytes = self._limits(limit)
        planner = self._get_planner()
        while True:
            wait = self._last_plan + _MIN_PLAN_INTERVAL - time.monotonic()
            if wait > 0:
                # Waiting here, not returning ``start`` at once: each of Spark's calls carries
                # the whole offset (about 60 bytes a shard) both ways, 100 times a second.
                time.sleep(wait)
            with self._spoken():
                plan = planner.plan(
                    parsed, max_rows=max_rows, max_bytes=max_bytes, target_ms=self._target_ms
                )
            # Only a plan that found nothing paces the next one: a busy query plans once per
            # micro-batch, an idle one twice a second.
            self._last_plan = -1e9 if plan.moved else time.monotonic()
            if plan.moved:
                return plan.end.to_json(streams)
            if self._target_ms is None:
                return start
            if plan.final:
                # AvailableNow ends here; Spark may kill this process without calling stop().
                self.stop()
                return start

    def _parse(self, start: dict[str, Any]) -> Offset:
        """``start`` parsed, or what an equal offset parsed to last time (a new document each
        call: Spark decodes it from JSON; the planner copies what it changes)."""
        last = self._parsed
        if last is not None and last[0] is not start and last[0] == start:
            return last[1]
        parsed = parse_offset(start, self._options.streams)
        self._parsed = (start, parsed)
        return parsed

    def prepareForTriggerAvailableNow(self) -> None:
        """Read what arrived until now, then end: rows that arrive later (by the service's
        approximate arrival time) are left for the next query."""
        self._target_ms = int(time.time() * 1000)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """How far behind the tip the last planned end is, per shard (query progress)."""
        planner = self._planner
        if planner is None:
            return None
        behind: dict[str, dict[str, int]] = {}
        for (stream, shard_id), millis in sorted(planner.behind_ms.items()):
            behind.setdefault(stream, {})[shard_id] = millis
        return {
            "version": OFFSET_VERSION,
            "millis_behind_latest": behind,
            "max_millis_behind_latest": max(planner.behind_ms.values(), default=0),
        }

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The moved shards' ranges, grouped into tasks (``_grouping``): a pure function of
        ``start``, ``end`` and the options, so a replay regroups exactly."""
        streams = self._options.streams
        moved: list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]] = []
        for (stream, shard_id), before, after in changed_shards(
            parse_offset(start, streams), parse_offset(end, streams)
        ):
            if after.bound is None and not after.finished:
                continue  # a shard just discovered: nothing to read yet
            moved.append(
                (stream, shard_id, None if before is None else before.to_json(), after.to_json())
            )
        per_task = shards_per_task(len(moved), self._options.shards_per_task)
        return [
            KinesisPartition(
                ranges=ranges,
                connection=self._options.connection,
                wait_timeout=self._options.replay_timeout,
            )
            for ranges in group(moved, per_task)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the partition's ranges, page by page, as Spark Arrow batches."""
        assert isinstance(partition, KinesisPartition)
        ranges = []
        for stream, shard_id, start, end in partition.ranges:
            ranges.append(
                ShardRange(
                    stream=self._options.ref(stream),  # an ARN's calls send StreamARN
                    shard_id=shard_id,
                    start=_entry(stream, shard_id, start),
                    end=_entry(stream, shard_id, end),
                )
            )
            if log.isEnabledFor(logging.DEBUG):  # describe() is JSON: not for every shard
                log.debug(
                    "reading %s/%s from %s to %s",
                    stream,
                    shard_id,
                    ranges[-1].start.describe(),
                    ranges[-1].end.describe(),
                )
        for batch in read_ranges(
            partition.connection,
            ranges,
            timeout=partition.wait_timeout,
            max_bytes_per_second=self._options.max_fetch_rate,
        ):
            yield to_spark_batch(batch)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to forget: the offsets hold everything."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
