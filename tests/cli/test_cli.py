"""The kinesis-actors command: the demo end to end, put from standard input, user errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kinesis_actors import LocalKinesis
from tests.boto import create_stream, read_back


def _cli(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kinesis_actors.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.slow
def test_the_demo_runs_end_to_end_and_leaves_no_process_behind(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kinesis_actors.cli",
            "demo",
            "--records",
            "3000",
            "--shards",
            "2",
            "--output",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: the local server and Spark's JVM join it
    )
    out, err = demo.communicate(timeout=300)
    assert demo.returncode == 0, err.decode()[-3000:]
    text = out.decode()
    assert "every record exactly once, in order per key: yes" in text
    assert "sink stream and parquet hold every record once: yes" in text
    assert "p99" in text and "backpressure cycles" in text
    assert list((tmp_path / "parquet").glob("*.parquet")), "no parquet output"
    # Spark's JVM exits when it sees its parent's pipe close: give it a bounded moment.
    left = subprocess.run(["pgrep", "-g", str(demo.pid)], capture_output=True, check=False)
    for _ in range(150):
        left = subprocess.run(["pgrep", "-g", str(demo.pid)], capture_output=True, check=False)
        if not left.stdout:
            break
        time.sleep(0.1)  # another process group's exit: there is no event to await
    leftovers = subprocess.run(
        ["ps", "-o", "pid,args", "-g", str(demo.pid)], capture_output=True, check=False
    )
    assert not left.stdout, f"left behind:\n{leftovers.stdout.decode()}"


def test_put_produces_each_line_once(local_kinesis: LocalKinesis, stream_name: str) -> None:
    create_stream(local_kinesis, stream_name, 2)
    lines = b"".join(b"line %d\n" % i for i in range(300)) + b"\n"  # a blank line is skipped
    creds = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    done = _cli(
        "put",
        "--stream",
        stream_name,
        "--endpoint-url",
        local_kinesis.endpoint_url,
        "--no-aggregation",
        stdin=lines,
        env=creds,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["records"] == 300 and summary["failed"] == 0
    stored = [r["Data"] for shard in read_back(local_kinesis, stream_name).values() for r in shard]
    assert sorted(stored) == sorted(b"line %d" % i for i in range(300))


def test_an_unknown_stream_is_one_line_and_exit_2(local_kinesis: LocalKinesis) -> None:
    creds = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    done = _cli(
        "put",
        "--stream",
        "nope",
        "--endpoint-url",
        local_kinesis.endpoint_url,
        stdin=b"x\n",
        env=creds,
    )
    assert done.returncode == 2
    assert done.stderr.decode().startswith("kinesis-actors: error:")
    assert "Traceback" not in done.stderr.decode()


def test_consumers_list_and_deregister(local_kinesis: LocalKinesis, stream_name: str) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 1)
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    kinesis.register_stream_consumer(StreamARN=arn, ConsumerName="left-behind")
    creds = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    where = ("--stream", stream_name, "--endpoint-url", local_kinesis.endpoint_url)
    listed = _cli("consumers", "list", *where, env=creds)
    assert listed.returncode == 0, listed.stderr
    assert [c["name"] for c in json.loads(listed.stdout)] == ["left-behind"]
    removed = _cli("consumers", "deregister", *where, "--name", "left-behind", env=creds)
    assert removed.returncode == 0, removed.stderr
    assert json.loads(_cli("consumers", "list", *where, env=creds).stdout) == []
    missing = _cli("consumers", "deregister", *where, "--name", "left-behind", env=creds)
    assert missing.returncode == 2 and "no consumer named" in missing.stderr.decode()
