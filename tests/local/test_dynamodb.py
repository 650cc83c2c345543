"""LocalDynamoDB: starts, answers, keeps its promises on conditional writes, stops, and never
outlives the process that started it."""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

import pytest

from kinesis_actors import LocalDynamoDB, errors
from kinesis_actors.local import (
    DYNALITE_INSTALL_COMMAND,
    LocalDynamoDBError,
    _dynamodb,
    find_dynalite_dir,
)
from tests.local.helpers import alive, server_dies_with_a_killed_parent


def test_a_missing_install_names_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DYNALITE_DIR", str(tmp_path))
    with pytest.raises(LocalDynamoDBError, match="not installed") as caught:
        LocalDynamoDB().start()
    assert DYNALITE_INSTALL_COMMAND in str(caught.value)
    assert isinstance(caught.value, errors.KinesisError)


def test_missing_node_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    find_dynalite_dir()  # the server is installed; only Node is missing here
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LocalDynamoDBError, match=r"Node\.js"):
        LocalDynamoDB().start()


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(errors.ConfigError, match="table_delay"):
        LocalDynamoDB(table_delay=-1)
    with pytest.raises(errors.ConfigError, match="start_timeout"):
        LocalDynamoDB(start_timeout=0)


def test_starts_on_a_free_loopback_port_and_stops_its_process_group() -> None:
    server = LocalDynamoDB()
    with server:
        assert server.running
        assert server.endpoint_url == f"http://127.0.0.1:{server.port}"
        pid = server._process.pid  # type: ignore[union-attr]
        assert os.getpgid(pid) == pid  # a group of its own, signalled as one at stop
        assert alive(pid)
    assert not server.running
    assert not alive(pid)
    server.stop()  # idempotent


def test_two_servers_run_side_by_side() -> None:
    with LocalDynamoDB() as first, LocalDynamoDB() as second:
        assert first.port != second.port
        assert first.running
        assert second.running


def test_the_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """No orphan server even when the process that started it is SIGKILLed (no cleanup runs)."""
    server_dies_with_a_killed_parent(tmp_path, "LocalDynamoDB")


@pytest.mark.anyio
async def test_async_context_manager_answers_and_checks_conditions(anyio_backend: str) -> None:
    async with LocalDynamoDB() as server, server.client() as ddb:
        assert (await ddb.call("ListTables", {}))["TableNames"] == []
        await ddb.create_table(
            {
                "TableName": "leases",
                "KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": "leaseKey", "AttributeType": "S"}],
                "BillingMode": "PAY_PER_REQUEST",
            }
        )
        put = {
            "TableName": "leases",
            "Item": {"leaseKey": {"S": "shardId-000000000000"}},
            "ConditionExpression": "attribute_not_exists(leaseKey)",
        }
        await ddb.call("PutItem", put)
        with pytest.raises(errors.ConditionalCheckFailedError):
            await ddb.call("PutItem", put)
    assert not server.running


def test_a_port_taken_by_another_server_is_an_error_not_that_server(
    monkeypatch: pytest.MonkeyPatch, local_dynamodb: LocalDynamoDB
) -> None:
    """Two runs on one machine can be handed the same free port: the second server then fails
    to bind while the first one answers on it. Starting must fail, not adopt the other
    process's server (which would vanish with that process, mid-run)."""
    monkeypatch.setattr(_dynamodb, "free_port", lambda: local_dynamodb.port)
    second = LocalDynamoDB(start_timeout=20)
    with pytest.raises(LocalDynamoDBError, match="exited at start"):
        second.start()
    assert not second.running
    assert local_dynamodb.running


def test_a_port_taken_between_its_choice_and_the_servers_bind_is_retried_on_a_new_one(
    monkeypatch: pytest.MonkeyPatch, local_dynamodb: LocalDynamoDB
) -> None:
    """A free port is free only when it is chosen: a server that then finds it taken exits at
    start, and starting tries again on new ports instead of failing the run."""
    chosen: list[int] = []
    real_free_port = _dynamodb.free_port

    def first_taken() -> int:
        port = local_dynamodb.port if not chosen else real_free_port()
        chosen.append(port)
        return port

    monkeypatch.setattr(_dynamodb, "free_port", first_taken)
    with LocalDynamoDB(start_timeout=20) as second:
        assert second.running and second.port != local_dynamodb.port
    assert chosen[0] == local_dynamodb.port and len(chosen) == 2


def test_a_client_that_goes_away_mid_request_does_not_kill_the_server() -> None:
    """dynalite throws from a request's error handler: a call cancelled after its headers
    were sent (a killed lease worker does that) took the whole server down, and every lease
    test after it failed on ConnectError. The server must survive it."""
    with LocalDynamoDB() as server:
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(
                    b"POST / HTTP/1.1\r\nHost: local\r\nContent-Length: 1000\r\n"
                    b"Content-Type: application/x-amz-json-1.0\r\n"
                    b'X-Amz-Target: DynamoDB_20120810.ListTables\r\n\r\n{"Lim'
                )
                # RST instead of FIN: the server sees ECONNRESET mid-body.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline and server.running:
                time.sleep(0.05)  # the crash, when it comes, comes within milliseconds
            assert server.running, server._output()
        assert server._answering()
