"""``--stream`` takes a stream ARN too: put, tail (polling and EFO) and consumers
list/deregister by ARN, and a bad ARN refused before any call."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest

from kinesis_actors import LocalKinesis
from kinesis_actors.cli import main
from tests.boto import create_stream


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")


def _arn(kinesis: Any, stream: str) -> str:
    arn: str = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    return arn


def _put(arn: str, endpoint: str, lines: bytes) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines)))
        assert main(["put", "--stream", arn, "--endpoint-url", endpoint]) == 0


def test_put_and_tail_by_arn_every_line_once_named_by_the_stream_name(
    local_kinesis: LocalKinesis, stream_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    arn = _arn(create_stream(local_kinesis, stream_name, 2), stream_name)
    _put(arn, local_kinesis.endpoint_url, b"".join(b"line %d\n" % i for i in range(40)))
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 40 and summary["failed"] == 0

    tail = ["tail", "--stream", arn, "--from", "trim_horizon", "--count", "40"]
    assert main([*tail, "--endpoint-url", local_kinesis.endpoint_url]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["data"] for r in records) == sorted(f"line {i}" for i in range(40))
    assert {r["stream"] for r in records} == {stream_name}

    efo = [*tail, "--mode", "efo", "--no-verify", "--endpoint-url", local_kinesis.tls_endpoint_url]
    assert main(efo) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["data"] for r in records) == sorted(f"line {i}" for i in range(40))


def test_consumers_list_and_deregister_by_arn(
    local_kinesis: LocalKinesis, stream_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 1)
    arn = _arn(kinesis, stream_name)
    kinesis.register_stream_consumer(StreamARN=arn, ConsumerName="by-arn")
    where = ["--stream", arn, "--endpoint-url", local_kinesis.endpoint_url]
    assert main(["consumers", "list", *where]) == 0
    assert [c["name"] for c in json.loads(capsys.readouterr().out)] == ["by-arn"]
    assert main(["consumers", "deregister", *where, "--name", "by-arn"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deregistered": "by-arn", "stream": arn}
    assert main(["consumers", "list", *where]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize(
    "command", [["tail"], ["put"], ["consumers", "list"], ["consumers", "deregister", "-n"]]
)
@pytest.mark.parametrize(
    ("stream", "says"),
    [
        ("arn:aws:kinesis:us-east-1:12345:stream/s", "not a Kinesis stream ARN"),
        ("arn:aws:sqs:us-east-1:123456789012:q", "the ARN of another service"),
        ("arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c:1", "of a stream's consumer"),
        ("arn:aws:kinesis:eu-west-1:123456789012:stream/s", "is in region eu-west-1, but"),
    ],
)
def test_a_bad_stream_arn_is_refused_naming_stream_before_any_call(
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    stream: str,
    says: str,
    closed_port_url: str,
) -> None:
    """Nothing listens at the endpoint: a call would say it cannot reach it instead."""
    if command[-1] == "-n":
        command = [*command[:-1], "--name", "x"]
    assert main([*command, "--stream", stream, "--endpoint-url", closed_port_url]) == 2
    err = capsys.readouterr().err
    assert says in err and "--stream" in err, err
    assert "cannot reach" not in err and "Traceback" not in err
