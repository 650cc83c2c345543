"""LocalKinesis: starts, answers, stops, and never outlives the process that started it."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from kinesis_actors import LocalDynamoDB, LocalKinesis, errors
from kinesis_actors.local import (
    INSTALL_COMMAND,
    LocalKinesisError,
    _kinesis,
    _process,
    find_server_dir,
)
from tests.local.helpers import alive, server_dies_with_a_killed_parent


def test_a_missing_install_names_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KINESIS_LOCAL_DIR", str(tmp_path))
    with pytest.raises(LocalKinesisError, match="not installed") as caught:
        LocalKinesis().start()
    assert INSTALL_COMMAND in str(caught.value)
    assert isinstance(caught.value, errors.KinesisError)


def test_missing_node_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    find_server_dir()  # the server is installed; only Node is missing here
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LocalKinesisError, match=r"Node\.js"):
        LocalKinesis().start()


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(errors.ConfigError, match="operation_duration"):
        LocalKinesis(operation_duration=-1)
    with pytest.raises(errors.ConfigError, match="start_timeout"):
        LocalKinesis(start_timeout=0)


def test_starts_on_free_ports_and_stops() -> None:
    server = LocalKinesis()
    with server:
        assert server.running
        assert server.plain_port != server.tls_port
        assert server.endpoint_url.startswith("http://127.0.0.1:")
        assert server.tls_endpoint_url.startswith("https://127.0.0.1:")
        pid = server._process.pid  # type: ignore[union-attr]
        assert alive(pid)
    assert not server.running
    assert not alive(pid)
    server.stop()  # idempotent


def test_a_plain_port_taken_by_another_server_is_retried_on_new_ports_not_adopted(
    monkeypatch: pytest.MonkeyPatch, local_kinesis: LocalKinesis
) -> None:
    """Two test workers start their servers at once and can be handed the same free port: the
    second server then fails to bind while the first one answers on it. Starting must not
    adopt the other process's server (which would vanish with that process, mid-run): it
    starts again on new ports."""
    real_free_port = _kinesis.free_port
    ports = iter([local_kinesis.plain_port])
    monkeypatch.setattr(_kinesis, "free_port", lambda: next(ports, None) or real_free_port())
    with LocalKinesis(start_timeout=20) as second:
        assert second.running and second.plain_port != local_kinesis.plain_port
    assert local_kinesis.running


def test_a_port_taken_at_every_attempt_is_an_error_naming_the_exit(
    monkeypatch: pytest.MonkeyPatch, local_kinesis: LocalKinesis
) -> None:
    monkeypatch.setattr(_kinesis, "free_port", lambda: local_kinesis.plain_port)
    second = LocalKinesis(start_timeout=20)
    with pytest.raises(LocalKinesisError, match="exited at start"):
        second.start()
    assert not second.running
    assert local_kinesis.running


def test_the_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """No orphan server even when the process that started it is SIGKILLed (no cleanup runs)."""
    server_dies_with_a_killed_parent(tmp_path, "LocalKinesis")


@pytest.mark.anyio
async def test_async_context_manager(anyio_backend: str) -> None:
    async with LocalKinesis(streams={"ready-made": 3}) as server, server.client() as kinesis:
        assert (await kinesis.call("ListStreams", {}))["StreamNames"] == ["ready-made"]
        summary = await kinesis.wait_for_stream("ready-made")
        assert summary["OpenShardCount"] == 3
    assert not server.running


@pytest.mark.anyio
@pytest.mark.parametrize("server_class", [LocalKinesis, LocalDynamoDB])
async def test_async_with_forks_the_server_from_the_event_loop_s_thread(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch, server_class: type[LocalKinesis]
) -> None:
    """The parent-death signal follows the thread that forks: a server forked from one of
    anyio's worker threads was SIGKILLed when that thread retired after 10 idle seconds."""
    forked_on: list[int] = []
    popen = subprocess.Popen

    def recording(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        forked_on.append(threading.get_ident())
        return popen(*args, **kwargs)

    monkeypatch.setattr(_process.subprocess, "Popen", recording)
    async with server_class() as server:
        assert server.running
    assert forked_on == [threading.get_ident()]
