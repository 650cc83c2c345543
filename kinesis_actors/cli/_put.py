"""``kinesis-actors put --stream S``: produce standard input's lines, one record per line."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Protocol

import anyio

from ..client import KinesisClient
from ..producer import Producer, ProducerConfig

#: The most one read from the input takes; a line may be longer (it is joined across reads).
_READ_CHUNK = 64 * 1024
#: A line longer than the largest record any stream accepts is handed on as soon as it is, so
#: the producer's RecordTooLargeError ends the command instead of the line filling memory.
_MAX_LINE = 10 * 1024 * 1024


class _Readable(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


async def input_lines(source: _Readable) -> AsyncGenerator[bytes, None]:
    """The lines of ``source`` (without their line ends), read on a worker thread.

    ``read1`` returns as soon as some bytes are available, so a slow pipe hands each line over
    when it arrives, while the event loop, and with it the producer's sends, keeps running.
    """
    pending = b""
    while True:
        chunk = await anyio.to_thread.run_sync(source.read1, _READ_CHUNK)
        if not chunk:
            break
        *complete, pending = (pending + chunk).split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r")
        if len(pending) > _MAX_LINE:
            yield pending
            pending = b""
    if pending:
        yield pending.rstrip(b"\r")


async def run_put(
    client: KinesisClient,
    *,
    lines: _Readable,
    stream: str,
    key: str | None,
    aggregation: bool,
) -> int:
    """Put every non-empty line of ``lines`` (without its newline); print a JSON summary on
    stdout.

    The partition key is ``key`` for every line if given (one shard, in order), else the
    line's number, which spreads lines over the shards.
    """
    config = ProducerConfig(aggregation=aggregation, linger=0.05)
    async with Producer(client, stream, config) as producer:
        number = 0
        async with aclosing(input_lines(lines)) as each_line:
            async for data in each_line:
                if data:
                    await producer.put(data, key if key is not None else str(number))
                number += 1
    metrics = producer.metrics
    json.dump(
        {
            "stream": stream,
            "records": metrics.records_sent,
            "failed": metrics.records_failed,
            "calls": metrics.calls,
            "kinesis_records": metrics.kinesis_records_sent,
            "backpressure_cycles": metrics.backpressure_cycles,
        },
        sys.stdout,
    )
    print()
    return 0 if metrics.records_failed == 0 else 1
