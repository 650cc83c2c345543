"""The local Kinesis server: kinesis-mock (npm package ``kinesis-local``), plain HTTP on one
port and HTTPS with HTTP/2 on another (self-signed: ``verify=False``)."""

from __future__ import annotations

import os
from pathlib import Path

from ..client import ClientConfig, KinesisClient
from ..errors import ConfigError
from ._process import LocalKinesisError, LocalServer, find_tools, free_port

__all__ = ["INSTALL_COMMAND", "KINESIS_LOCAL_VERSION", "LocalKinesis", "find_server_dir"]

KINESIS_LOCAL_VERSION = "0.6.2"
INSTALL_COMMAND = f"npm install --prefix .tools kinesis-local@{KINESIS_LOCAL_VERSION}"
_PACKAGE = Path("node_modules") / "kinesis-local"


def find_server_dir() -> Path:
    """The folder holding the server's ``main.js`` and ``server.json``.

    Looked up in ``$KINESIS_LOCAL_DIR``, then ``.tools/`` in the working directory and its
    parents, then ``.tools/`` beside this package's source checkout.
    """
    found = find_tools(_PACKAGE, ("main.js", "server.json"), os.environ.get("KINESIS_LOCAL_DIR"))
    if found is None:
        raise LocalKinesisError(
            "the local Kinesis server (npm package kinesis-local) is not installed; run "
            f"`make setup` or `{INSTALL_COMMAND}` in the project folder, or set "
            "KINESIS_LOCAL_DIR to the folder holding its main.js"
        )
    return found


class LocalKinesis(LocalServer):
    """Runs the local Kinesis server for the lifetime of a ``with`` (or ``async with``) block.

    ``operation_duration`` is how long simulated asynchronous operations take (stream
    creation, resharding, consumer registration): short by default so tests do not wait.
    ``streams`` maps stream names to shard counts created at start.
    """

    _NAME = "local Kinesis server"
    _ERROR = LocalKinesisError

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        operation_duration: float = 0.05,
        streams: dict[str, int] | None = None,
        start_timeout: float = 60.0,
        shard_limit: int = 1000,
    ) -> None:
        if operation_duration < 0:
            raise ConfigError(
                f"operation_duration must be >= 0 seconds, got {operation_duration!r}"
            )
        super().__init__(region=region, start_timeout=start_timeout)
        self.operation_duration = operation_duration
        self.streams = dict(streams or {})
        self.shard_limit = shard_limit
        self.plain_port = 0
        self.tls_port = 0

    @property
    def endpoint_url(self) -> str:
        """Plain HTTP (HTTP/1.1) endpoint."""
        return f"http://127.0.0.1:{self.plain_port}"

    @property
    def tls_endpoint_url(self) -> str:
        """HTTPS endpoint speaking HTTP/2; its certificate is self-signed (``verify=False``)."""
        return f"https://127.0.0.1:{self.tls_port}"

    def _command(self, node: str) -> tuple[list[str], Path, dict[str, str]]:
        server_dir = find_server_dir()
        self.plain_port, self.tls_port = free_port(), free_port()
        duration = f"{round(self.operation_duration * 1000)}ms"
        env = dict(os.environ)
        env.update(
            KINESIS_MOCK_PLAIN_PORT=str(self.plain_port),
            KINESIS_MOCK_TLS_PORT=str(self.tls_port),
            LOG_LEVEL="ERROR",
            AWS_REGION=self.region,
            SHARD_LIMIT=str(self.shard_limit),
            SHOULD_PERSIST_DATA="false",
        )
        for name in (
            "CREATE_STREAM",
            "DELETE_STREAM",
            "REGISTER_STREAM_CONSUMER",
            "DEREGISTER_STREAM_CONSUMER",
            "SPLIT_SHARD",
            "MERGE_SHARDS",
            "UPDATE_SHARD_COUNT",
            "UPDATE_STREAM_MODE",
            "START_STREAM_ENCRYPTION",
            "STOP_STREAM_ENCRYPTION",
        ):
            env[f"{name}_DURATION"] = duration
        if self.streams:
            env["INITIALIZE_STREAMS"] = ",".join(f"{n}:{c}" for n, c in self.streams.items())
        return [node, "main.js"], server_dir, env

    def _answering(self) -> bool:
        return self._answers_here(
            self.plain_port, "Kinesis_20131202.ListStreams", "application/x-amz-json-1.1"
        )

    def client(self, *, tls: bool = True, config: ClientConfig | None = None) -> KinesisClient:
        """A :class:`KinesisClient` for this server: HTTP/2 over TLS, or plain HTTP/1.1."""
        return KinesisClient(
            region=self.region,
            endpoint_url=self.tls_endpoint_url if tls else self.endpoint_url,
            verify=False,
            credentials=self.credentials,
            config=config,
        )
