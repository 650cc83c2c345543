"""``put``'s input: lines read off the event loop, each handed over as it arrives."""

from __future__ import annotations

import io
import os
import threading
from contextlib import aclosing

import anyio
import pytest

from kinesis_actors.cli import _put
from kinesis_actors.cli._put import input_lines

pytestmark = pytest.mark.anyio


async def _all(source: io.BufferedIOBase) -> list[bytes]:
    return [line async for line in input_lines(source)]


async def test_line_ends_blank_lines_and_a_last_line_without_newline() -> None:
    source = io.BytesIO(b"a\r\nb\n\nc")
    assert await _all(source) == [b"a", b"b", b"", b"c"]


async def test_a_line_longer_than_one_read_is_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_put, "_READ_CHUNK", 7)
    source = io.BytesIO(b"x" * 50 + b"\nshort\n")
    assert await _all(source) == [b"x" * 50, b"short"]


async def test_an_endless_line_is_handed_on_at_the_size_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Bounded memory: the producer gets the oversized line (and raises) instead of the reader
    # growing it forever.
    monkeypatch.setattr(_put, "_READ_CHUNK", 8)
    monkeypatch.setattr(_put, "_MAX_LINE", 32)
    lines = await _all(io.BytesIO(b"y" * 100))
    assert len(lines[0]) <= 32 + 8
    assert b"".join(lines) == b"y" * 100


async def test_a_slow_pipe_does_not_block_the_loop_and_each_line_arrives_on_its_own() -> None:
    read_end, write_end = os.pipe()
    loop_ran_while_reader_waited = threading.Event()
    writer_gave_up = False

    def slow_writer() -> None:
        nonlocal writer_gave_up
        os.write(write_end, b"first\n")
        # A reader that blocked the loop would keep the loop from setting this event.
        writer_gave_up = not loop_ran_while_reader_waited.wait(timeout=5)
        os.write(write_end, b"second\n")
        os.close(write_end)

    seen: list[bytes] = []
    first = anyio.Event()

    async def reader(source: io.BufferedReader) -> None:
        async for line in input_lines(source):
            seen.append(line)
            first.set()

    writer = threading.Thread(target=slow_writer)
    with os.fdopen(read_end, "rb") as source, anyio.fail_after(20):
        writer.start()
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader, source)
            await first.wait()
            assert seen == [b"first"]  # handed over before the writer closed the pipe
            for _ in range(5):  # the reader now waits on an empty pipe
                await anyio.sleep(0.01)
            loop_ran_while_reader_waited.set()
        writer.join()
    assert not writer_gave_up
    assert seen == [b"first", b"second"]


async def test_leaving_early_on_an_idle_pipe_returns_and_leaves_only_a_daemon_reader() -> None:
    # Ctrl-C or a failed put while the terminal is idle: the command must end without waiting
    # for input, and the reader blocked in read1 must not keep the process alive.
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as source, anyio.fail_after(10):
        os.write(write_end, b"only\n")
        async with aclosing(input_lines(source)) as lines:
            async for line in lines:
                assert line == b"only"
                break
        readers = [t for t in threading.enumerate() if t.name == "kinesis-actors put: stdin"]
        assert readers and all(reader.daemon for reader in readers)
        os.close(write_end)  # now the blocked read returns and the reader finds nobody
        for reader in readers:
            await anyio.to_thread.run_sync(reader.join, 5)
            assert not reader.is_alive()
