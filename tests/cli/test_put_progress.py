"""``put`` on a terminal shows a live line on standard error; off a terminal, nothing extra.

The terminal is a real pseudo-terminal given to the installed console script as its
standard error; standard output stays a pipe, and must hold the JSON summary alone.
"""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

from rich.console import Console

from kinesis_actors import LocalKinesis
from kinesis_actors.cli._put_progress import PutProgress, put_progress
from tests.boto import create_stream

COMMAND = str(Path(sys.executable).with_name("kinesis-actors"))
ENV = {**os.environ, "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
LINES = b"".join(b"line %d\n" % i for i in range(3000))


def _read_all(fd: int) -> bytes:
    """Everything written to the pseudo-terminal, once its writer has gone."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_on_a_terminal_put_shows_read_acknowledged_and_the_rate_and_stdout_keeps_the_summary(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    args = [COMMAND, "put", "--stream", stream_name, "--endpoint-url", local_kinesis.endpoint_url]
    main, terminal = pty.openpty()
    screen: list[bytes] = []
    # Read as it is written: a terminal nobody reads fills up and blocks its writer.
    reader = threading.Thread(target=lambda: screen.append(_read_all(main)), daemon=True)
    reader.start()
    try:
        done = subprocess.run(
            args,
            input=LINES,
            stdout=subprocess.PIPE,
            stderr=terminal,
            env=ENV,
            timeout=120,
            check=False,
        )
    finally:
        os.close(terminal)  # the last writer gone: the reader sees EIO and returns
        reader.join(10)
        os.close(main)
    shown = b"".join(screen).decode(errors="replace")
    assert done.returncode == 0, shown
    assert json.loads(done.stdout)["records"] == 3000  # one line: the summary alone
    assert f"put → {stream_name}" in shown and "acknowledged" in shown, shown
    assert "records/s" in shown and "read" in shown, shown

    # Off a terminal (a pipe, a file, a CI log): nothing but the summary.
    piped = subprocess.run(
        args, input=LINES, capture_output=True, env=ENV, timeout=120, check=False
    )
    assert piped.returncode == 0 and piped.stderr == b"", piped.stderr
    assert json.loads(piped.stdout)["records"] == 3000


def test_the_rate_is_what_was_acknowledged_over_the_last_seconds() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    progress = put_progress(console)
    assert progress is not None
    line = PutProgress(progress, "orders")
    assert line.show(read=10, acknowledged=0, failed=0, now=100.0) == 0.0
    assert line.show(read=500, acknowledged=400, failed=0, now=102.0) == 200.0
    # Older samples leave the window: a stall shows as a falling rate, then 0.
    for tick in range(30):
        rate = line.show(read=500, acknowledged=400, failed=0, now=102.2 + 0.2 * tick)
    assert rate == 0.0


def test_no_live_line_when_standard_error_is_not_a_terminal() -> None:
    assert put_progress(Console(file=io.StringIO(), force_terminal=False)) is None
