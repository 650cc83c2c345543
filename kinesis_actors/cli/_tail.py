"""``kinesis-actors tail --stream S``: print a stream's records as they arrive.

One JSON object per user record per line (KPL aggregates are expanded), in order within a
shard::

    {"stream": "orders", "shard_id": "shardId-000000000000",
     "sequence_number": "4960...", "sub_sequence_number": 0, "partition_key": "k1",
     "explicit_hash_key": null, "approximate_arrival_timestamp": "2026-01-02T03:04:05.678Z",
     "data": "hello", "data_encoding": "utf-8"}

``data`` is the record's bytes as text when they are valid UTF-8 (``"data_encoding":
"utf-8"``), else base64 (``"data_encoding": "base64"``). With ``raw`` only the data is
written, as is, one record per line.

With no ``count`` it prints every record as it arrives until Ctrl-C (SIGINT, exit 130) or
SIGTERM (exit 143), or until the reader of its output goes away (``tail | head -n 1``: exit
0 at once, even on a quiet stream); each way out closes the consumer cleanly. In EFO mode a
consumer registered by this command is deregistered on the way out, one that already existed
is left alone.
"""

from __future__ import annotations

import base64
import errno
import io
import json
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TextIO

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

from .. import errors
from ..client import KinesisClient, StreamRef
from ..consumer import (
    Consumer,
    ConsumerConfig,
    RecordBatch,
    StartingPosition,
    default_consumer_name,
    deregister_consumer,
    list_consumers,
)

__all__ = ["record_json", "run_tail", "watch_signals"]

#: How long the exit path may spend deregistering the consumers this command registered.
_DEREGISTER_TIMEOUT = 15.0


def record_json(row: dict[str, Any]) -> dict[str, Any]:
    """One row of ``RECORD_SCHEMA`` (as ``to_pylist`` gives it) in the shape ``tail`` prints."""
    data: bytes = row["data"]
    try:
        text, encoding = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(data).decode("ascii"), "base64"
    arrived: datetime = row["approximate_arrival_timestamp"]
    return {
        "stream": row["stream"],
        "shard_id": row["shard_id"],
        "sequence_number": row["sequence_number"],
        "sub_sequence_number": row["sub_sequence_number"],
        "partition_key": row["partition_key"],
        "explicit_hash_key": row["explicit_hash_key"],
        "approximate_arrival_timestamp": arrived.isoformat(timespec="milliseconds").replace(
            "+00:00", "Z"
        ),
        "data": text,
        "data_encoding": encoding,
    }


def _write(batch: RecordBatch, limit: int | None, *, raw: bool) -> int:
    """Print up to ``limit`` rows of ``batch`` (all if None); return how many were printed."""
    rows = batch.arrow.to_pylist() if limit is None else batch.arrow.slice(0, limit).to_pylist()
    if raw:
        out = sys.stdout.buffer
        for row in rows:
            out.write(row["data"] + b"\n")
        out.flush()
    else:
        sys.stdout.write("".join(json.dumps(record_json(row)) + "\n" for row in rows))
        sys.stdout.flush()
    return len(rows)


async def _existing_consumers(client: KinesisClient, streams: Sequence[str], name: str) -> set[str]:
    """The streams on which an EFO consumer called ``name`` is registered (and not deleting)."""
    found: set[str] = set()
    for stream in streams:
        for consumer in await list_consumers(client, stream):
            if consumer["ConsumerName"] == name and consumer["ConsumerStatus"] != "DELETING":
                found.add(stream)
    return found


async def run_tail(
    client: KinesisClient,
    streams: Sequence[str],
    *,
    mode: str,
    start: StartingPosition,
    count: int | None,
    consumer_name: str | None,
    raw: bool,
) -> int:
    """Print records until ``count`` were printed (0), or a signal: 130 (SIGINT), 143 (SIGTERM).

    In EFO mode the consumer ``consumer_name`` (default: the library's name for these
    streams) is registered where it is missing and deregistered from there on exit, whatever
    the exit; where it already existed it is reused and kept.
    """
    # The library's default name hashes the streams' names, whichever way they were given.
    names = [StreamRef.parse(stream).name for stream in streams]
    name = (consumer_name or default_consumer_name(names)) if mode == "efo" else None
    config = ConsumerConfig(
        mode="efo" if mode == "efo" else "polling",
        consumer_name=name,
        start=start,
        # The library would deregister on a clean close even a consumer it found registered
        # (maybe another application's); this command removes only what it registered.
        deregister_on_close=False,
    )
    registered: list[str] = []
    if name is not None:
        existing = await _existing_consumers(client, streams, name)
        registered = [stream for stream in streams if stream not in existing]
    interrupted = 0  # the signal that stopped the command, if any
    reader_gone = False  # standard output's reader closed its end (`tail | head`)
    try:
        async with anyio.create_task_group() as tg:
            consumer: Consumer | None = None

            def on_signal(signum: int) -> None:
                nonlocal interrupted
                if interrupted or consumer is None:
                    tg.cancel_scope.cancel()  # a second signal, or nothing open to close
                else:
                    consumer.stop()  # a clean close: iteration ends below
                interrupted = interrupted or signum

            def on_reader_gone() -> None:
                nonlocal reader_gone
                reader_gone = True
                if consumer is not None:
                    consumer.stop()

            if threading.current_thread() is threading.main_thread():
                await tg.start(watch_signals, on_signal)
            await tg.start(_watch_reader, sys.stdout, on_reader_gone)
            async with Consumer(client, list(streams), config) as reading:
                consumer = reading
                if reader_gone:
                    reading.stop()  # the reader left while the consumer was opening
                left = count
                async for batch in reading:
                    try:
                        printed = _write(batch, left, raw=raw)
                    except BrokenPipeError:
                        reader_gone = True
                        break  # a clean close: nothing more can be printed
                    reading.commit(batch)
                    if left is not None:
                        left -= printed
                        if left == 0:
                            break
            tg.cancel_scope.cancel()
    finally:
        if registered:
            await _deregister(client, registered, name)
    if reader_gone:
        # main() treats this as the end it is (`tail | head`): exit 0, quietly.
        raise BrokenPipeError(errno.EPIPE, "the reader of standard output went away")
    return 128 + interrupted if interrupted else 0


async def watch_signals(
    on_signal: Callable[[int], None], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Call ``on_signal(signum)`` for each SIGINT and SIGTERM (main thread only), so a command
    can end its own way (a clean close, a summary) instead of by KeyboardInterrupt."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            on_signal(int(signum))


async def _watch_reader(
    out: TextIO,
    on_gone: Callable[[], None],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``on_gone`` when the reader of the pipe ``out`` closes its end.

    ``tail | head -n 1``: once ``head`` has its line it exits, but a writer learns that only
    from its next write, and on a quiet stream there may be none for hours. The kernel tells a
    poller at once (POLLERR on a pipe's write end with no reader left), so a daemon thread
    polls for exactly that, with no events requested, and a second pipe to end it when the
    command ends first. Anything but a pipe (a terminal, a file, pytest's capture) is left
    alone: its reader cannot leave that way.
    """
    try:
        fd = out.fileno()
        is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation):
        is_pipe = False
    if not is_pipe:
        task_status.started()
        return
    token = anyio.lowlevel.current_token()
    gone = anyio.Event()
    wake_read, wake_write = os.pipe()

    def poll() -> None:
        try:
            poller = select.poll()
            poller.register(fd, 0)  # POLLERR and POLLHUP are reported unasked
            poller.register(wake_read, select.POLLIN)
            ready = {ready_fd for ready_fd, _ in poller.poll()}
        finally:
            os.close(wake_read)
        if fd in ready:
            try:
                anyio.from_thread.run_sync(gone.set, token=token)
            except Exception:  # the command ended meanwhile, and its loop with it
                return

    threading.Thread(target=poll, name="kinesis-actors tail: stdout", daemon=True).start()
    task_status.started()
    try:
        await gone.wait()
        on_gone()
    finally:
        os.close(wake_write)  # the poller sees end of file on its wake pipe and returns


async def _deregister(client: KinesisClient, streams: Sequence[str], name: str | None) -> None:
    """Best effort, bounded, not cancellable: a leftover is reported with the command to run."""
    assert name is not None
    for stream in streams:
        with anyio.move_on_after(_DEREGISTER_TIMEOUT, shield=True) as scope:
            try:
                await deregister_consumer(client, stream, name, wait=False)
                continue
            except errors.KinesisError as exc:
                reason = str(exc)
        if scope.cancelled_caught:
            reason = f"no answer within {_DEREGISTER_TIMEOUT:g} s"
        print(
            f"kinesis-actors: warning: could not deregister EFO consumer {name!r} from stream "
            f"{stream!r} ({reason}); run `kinesis-actors consumers deregister --stream {stream} "
            f"--name {name}`",
            file=sys.stderr,
        )
