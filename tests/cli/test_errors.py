"""User errors: one line on stderr saying what to do, exit status 2, never a traceback; and
every command's --help."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kinesis_actors import LocalKinesis
from kinesis_actors.cli import main
from kinesis_actors.cli._main import _failure
from kinesis_actors.errors import TransportError
from kinesis_actors.runtime import RestartIntensityExceeded


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *fragments: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("kinesis-actors"), err
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.mark.parametrize(
    "command",
    [
        ["tail"],
        ["tail", "--mode", "efo", "--no-verify"],
        ["consumers", "list"],
        ["consumers", "deregister", "--name", "x"],
        ["put"],
    ],
)
def test_an_unknown_stream(
    local_kinesis: LocalKinesis, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    url = local_kinesis.tls_endpoint_url if "efo" in command else local_kinesis.endpoint_url
    _one_line_error(
        capsys, [*command, "--stream", "no-such", "--endpoint-url", url], "'no-such' not found"
    )


@pytest.mark.parametrize("command", [["tail"], ["consumers", "list"], ["put"]])
def test_an_unreachable_endpoint_fails_fast(
    capsys: pytest.CaptureFixture[str], command: list[str], closed_port_url: str
) -> None:
    _one_line_error(
        capsys,
        [*command, "--stream", "s", "--endpoint-url", closed_port_url],
        "cannot reach Kinesis",
        "--endpoint-url",
    )


def test_an_untrusted_certificate_points_at_no_verify(
    local_kinesis: LocalKinesis, capsys: pytest.CaptureFixture[str]
) -> None:
    _one_line_error(
        capsys,
        ["tail", "--stream", "s", "--endpoint-url", local_kinesis.tls_endpoint_url],
        "--no-verify",
    )


def test_missing_credentials(
    local_kinesis: LocalKinesis,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: os.PathLike[str],
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.path.join(tmp_path, "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", os.path.join(tmp_path, "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for command in (["tail"], ["consumers", "list"], ["put"]):
        _one_line_error(
            capsys,
            [*command, "--stream", "s", "--endpoint-url", local_kinesis.endpoint_url],
            "no AWS credentials",
            "AWS_ACCESS_KEY_ID",
        )


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--stream", "s", "--count", "-1"], "--count: must be a positive whole number"),
        (["--stream", "s", "--count", "0"], "--count: must be a positive whole number"),
        (["--stream", "s", "--count", "ten"], "--count: must be a positive whole number"),
        (["--stream", "s", "--from", "yesterday"], "--from: expected latest, trim_horizon"),
        (["--stream", "s", "--from", "2999-01-01T00:00:00Z"], "is in the future"),
        (["--stream", "s", "--mode", "fast"], "--mode: invalid choice"),
        (["--stream", "a,,b"], "comma-separated"),
        (["--count", "3"], "required: --stream"),
        (["--stream", "s", "--mode", "efo", "--endpoint-url", "http://x:1"], "https endpoint"),
        (["--stream", "s", "--consumer-name", "n"], "--consumer-name is for --mode efo"),
        (["--stream", "s", "--endpoint-url", "localhost:4567"], "http:// or https:// URL"),
    ],
)
def test_bad_tail_flags(
    capsys: pytest.CaptureFixture[str], flags: list[str], fragment: str
) -> None:
    _one_line_error(capsys, ["tail", *flags], fragment)


def test_bad_flags_of_other_commands(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(capsys, ["consumers", "deregister", "--stream", "s"], "required: --name")
    _one_line_error(capsys, ["consumers"], "required: ACTION")
    _one_line_error(capsys, ["nope"], "invalid choice")


def test_deregistering_a_missing_consumer(
    local_kinesis: LocalKinesis, stream_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.boto import create_stream

    create_stream(local_kinesis, stream_name, 1)
    argv = ["consumers", "deregister", "--stream", stream_name, "--name", "ghost"]
    _one_line_error(
        capsys, [*argv, "--endpoint-url", local_kinesis.endpoint_url], "no consumer named 'ghost'"
    )


def test_a_consumer_that_gave_up_is_one_line_with_the_cause() -> None:
    cause = TransportError("ConnectError: refused", operation="GetRecords")
    gave_up = RestartIntensityExceeded("readers", 5, 30.0, [cause])
    group = BaseExceptionGroup("task group", [ExceptionGroup("inner", [gave_up])])
    assert _failure(group) == (
        "gave up after repeated failures; the last one: GetRecords: ConnectError: refused",
        1,
    )
    assert _failure(ExceptionGroup("bug", [gave_up, KeyError("x")])) is None  # bugs stay loud


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinesis_actors.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )


def test_local_without_the_server_installed(tmp_path: os.PathLike[str]) -> None:
    done = _cli("local", env={"KINESIS_LOCAL_DIR": os.fspath(tmp_path)})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "not installed" in done.stderr and "npm install" in done.stderr


def test_a_process_reports_an_unknown_stream_in_one_line(local_kinesis: LocalKinesis) -> None:
    done = _cli(
        "tail",
        "--stream",
        "no-such",
        "--endpoint-url",
        local_kinesis.endpoint_url,
        env={"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"},
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("kinesis-actors: error: stream 'no-such' not found")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("command", "fragments"),
    [
        ([], ["COMMAND", "tail", "consumers", "local", "put"]),
        (["local"], ["endpoint_url", "tls_endpoint_url", "npm install", "example"]),
        (["put"], ["--stream", "--key", "examples", "JSON summary", "--endpoint-url"]),
        (["tail"], ["--count", "--from", "trim_horizon", "--raw", "data_encoding", "examples"]),
        (["consumers"], ["list", "deregister", "examples"]),
        (["consumers", "list"], ["--stream", "--no-verify", "JSON"]),
        (["consumers", "deregister"], ["--name", "--region"]),
    ],
)
def test_help(capsys: pytest.CaptureFixture[str], command: list[str], fragments: list[str]) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kinesis-actors")
    for fragment in fragments:
        assert fragment in out, (fragment, out)
