"""``kinesis-actors tail``: records as JSON lines (polling and EFO), --count, --from, --raw,
Ctrl-C, and the EFO consumer it registers being removed (and one it reused being kept)."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Any

import pytest

from kinesis_actors import LocalKinesis
from kinesis_actors.cli import main
from tests.boto import create_stream

LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
FIELDS = {
    "stream",
    "shard_id",
    "sequence_number",
    "sub_sequence_number",
    "partition_key",
    "explicit_hash_key",
    "approximate_arrival_timestamp",
    "data",
    "data_encoding",
}


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in LOCAL_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def _consumer_names(kinesis: Any, stream: str) -> list[str]:
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    return [
        c["ConsumerName"]
        for c in kinesis.list_stream_consumers(StreamARN=arn)["Consumers"]
        if c["ConsumerStatus"] != "DELETING"
    ]


def test_polling_count_prints_json_lines_in_order(
    local_kinesis: LocalKinesis, stream_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    sent = [b"one", b"two", b"\xff\xfe binary", b"four", b"five"]
    for data in sent:  # one key: one shard, in this order
        kinesis.put_record(StreamName=stream_name, Data=data, PartitionKey="k")
    where = ["--stream", stream_name, "--endpoint-url", local_kinesis.endpoint_url]

    assert main(["tail", *where, "--from", "trim_horizon", "--count", "4"]) == 0
    captured = capsys.readouterr()
    records = _lines(captured.out)
    assert captured.err == ""
    assert len(records) == 4  # stops at --count, though a fifth record is there
    assert all(set(record) == FIELDS for record in records)
    assert [r["data"] for r in records] == [
        "one",
        "two",
        base64.b64encode(sent[2]).decode(),
        "four",
    ]
    assert [r["data_encoding"] for r in records] == ["utf-8", "utf-8", "base64", "utf-8"]
    first = records[0]
    assert first["stream"] == stream_name and first["partition_key"] == "k"
    assert first["shard_id"].startswith("shardId-") and first["sub_sequence_number"] == 0
    assert first["explicit_hash_key"] is None
    assert first["approximate_arrival_timestamp"].endswith("Z")
    assert datetime.fromisoformat(first["approximate_arrival_timestamp"].replace("Z", "+00:00"))
    sequence_numbers = [int(r["sequence_number"]) for r in records]
    assert sequence_numbers == sorted(sequence_numbers) and len(set(sequence_numbers)) == 4


def test_several_streams_and_aggregated_records_from_put(
    local_kinesis: LocalKinesis, stream_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = stream_name + "-b"
    kinesis = create_stream(local_kinesis, stream_name, 1)
    create_stream(local_kinesis, other, 1)
    kinesis.put_record(StreamName=other, Data=b"from b", PartitionKey="b")
    # Three lines in one KPL aggregate (put's default): tail expands them into user records.
    kinesis.put_record(StreamName=stream_name, Data=b"plain", PartitionKey="a")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x\ny\nz\n")))
        assert (
            main(
                [
                    "put",
                    "--stream",
                    stream_name,
                    "--key",
                    "agg",
                    "--endpoint-url",
                    local_kinesis.endpoint_url,
                ]
            )
            == 0
        )
    assert json.loads(capsys.readouterr().out)["records"] == 3

    streams = f"{stream_name},{other}"
    assert (
        main(
            [
                "tail",
                "--stream",
                streams,
                "--endpoint-url",
                local_kinesis.endpoint_url,
                "--from",
                "trim_horizon",
                "--count",
                "5",
            ]
        )
        == 0
    )
    records = _lines(capsys.readouterr().out)
    assert sorted((r["stream"], r["data"]) for r in records) == sorted(
        [
            (stream_name, "plain"),
            (stream_name, "x"),
            (stream_name, "y"),
            (stream_name, "z"),
            (other, "from b"),
        ]
    )
    aggregated = [r for r in records if r["partition_key"] == "agg"]
    assert [r["sub_sequence_number"] for r in aggregated] == [0, 1, 2]
    assert len({r["sequence_number"] for r in aggregated}) == 1


def test_raw_prints_only_the_data(
    local_kinesis: LocalKinesis, stream_name: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 1)
    for data in (b"alpha", b"\x00\xff", b"gamma"):
        kinesis.put_record(StreamName=stream_name, Data=data, PartitionKey="k")
    assert (
        main(
            [
                "tail",
                "--stream",
                stream_name,
                "--endpoint-url",
                local_kinesis.endpoint_url,
                "--from",
                "trim_horizon",
                "--count",
                "3",
                "--raw",
            ]
        )
        == 0
    )
    assert capsysbinary.readouterr().out == b"alpha\n\x00\xff\ngamma\n"


def test_from_latest_skips_what_was_there(
    local_kinesis: LocalKinesis, stream_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 1)
    for i in range(3):
        kinesis.put_record(StreamName=stream_name, Data=b"old %d" % i, PartitionKey="k")
    stop = threading.Event()

    def produce() -> None:  # new records until the tail has what it needs
        i = 0
        while not stop.wait(0.2):
            kinesis.put_record(StreamName=stream_name, Data=b"new %d" % i, PartitionKey="k")
            i += 1

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    try:
        status = main(
            [
                "tail",
                "--stream",
                stream_name,
                "--endpoint-url",
                local_kinesis.endpoint_url,
                "--from",
                "latest",
                "--count",
                "2",
            ]
        )
    finally:
        stop.set()
        writer.join()
    assert status == 0
    data = [r["data"] for r in _lines(capsys.readouterr().out)]
    assert len(data) == 2 and all(d.startswith("new ") for d in data), data


def test_efo_count_deregisters_the_consumer_it_registered(
    local_kinesis: LocalKinesis, stream_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    for i in range(6):
        kinesis.put_record(StreamName=stream_name, Data=b"r%d" % i, PartitionKey=str(i))
    assert (
        main(
            [
                "tail",
                "--stream",
                stream_name,
                "--mode",
                "efo",
                "--no-verify",
                "--endpoint-url",
                local_kinesis.tls_endpoint_url,
                "--from",
                "trim_horizon",
                "--count",
                "6",
            ]
        )
        == 0
    )
    records = _lines(capsys.readouterr().out)
    assert sorted(r["data"] for r in records) == [f"r{i}" for i in range(6)]
    assert _consumer_names(kinesis, stream_name) == []


def test_efo_reuses_an_existing_consumer_and_keeps_it(
    local_kinesis: LocalKinesis, stream_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 1)
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    kinesis.register_stream_consumer(StreamARN=arn, ConsumerName="someone-elses")
    kinesis.put_record(StreamName=stream_name, Data=b"hello", PartitionKey="k")
    assert (
        main(
            [
                "tail",
                "--stream",
                stream_name,
                "--mode",
                "efo",
                "--no-verify",
                "--consumer-name",
                "someone-elses",
                "--endpoint-url",
                local_kinesis.tls_endpoint_url,
                "--from",
                "trim_horizon",
                "--count",
                "1",
            ]
        )
        == 0
    )
    assert [r["data"] for r in _lines(capsys.readouterr().out)] == ["hello"]
    assert _consumer_names(kinesis, stream_name) == ["someone-elses"]


def test_ctrl_c_exits_130_quietly_and_deregisters(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 1)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kinesis_actors.cli",
            "tail",
            "--stream",
            stream_name,
            "--mode",
            "efo",
            "--no-verify",
            "--endpoint-url",
            local_kinesis.tls_endpoint_url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **LOCAL_CREDENTIALS},
    )
    try:
        deadline = time.monotonic() + 30
        while not _consumer_names(kinesis, stream_name):  # registered: the tail is running
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the tail never registered its consumer"
            time.sleep(0.1)
        # Subscribed and reading once a record put now (it starts at LATEST) is printed.
        assert process.stdout is not None
        printed: list[bytes] = []
        reader = threading.Thread(target=lambda: printed.append(process.stdout.readline()))
        reader.start()
        sent = 0
        while reader.is_alive():
            assert time.monotonic() < deadline, "the tail never printed a record"
            kinesis.put_record(StreamName=stream_name, Data=b"ping-%d" % sent, PartitionKey="k")
            sent += 1
            reader.join(0.5)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130
    assert err == b""
    lines = _lines((printed[0] + out).decode())
    assert lines and all(line["data"].startswith("ping-") for line in lines)
    assert _consumer_names(kinesis, stream_name) == []
