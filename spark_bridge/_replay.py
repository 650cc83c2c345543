"""Reading one shard's exact range on an executor: the replay path of ``readPath=driver``.

The previous source (``_legacy``) ships staged rows in its partitions; the default source reads
every range on the executors (``_range``) and does not use this module. When the driver
restarts, the micro-batch at the end of Spark's offset log is run again from its start and end
offsets alone: the staged rows are gone with the old driver. Each partition then reads its
shard from Kinesis with GetRecords, from the start entry to the end entry, and yields exactly
the rows the first run had. The read is bounded in time; a range that cannot be completed
(records past the stream's retention, a mismatched offset) fails the task with a message rather
than yielding something else.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import anyio
import pyarrow as pa

from kinesis_actors import KinesisClient, StartingPosition
from kinesis_actors.client import StreamRef
from kinesis_actors.consumer import (
    PacingSettings,
    PollingReader,
    ReadPacer,
    SavedShard,
    ShardMetrics,
    resume_from,
)
from kinesis_actors.consumer import position_order as order
from kinesis_actors.errors import KinesisError
from kinesis_actors.records import Position, build_record_batch

from ._options import Connection

__all__ = ["ReplayError", "read_range"]


class ReplayError(KinesisError):
    """A micro-batch's range of a shard could not be read again exactly."""


def _saved(entry: dict[str, Any] | None) -> SavedShard:
    if entry is None:
        return SavedShard(start=StartingPosition.trim_horizon())
    if entry.get("finished"):
        return SavedShard(finished=True)
    if "sequence_number" in entry:
        return SavedShard(
            committed=Position(entry["sequence_number"], int(entry["sub_sequence_number"]))
        )
    return SavedShard(start=StartingPosition.from_dict(entry["start"]))


def read_range(
    connection: Connection,
    *,
    stream: str,
    shard_id: str,
    start: dict[str, Any] | None,
    end: dict[str, Any],
    timeout: float,
) -> Iterator[pa.RecordBatch]:
    """The ``RECORD_SCHEMA`` rows of one shard after ``start`` up to ``end``, inclusive."""
    batches: list[pa.RecordBatch] = []
    anyio.run(
        partial(
            _read,
            connection,
            stream=stream,
            shard_id=shard_id,
            start=start,
            end=end,
            limit_seconds=timeout,
            out=batches,
        )
    )
    return iter(batches)


async def _read(
    connection: Connection,
    *,
    stream: str,
    shard_id: str,
    start: dict[str, Any] | None,
    end: dict[str, Any],
    limit_seconds: float,
    out: list[pa.RecordBatch],
) -> None:
    saved = _saved(start)
    if saved.finished:
        return
    target = _saved(end)
    stop = None if target.finished else target.committed
    position, skip = resume_from(saved)
    ref, stream = stream, StreamRef.parse(stream).name  # calls name ``ref``, rows ``stream``
    where = f"{stream}/{shard_id}"
    with anyio.move_on_after(limit_seconds) as scope:
        async with KinesisClient(**connection.client_kwargs()) as client:
            reader = PollingReader(
                client,
                ref,
                shard_id,
                position,
                pacer=ReadPacer(PacingSettings(idle_initial=0.05, idle_max=0.5)),
                metrics=ShardMetrics(),
                limit=10_000,
            )
            try:
                while True:
                    read = await reader.read()
                    built = build_record_batch(
                        stream,
                        shard_id,
                        read.records,
                        after=skip,
                    )
                    batch = built.batch
                    if batch.num_rows and stop is not None:
                        sequences = batch.column(2).to_pylist()
                        subs = batch.column(3).to_pylist()
                        limit = order(stop)
                        keep = 0
                        for sequence, sub in zip(sequences, subs, strict=True):
                            if (int(sequence), sub) > limit:
                                break
                            keep += 1
                        if keep:
                            out.append(batch.slice(0, keep))
                        last = (int(sequences[keep - 1]), subs[keep - 1]) if keep else None
                        if keep < batch.num_rows or last == limit:
                            if last != limit:
                                raise ReplayError(
                                    f"{where}: the micro-batch ended at {stop} but the shard "
                                    "has no record there; the offset log does not match the "
                                    "stream"
                                )
                            return
                    elif batch.num_rows:
                        out.append(batch)
                    if read.finished:
                        if stop is not None:
                            raise ReplayError(
                                f"{where}: the shard ended before the micro-batch's end {stop}"
                            )
                        return
                    if stop is not None and not read.records and read.millis_behind_latest == 0:
                        raise ReplayError(
                            f"{where}: reached the shard's tip before the micro-batch's end "
                            f"{stop}; were the records trimmed past the retention period?"
                        )
            finally:
                await reader.aclose()
    if scope.cancelled_caught:
        raise ReplayError(
            f"{where}: reading the micro-batch's range again took over {limit_seconds:g} s "
            "(option replayTimeout)"
        )
