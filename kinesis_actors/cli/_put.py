"""``kinesis-actors put --stream S``: produce standard input's lines, one record per line.

On a terminal, standard error shows a live line while it runs (lines read, acknowledged,
failed, records/s; see ``_put_progress``). It ends with a JSON summary on standard output,
whatever the way out: ``read`` (the first
``read`` non-empty lines were taken by the producer), ``records`` (acknowledged: exactly these
are in the stream), ``failed`` (refused for good), ``not_sent`` (given up when interrupted),
with ``read = records + failed + not_sent``. Ctrl-C (SIGINT, exit 130) or SIGTERM (143)
stops reading and gives what was read :data:`INTERRUPT_FLUSH_TIMEOUT` seconds to be
acknowledged, so a person who presses Ctrl-C learns what went out instead of guessing.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import AsyncGenerator
from contextlib import aclosing, nullcontext
from typing import Protocol, cast

import anyio
import anyio.lowlevel

from .. import errors
from ..client import KinesisClient
from ..producer import Producer, ProducerConfig
from ._put_progress import PutProgress, put_progress
from ._tail import watch_signals

__all__ = ["INTERRUPT_FLUSH_TIMEOUT", "input_lines", "run_put", "standard_input"]

#: After Ctrl-C (or SIGTERM), how long the lines already read get to be acknowledged before
#: the command gives up on the rest and prints its summary. Long enough for a healthy stream
#: to take a full queue, short enough that a person at the terminal does not press it again.
INTERRUPT_FLUSH_TIMEOUT = 3.0

#: The most one read from the input takes; a line may be longer (it is joined across reads).
_READ_CHUNK = 64 * 1024
#: Chunks read ahead of the producer: the reader thread waits when this many are queued.
_READ_AHEAD = 4
#: A line longer than the largest record any stream accepts is handed on as soon as it is, so
#: the producer's RecordTooLargeError ends the command instead of the line filling memory.
_MAX_LINE = 10 * 1024 * 1024


class _Readable(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


class _RawInput:
    """A file descriptor read without Python's buffered reader: ``read1`` is one ``read``.

    ``sys.stdin.buffer`` takes a lock around each read, and a daemon thread blocked in it
    when the interpreter exits (Ctrl-C while the writer is idle) makes the exit abort
    ("could not acquire lock for <stdin> at interpreter shutdown", SIGABRT).
    """

    def __init__(self, fd: int) -> None:
        self._raw = open(fd, "rb", buffering=0, closefd=False)  # noqa: SIM115 - never closed

    def read1(self, size: int = -1, /) -> bytes:
        return self._raw.read(size) or b""


def standard_input() -> _Readable:
    """``sys.stdin`` to read lines from: its file descriptor unbuffered (see
    :class:`_RawInput`), or its buffer when it has none (a test's ``BytesIO``)."""
    try:
        return _RawInput(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last
        return cast(_Readable, sys.stdin.buffer)


async def _chunks(source: _Readable) -> AsyncGenerator[bytes, None]:
    """``source``'s bytes as they arrive, read by a daemon thread of its own.

    ``read1`` returns as soon as some bytes are available, so a slow pipe hands each piece
    over when it arrives while the event loop, and with it the producer's sends, keeps
    running. The thread is a daemon: a read blocked on an idle terminal cannot keep the
    process alive after Ctrl-C or a failed put (an anyio worker thread would be joined).

    The thread hands each chunk over with ``send_nowait`` in a plain callback, never a task
    of the loop's: a task still pending when the loop ends (Ctrl-C while the writer is still
    writing) is cancelled by asyncio's shutdown, which logs it. Its read-ahead is counted
    by a semaphore instead, so ``send_nowait`` always finds room.
    """
    send, receive = anyio.create_memory_object_stream[bytes | OSError](_READ_AHEAD)
    room = threading.Semaphore(_READ_AHEAD)  # chunks the thread may read ahead of the loop
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        while True:
            room.acquire()
            try:
                chunk: bytes | OSError = source.read1(_READ_CHUNK)
            except OSError as exc:
                chunk = exc
            try:
                anyio.from_thread.run_sync(send.send_nowait, chunk, token=token)
            except Exception:  # the reader is gone (closed stream, or its loop ended)
                return
            if not isinstance(chunk, bytes) or not chunk:
                return

    threading.Thread(target=pump, name="kinesis-actors put: stdin", daemon=True).start()
    async with receive:
        async for chunk in receive:
            room.release()
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
    stdout. Returns 0 if every line was acknowledged, 1 if some failed, and 130 (SIGINT) or
    143 (SIGTERM) when a signal stopped it.

    The partition key is ``key`` for every line if given (one shard, in order), else the
    line's number, which spreads lines over the shards.

    The first signal stops reading and gives the lines already read
    :data:`INTERRUPT_FLUSH_TIMEOUT` seconds to be acknowledged; whatever is unsettled then is
    given up, and the summary says how many lines were read, acknowledged, failed and not
    sent. A second signal gives up at once.
    """
    config = ProducerConfig(aggregation=aggregation, linger=0.05)
    producer = Producer(client, stream, config)
    reading = anyio.CancelScope()  # cancelled by a signal: no more lines are read
    writing = anyio.CancelScope()  # cancelled when the flush's bound runs out: give up
    interrupted = 0  # the signal that stopped the command, if any
    failed_before_giving_up: int | None = None
    hide_giving_up = _HideGivingUp()

    def give_up() -> None:
        nonlocal failed_before_giving_up
        if failed_before_giving_up is None and not writing.cancel_called:
            # What fails from here on was given up by us, not refused by the service.
            failed_before_giving_up = producer.metrics.records_failed
            hide_giving_up.install()
            writing.cancel()

    async def give_up_after(delay: float) -> None:
        await anyio.sleep(delay)
        give_up()

    async with anyio.create_task_group() as tg:

        def on_signal(signum: int) -> None:
            nonlocal interrupted
            reading.cancel()
            if interrupted:
                give_up()  # a second signal: do not wait for the flush
            else:
                interrupted = signum
                tg.start_soon(give_up_after, INTERRUPT_FLUSH_TIMEOUT)

        if threading.current_thread() is threading.main_thread():
            await tg.start(watch_signals, on_signal)
        live = put_progress()
        try:
            with writing, live if live is not None else nullcontext():
                async with producer:  # leaving it flushes: every line read settles
                    if live is not None:
                        tg.start_soon(PutProgress(live, stream).run, lambda: producer.metrics)
                    with reading:
                        number = 0
                        async with aclosing(input_lines(lines)) as each_line:
                            async for data in each_line:
                                if data:
                                    # A put the signal cancels has not taken its line: the
                                    # summary counts the lines the producer took.
                                    await producer.put(
                                        data, key if key is not None else str(number)
                                    )
                                number += 1
        finally:
            hide_giving_up.remove()
        tg.cancel_scope.cancel()
    metrics = producer.metrics
    read = metrics.records_put  # each one acknowledged, failed or not sent
    failed = metrics.records_failed if failed_before_giving_up is None else failed_before_giving_up
    not_sent = read - metrics.records_sent - failed
    json.dump(
        {
            "stream": stream,
            "read": read,
            "records": metrics.records_sent,
            "failed": failed,
            "not_sent": not_sent,
            "interrupted": bool(interrupted),
            "calls": metrics.calls,
            "kinesis_records": metrics.kinesis_records_sent,
            "backpressure_cycles": metrics.backpressure_cycles,
        },
        sys.stdout,
    )
    print()
    sys.stdout.flush()
    if not_sent:
        print(
            f"kinesis-actors: interrupted: {not_sent} line(s) read were not acknowledged within "
            f"{INTERRUPT_FLUSH_TIMEOUT:g} s and were given up; those that were in flight may "
            "have been written",
            file=sys.stderr,
        )
    if interrupted:
        return 128 + interrupted
    return 0 if failed == 0 else 1


class _HideGivingUp(logging.Filter):
    """Hides the producer's "gave up on a record" lines for the records this command gave up.

    Those records are counted in the summary's ``not_sent`` and said once on standard error;
    a line per cause would read like a failure of the service. Installed only while giving up.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(arg, errors.ProducerClosedError) for arg in args)

    def install(self) -> None:
        logging.getLogger("kinesis_actors.producer").addFilter(self)

    def remove(self) -> None:
        logging.getLogger("kinesis_actors.producer").removeFilter(self)
