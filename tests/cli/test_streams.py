"""A stream's whole life from the command line, as a person types it.

Every command runs as the installed ``kinesis-actors`` console script in a subprocess against
the local server: ``local --create-stream`` then ``put`` then ``tail``; ``create-stream``,
``describe-stream``, ``list-streams``, ``update-shard-count`` and ``delete-stream`` in a round
trip; and the mistakes a person makes, each answered in one line with exit status 2.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kinesis_actors import LocalKinesis

COMMAND = str(Path(sys.executable).with_name("kinesis-actors"))
ENV = {**os.environ, "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
#: Starting the local server takes ~2-10 s on a busy 2-core machine; this only bounds a hang.
START_BOUND = 90.0


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=False,
    )


def _json(*args: str) -> Any:
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("kinesis-actors"), done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The process's first line of output; fails after ``timeout`` s or if it exits first."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(timeout), f"no line within {timeout} s"
    line = process.stdout.readline()
    assert line.endswith("\n"), (line, process.poll())
    return line


def test_local_creates_the_streams_asked_for_and_put_and_tail_use_them_at_once(
    stream_name: str,
) -> None:
    local = subprocess.Popen(
        [COMMAND, "local", "--create-stream", f"{stream_name}:2", "--create-stream", "other"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        started = json.loads(_first_line(local, START_BOUND))
        assert started["streams"] == {stream_name: 2, "other": 1}
        where = ("--endpoint-url", started["endpoint_url"])
        # No wait between the line and the first command: the streams are ACTIVE already.
        lines = "".join(f"{i}\n" for i in range(50))
        put = _run("put", "--stream", stream_name, *where, stdin=lines)
        assert put.returncode == 0, put.stderr
        assert json.loads(put.stdout)["records"] == 50
        tail = _run(
            "tail", "--stream", stream_name, "--from", "trim_horizon", "--count", "50", "--raw",
            *where,
        )  # fmt: skip
        assert tail.returncode == 0, tail.stderr
        assert sorted(tail.stdout.split(), key=int) == [str(i) for i in range(50)]
        described = _json("describe-stream", "--stream", stream_name, *where)
        assert (described["status"], described["open_shards"]) == ("ACTIVE", 2)
        assert sorted(_json("list-streams", *where)) == sorted([stream_name, "other"])
        local.send_signal(signal.SIGINT)
        assert local.wait(timeout=30) == 0
    finally:
        if local.poll() is None:
            local.kill()
        local.communicate()


def test_create_describe_list_update_delete_round_trip(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    where = ("--endpoint-url", local_kinesis.endpoint_url)
    created = _json("create-stream", "--stream", stream_name, "--shard-count", "1", *where)
    assert created["stream"] == stream_name
    assert (created["status"], created["mode"], created["open_shards"]) == (
        "ACTIVE",
        "PROVISIONED",
        1,
    )
    assert created["arn"].endswith(f":stream/{stream_name}")
    # The AWS CLI's flag name works too.
    described = _json("describe-stream", "--stream-name", stream_name, *where)
    assert described == created
    assert stream_name in _json("list-streams", *where)

    updated = _json(
        "update-shard-count", "--stream", stream_name, "--target-shard-count", "2", *where
    )
    assert (updated["status"], updated["open_shards"]) == ("ACTIVE", 2)

    deleted = _json("delete-stream", "--stream", stream_name, *where)
    assert deleted == {"deleted": stream_name}
    assert stream_name not in _json("list-streams", *where)
    _one_line_error(_run("describe-stream", "--stream", stream_name, *where), "not found")


def test_an_on_demand_stream_is_created_and_its_shard_count_is_not_ours_to_change(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    where = ("--endpoint-url", local_kinesis.endpoint_url)
    created = _json("create-stream", "--stream", stream_name, "--on-demand", *where)
    assert (created["status"], created["mode"]) == ("ACTIVE", "ON_DEMAND")
    refused = _run(
        "update-shard-count", "--stream", stream_name, "--target-shard-count", "2", *where
    )
    _one_line_error(refused, "on-demand")
    assert _json("delete-stream", "--stream", stream_name, *where) == {"deleted": stream_name}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["create-stream", "--stream", "s"], ["--shard-count", "--on-demand"]),
        (["create-stream", "--stream", "s", "--shard-count", "0"], ["positive"]),
        (["create-stream", "--stream", "s", "--shard-count", "1", "--on-demand"], ["not allowed"]),
        (["create-stream", "--stream", "a b", "--shard-count", "1"], ["stream name"]),
        (["update-shard-count", "--stream", "s"], ["--target-shard-count"]),
        (["local", "--create-stream", "orders:0"], ["NAME:SHARDS"]),
        (["local", "--create-stream", "orders:many"], ["NAME:SHARDS"]),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], words: list[str]) -> None:
    _one_line_error(_run(*args), *words)


def test_a_stream_that_exists_already_is_said_in_one_line(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    where = ("--endpoint-url", local_kinesis.endpoint_url)
    _json("create-stream", "--stream", stream_name, "--shard-count", "1", *where)
    again = _run("create-stream", "--stream", stream_name, "--shard-count", "1", *where)
    _one_line_error(again, "already exists", "describe-stream")
    # More than the service's doubling in one step: its own refusal, in one line.
    refused = _run(
        "update-shard-count", "--stream", stream_name, "--target-shard-count", "8", *where
    )
    _one_line_error(refused, "UpdateShardCount")
    _json("delete-stream", "--stream", stream_name, *where)
    _one_line_error(_run("delete-stream", "--stream", stream_name, *where), "not found")


def test_an_endpoint_where_nothing_listens_is_one_line(closed_port_url: str) -> None:
    started = time.monotonic()
    _one_line_error(
        _run("create-stream", "--stream", "s", "--shard-count", "1", "--endpoint-url",
             closed_port_url),
        "cannot reach Kinesis",
    )  # fmt: skip
    _one_line_error(_run("list-streams", "--endpoint-url", closed_port_url), "cannot reach")
    # The first call fails fast (two quick retries), not after the library's patient ones.
    assert time.monotonic() - started < 60
