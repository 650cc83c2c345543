"""The embedded local Kinesis server (kinesis-mock, npm package ``kinesis-local``).

Used by the demo and the test suite. It serves plain HTTP on one port and HTTPS with HTTP/2
(self-signed certificate: use ``verify=False``) on another, both on loopback ports chosen
free at start. The server process is tied to this one: it is stopped on exit, and on Linux the
kernel kills it if this process dies first, so no run leaves an orphan server behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import anyio

from .client import ClientConfig, KinesisClient
from .errors import ConfigError, KinesisError

__all__ = ["INSTALL_COMMAND", "KINESIS_LOCAL_VERSION", "LocalKinesis", "LocalKinesisError"]

KINESIS_LOCAL_VERSION = "0.6.2"
INSTALL_COMMAND = f"npm install --prefix .tools kinesis-local@{KINESIS_LOCAL_VERSION}"
_PACKAGE = Path("node_modules") / "kinesis-local"
#: Credentials the local server accepts (it checks that a signature is present, not its value).
LOCAL_CREDENTIALS = ("local", "local")


class LocalKinesisError(KinesisError):
    """The local server is missing, or did not start."""


def find_server_dir() -> Path:
    """The folder holding the server's ``main.js`` and ``server.json``.

    Looked up in ``$KINESIS_LOCAL_DIR``, then ``.tools/`` in the working directory and its
    parents, then ``.tools/`` beside this package's source checkout.
    """
    override = os.environ.get("KINESIS_LOCAL_DIR")
    candidates: list[Path] = []
    if override:
        candidates.append(Path(override))
    else:
        for base in (Path.cwd(), Path(__file__).resolve().parent):
            candidates.extend(parent / ".tools" / _PACKAGE for parent in (base, *base.parents))
    for candidate in candidates:
        if (candidate / "main.js").is_file() and (candidate / "server.json").is_file():
            return candidate
    raise LocalKinesisError(
        "the local Kinesis server (npm package kinesis-local) is not installed; run "
        f"`make setup` or `{INSTALL_COMMAND}` in the project folder, or set KINESIS_LOCAL_DIR "
        "to the folder holding its main.js"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _answers(port: int) -> bool:
    """Whether the server answers HTTP on ``port`` (any status: unsigned calls get 400)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        connection.request(
            "POST",
            "/",
            body=b"{}",
            headers={
                "X-Amz-Target": "Kinesis_20131202.ListStreams",
                "Content-Type": "application/x-amz-json-1.1",
            },
        )
        return connection.getresponse().status > 0
    except OSError:
        return False
    finally:
        connection.close()


class LocalKinesis:
    """Runs the local Kinesis server for the lifetime of a ``with`` (or ``async with``) block.

    ``operation_duration`` is how long simulated asynchronous operations take (stream
    creation, resharding, consumer registration): short by default so tests do not wait.
    ``streams`` maps stream names to shard counts created at start.
    """

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
        if start_timeout <= 0:
            raise ConfigError(f"start_timeout must be > 0 seconds, got {start_timeout!r}")
        self.region = region
        self.operation_duration = operation_duration
        self.streams = dict(streams or {})
        self.start_timeout = start_timeout
        self.shard_limit = shard_limit
        self.credentials = LOCAL_CREDENTIALS
        self.plain_port = 0
        self.tls_port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._exit_code: int | None = None

    @property
    def endpoint_url(self) -> str:
        """Plain HTTP (HTTP/1.1) endpoint."""
        return f"http://127.0.0.1:{self.plain_port}"

    @property
    def tls_endpoint_url(self) -> str:
        """HTTPS endpoint speaking HTTP/2; its certificate is self-signed (``verify=False``)."""
        return f"https://127.0.0.1:{self.tls_port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server and return once it answers; raises LocalKinesisError otherwise."""
        if self._process is not None:
            raise RuntimeError("LocalKinesis is already started")
        server_dir = find_server_dir()
        node = shutil.which("node")
        if node is None:
            raise LocalKinesisError(
                "Node.js (`node`) is not on PATH; the local Kinesis server needs Node.js 18+"
            )
        self.plain_port, self.tls_port = _free_port(), _free_port()
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
        # Closed in stop(): the log lives as long as the server does.
        self._log = tempfile.TemporaryFile(prefix="kinesis-local-")  # noqa: SIM115
        self._process = subprocess.Popen(
            [node, "main.js"],
            cwd=server_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, async-signal-safe enough
        )
        deadline = time.monotonic() + self.start_timeout
        while not _answers(self.plain_port):
            if self._process.poll() is not None:
                output = self._output()
                self.stop()
                raise LocalKinesisError(
                    f"the local Kinesis server exited at start (code {self._exit_code}):\n{output}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise LocalKinesisError(
                    f"the local Kinesis server did not answer within {self.start_timeout} s"
                )
            time.sleep(0.05)  # sync on purpose: __aenter__ runs start() in a worker thread

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-4000:].decode("utf-8", "replace")

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); idempotent.

        The server keeps nothing worth a long grace period (its data lives in memory), and
        with HTTP/2 subscriptions recently closed it was seen to sit out a 10 s SIGTERM wait.
        """
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            self._exit_code = process.returncode
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)

    def client(self, *, tls: bool = True, config: ClientConfig | None = None) -> KinesisClient:
        """A :class:`KinesisClient` for this server: HTTP/2 over TLS, or plain HTTP/1.1."""
        return KinesisClient(
            region=self.region,
            endpoint_url=self.tls_endpoint_url if tls else self.endpoint_url,
            verify=False,
            credentials=self.credentials,
            config=config,
        )
