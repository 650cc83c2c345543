"""``kinesis-actors put --stream S``: produce standard input's lines, one record per line."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Protocol

import anyio
import anyio.lowlevel

from ..client import KinesisClient
from ..producer import Producer, ProducerConfig

#: The most one read from the input takes; a line may be longer (it is joined across reads).
_READ_CHUNK = 64 * 1024
#: Chunks read ahead of the producer: the reader thread waits when this many are queued.
_READ_AHEAD = 4
#: A line longer than the largest record any stream accepts is handed on as soon as it is, so
#: the producer's RecordTooLargeError ends the command instead of the line filling memory.
_MAX_LINE = 10 * 1024 * 1024


class _Readable(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


async def _chunks(source: _Readable) -> AsyncGenerator[bytes, None]:
    """``source``'s bytes as they arrive, read by a daemon thread of its own.

    ``read1`` returns as soon as some bytes are available, so a slow pipe hands each piece
    over when it arrives while the event loop, and with it the producer's sends, keeps
    running. The thread is a daemon: a read blocked on an idle terminal cannot keep the
    process alive after Ctrl-C or a failed put (an anyio worker thread would be joined).
    """
    send, receive = anyio.create_memory_object_stream[bytes | OSError](_READ_AHEAD)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        while True:
            try:
                chunk: bytes | OSError = source.read1(_READ_CHUNK)
            except OSError as exc:
                chunk = exc
            try:
                anyio.from_thread.run(send.send, chunk, token=token)
            except Exception:  # the reader is gone (closed stream, or its loop ended)
                return
            if not isinstance(chunk, bytes) or not chunk:
                return

    threading.Thread(target=pump, name="kinesis-actors put: stdin", daemon=True).start()
    async with receive:
        async for chunk in receive:
            if isinstance(chunk, OSError):
                raise chunk
            if not chunk:
                return
            yield chunk


async def input_lines(source: _Readable) -> AsyncGenerator[bytes, None]:
    """The lines of ``source`` without their line ends (``\\n`` or ``\\r\\n``), each handed
    over as soon as it is complete. Each chunk is scanned once, so long lines cost linear time.
    """
    pieces: list[bytes] = []  # the current line so far
    held = 0
    async with aclosing(_chunks(source)) as chunks:
        async for chunk in chunks:
            *ends, rest = chunk.split(b"\n")
            for end in ends:
                pieces.append(end)
                yield b"".join(pieces).rstrip(b"\r")
                pieces, held = [], 0
            if rest:
                pieces.append(rest)
                held += len(rest)
                if held > _MAX_LINE:
                    yield b"".join(pieces)
                    pieces, held = [], 0
    if pieces:
        yield b"".join(pieces).rstrip(b"\r")


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
