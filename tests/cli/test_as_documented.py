"""``tail`` and ``put`` run exactly as the README shows them.

Each test starts the installed ``kinesis-actors`` console script as a subprocess against the
local server, the way a person types it: ``tail`` with no ``--count`` (the documented "until
Ctrl-C" form), ``tail ... | head -n 1`` through a real shell pipe, and ``put`` interrupted
by Ctrl-C while its standard input is still open. Output is read line by line with a bounded
wait; every wait has a deadline, so a command that goes quiet fails the test instead of
hanging it.
"""

from __future__ import annotations

import json
import os
import selectors
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import pytest

from kinesis_actors import LocalKinesis, StartingPosition
from kinesis_actors.cli import _tail
from kinesis_actors.cli._put import INTERRUPT_FLUSH_TIMEOUT
from kinesis_actors.records import deaggregate
from tests.boto import boto3_kinesis, create_stream, read_back
from tests.faults import FaultProxy, Reply, Request

#: The console script the README's commands name, from the environment running the tests.
COMMAND = str(Path(sys.executable).with_name("kinesis-actors"))
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
ENV = {**os.environ, **LOCAL_CREDENTIALS}
#: "At once" for `tail | head`: polling closes in ~0.1 s; EFO closes each subscription in
#: ~1 s (measured on the local server), and these streams have one shard. Slack for 2 busy cores.
EXIT_BOUND = 6.0


def _where(local_kinesis: LocalKinesis, mode: str) -> list[str]:
    if mode == "efo":
        return ["--mode", "efo", "--endpoint-url", local_kinesis.tls_endpoint_url, "--no-verify"]
    return ["--endpoint-url", local_kinesis.endpoint_url]


def _read_lines(out: IO[bytes], count: int, timeout: float) -> list[bytes]:
    """Read from ``out`` until it gave ``count`` complete lines; fail after ``timeout`` s."""
    fd = out.fileno()
    buffered = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (complete := buffered.count(b"\n")) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"{complete} of {count} lines within {timeout} s"
            if selector.select(left):
                chunk = os.read(fd, 65536)
                assert chunk, f"output closed after {complete} of {count} lines"
                buffered += chunk
    assert buffered.endswith(b"\n"), "a line was cut"
    return buffered.split(b"\n")[:-1]


def _interrupt(process: subprocess.Popen[bytes], timeout: float = 30) -> tuple[bytes, bytes]:
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=timeout)


def _stopped(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.communicate()


def _data(line: bytes, form: str) -> str:
    if form == "raw":
        return line.decode()
    record: dict[str, Any] = json.loads(line)
    assert record["data_encoding"] == "utf-8"
    return str(record["data"])


def _consumer_names(kinesis: Any, stream: str) -> list[str]:
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    return [
        c["ConsumerName"]
        for c in kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]
        if c["ConsumerStatus"] != "DELETING"
    ]


def _user_records(local_kinesis: LocalKinesis, stream: str) -> list[bytes]:
    """Every user record in the stream (KPL aggregates expanded), read with boto3."""
    found: list[bytes] = []
    for records in read_back(local_kinesis, stream).values():
        for record in records:
            found.extend(
                user.data
                for user in deaggregate(
                    record["Data"], record["PartitionKey"], record.get("ExplicitHashKey")
                )
            )
    return found


@pytest.fixture
def writer(local_kinesis: LocalKinesis, stream_name: str) -> Iterator[list[str]]:
    """Puts "live N" records under one key (one shard, in order) until the test ends; the
    list holds what was acknowledged, in order."""
    kinesis = create_stream(local_kinesis, stream_name, 2)
    written: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.wait(0.05):  # a live stream: a record every 50 ms
            data = f"live {len(written)}"
            kinesis.put_record(StreamName=stream_name, Data=data.encode(), PartitionKey="k")
            written.append(data)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    yield written
    stop.set()
    thread.join(10)


#: Both forms on polling; EFO (5 s a run: registration, then ~1 s a shard to close) once each.
@pytest.mark.parametrize(
    ("mode", "form"), [("polling", "json"), ("polling", "raw"), ("efo", "json")]
)
def test_tail_as_the_readme_shows_it_prints_each_new_record_until_ctrl_c(
    local_kinesis: LocalKinesis, stream_name: str, writer: list[str], mode: str, form: str
) -> None:
    # `kinesis-actors tail --stream S`: from latest, no --count. It may start after some
    # records; from its first line on it must print every record, in order, as it arrives.
    raw = ["--raw"] if form == "raw" else []
    process = subprocess.Popen(
        [COMMAND, "tail", "--stream", stream_name, *_where(local_kinesis, mode), *raw],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        assert process.stdout is not None
        printed = [_data(line, form) for line in _read_lines(process.stdout, 15, timeout=30)]
        out, err = _interrupt(process)
    finally:
        _stopped(process)
    printed += [_data(line, form) for line in out.splitlines()]
    assert process.returncode == 130
    assert err == b""
    first = writer.index(printed[0])
    assert printed == writer[first : first + len(printed)]  # no gap, no repeat, in order
    if mode == "efo":
        assert _consumer_names(boto3_kinesis(local_kinesis), stream_name) == []


@pytest.mark.parametrize("form", ["json", "raw"])
def test_tail_without_count_prints_all_of_a_60_record_stream(
    local_kinesis: LocalKinesis, stream_name: str, form: str
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    sent = {f"r{i}" for i in range(60)}
    for data in sorted(sent):
        kinesis.put_record(StreamName=stream_name, Data=data.encode(), PartitionKey=data)
    raw = ["--raw"] if form == "raw" else []
    process = subprocess.Popen(
        [
            *(COMMAND, "tail", "--stream", stream_name),
            *("--endpoint-url", local_kinesis.endpoint_url, "--from", "trim_horizon", *raw),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        assert process.stdout is not None
        printed = _read_lines(process.stdout, 60, timeout=15)
        out, err = _interrupt(process)
    finally:
        _stopped(process)
    assert out == b"" and err == b""  # nothing twice, nothing said
    assert process.returncode == 130
    assert sorted(_data(line, form) for line in printed) == sorted(sent)


@pytest.mark.parametrize(
    ("mode", "form"), [("polling", "json"), ("polling", "raw"), ("efo", "raw")]
)
def test_tail_piped_into_head_exits_at_once_with_status_0(
    local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path, mode: str, form: str
) -> None:
    # The stream goes quiet after the line `head` takes: the tail learns that its reader left
    # from the pipe itself, not from a next write that would never come.
    kinesis = create_stream(local_kinesis, stream_name, 1)
    for i in range(5):
        kinesis.put_record(StreamName=stream_name, Data=b"r%d" % i, PartitionKey="k")
    raw = ["--raw"] if form == "raw" else []
    tail = shlex.join(
        [
            *(COMMAND, "tail", "--stream", stream_name, *_where(local_kinesis, mode)),
            *("--from", "trim_horizon", *raw),
        ]
    )
    errors, statuses = tmp_path / "tail.err", tmp_path / "statuses"
    script = f'{tail} 2>{errors} | head -n 1; echo "${{PIPESTATUS[*]}}" >{statuses}'
    shell = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, env=ENV)
    try:
        assert shell.stdout is not None
        (line,) = _read_lines(shell.stdout, 1, timeout=30)
        head_done = time.monotonic()
        shell.wait(timeout=30)
        took = time.monotonic() - head_done
        rest = shell.stdout.read()
    finally:
        _stopped(shell)
    assert _data(line, form) == "r0" and rest == b""
    assert statuses.read_text().split() == ["0", "0"]  # tail's status, head's status
    assert took < EXIT_BOUND, f"the tail took {took:.1f} s to exit after head left"
    assert errors.read_bytes() == b""  # no traceback, no "Exception ignored" on the flush
    assert _consumer_names(kinesis, stream_name) == []  # EFO: its consumer is gone


@pytest.mark.anyio
async def test_a_write_into_a_closed_pipe_ends_tail_with_a_plain_broken_pipe(
    local_kinesis: LocalKinesis, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other way a `| head` shows: the write fails before the poller has seen anything.
    # A plain BrokenPipeError (not one wrapped in a task group's ExceptionGroup) after the
    # consumer closed is what main() turns into a quiet exit 0.
    create_stream(local_kinesis, stream_name, 1).put_record(
        StreamName=stream_name, Data=b"x", PartitionKey="k"
    )

    class ClosedPipe:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise OSError("not a file")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    async with local_kinesis.client() as client:
        with anyio.fail_after(30), pytest.raises(BrokenPipeError):
            await _tail.run_tail(
                client,
                [stream_name],
                mode="polling",
                start=StartingPosition.trim_horizon(),
                count=None,
                consumer_name=None,
                raw=False,
            )


def _put_until_interrupted(
    endpoint_url: str, stream: str, lines: bytes, sending: threading.Event | None = None
) -> tuple[subprocess.Popen[bytes], dict[str, Any], bytes, float]:
    """`kinesis-actors put --stream S`, fed ``lines`` and then left open; Ctrl-C once the
    pipe took every byte (and ``sending`` is set, if given): put is running by then.
    Returns the process, its summary, stderr and how long the summary took after Ctrl-C."""
    process = subprocess.Popen(
        [COMMAND, "put", "--stream", stream, "--endpoint-url", endpoint_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(lines)
        process.stdin.flush()  # returns once put has read all but a pipe's buffer
        if sending is not None:
            assert sending.wait(30), "put never called PutRecords"
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        (summary,) = _read_lines(process.stdout, 1, timeout=INTERRUPT_FLUSH_TIMEOUT + 10)
        took = time.monotonic() - started
        process.stdin.close()
        process.wait(timeout=10)
        assert process.stderr is not None
        err = process.stderr.read()
    finally:
        _stopped(process)
    return process, json.loads(summary), err, took


def test_put_interrupted_mid_stream_says_exactly_what_went_out(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    total = 30_000  # ~300 KiB: more than a pipe holds, so put is reading when Ctrl-C comes
    lines = b"".join(b"line %d\n" % i for i in range(total))
    process, summary, err, _ = _put_until_interrupted(
        local_kinesis.endpoint_url, stream_name, lines
    )
    assert process.returncode == 130
    assert err == b""  # no "producer gave up on a record": nothing was given up
    assert summary["interrupted"] is True
    assert summary["failed"] == 0 and summary["not_sent"] == 0
    read = summary["read"]
    assert 0 < read <= total and summary["records"] == read
    # What it says was acknowledged is exactly what a reader finds: the first `read` lines.
    assert sorted(_user_records(local_kinesis, stream_name)) == sorted(
        b"line %d" % i for i in range(read)
    )


def test_put_interrupted_on_a_stalled_stream_gives_up_within_its_bound(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    sending = threading.Event()

    def throttle_every_put(request: Request) -> Reply | None:
        if request.target != "PutRecords":
            return None
        sending.set()
        return Reply.error("ProvisionedThroughputExceededException", "Rate exceeded")

    lines = b"".join(b"line %d\n" % i for i in range(200))
    with FaultProxy(local_kinesis.plain_port, throttle_every_put) as proxy:
        process, summary, err, took = _put_until_interrupted(
            proxy.endpoint_url, stream_name, lines, sending
        )
    assert process.returncode == 130
    assert took < INTERRUPT_FLUSH_TIMEOUT + 3
    assert summary["records"] == 0 and summary["failed"] == 0
    assert summary["not_sent"] == summary["read"] > 0
    lines_said = err.decode().splitlines()
    assert len(lines_said) == 1 and lines_said[0].startswith("kinesis-actors: interrupted: ")
    assert "gave up on a record" not in err.decode()
    assert _user_records(local_kinesis, stream_name) == []
