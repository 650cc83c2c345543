"""The embedded local servers: Kinesis (kinesis-mock, npm package ``kinesis-local``) and
DynamoDB (npm package ``dynalite``, for lease tables).

Used by the demo and the test suite. :class:`LocalKinesis` serves plain HTTP on one port and
HTTPS with HTTP/2 (self-signed certificate: use ``verify=False``) on another;
:class:`LocalDynamoDB` serves plain HTTP, in memory. All ports are loopback ports chosen free
at start. Each server process is tied to this one: it runs in a process group of its own,
stopped (the whole group) on exit, and on Linux the kernel kills it if the thread that
started it (the event loop's, for ``async with``) dies first, so no run leaves an orphan
server behind.
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
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, Self

import anyio

from .client import ClientConfig, DynamoDBClient, KinesisClient
from .errors import ConfigError, KinesisError

__all__ = [
    "DYNALITE_INSTALL_COMMAND",
    "DYNALITE_VERSION",
    "INSTALL_COMMAND",
    "KINESIS_LOCAL_VERSION",
    "LocalDynamoDB",
    "LocalDynamoDBError",
    "LocalKinesis",
    "LocalKinesisError",
    "find_dynalite_dir",
    "find_server_dir",
]

KINESIS_LOCAL_VERSION = "0.6.2"
INSTALL_COMMAND = f"npm install --prefix .tools kinesis-local@{KINESIS_LOCAL_VERSION}"
_PACKAGE = Path("node_modules") / "kinesis-local"
DYNALITE_VERSION = "4.0.0"
DYNALITE_INSTALL_COMMAND = f"npm install --prefix .tools dynalite@{DYNALITE_VERSION}"
_DYNALITE = Path("node_modules") / "dynalite"
#: Credentials the local server accepts (it checks that a signature is present, not its value).
LOCAL_CREDENTIALS = ("local", "local")


class LocalKinesisError(KinesisError):
    """The local server is missing, or did not start."""


class LocalDynamoDBError(LocalKinesisError):
    """The local DynamoDB server is missing, or did not start."""


def _find_tools(package: Path, files: tuple[str, ...], override: str | None) -> Path | None:
    """The first folder holding ``files``: ``override`` if set, else ``.tools/<package>`` in
    the working directory and its parents, then beside this package's source checkout."""
    candidates: list[Path] = []
    if override:
        candidates.append(Path(override))
    else:
        for base in (Path.cwd(), Path(__file__).resolve().parent):
            candidates.extend(parent / ".tools" / package for parent in (base, *base.parents))
    for candidate in candidates:
        if all((candidate / name).is_file() for name in files):
            return candidate
    return None


def find_server_dir() -> Path:
    """The folder holding the server's ``main.js`` and ``server.json``.

    Looked up in ``$KINESIS_LOCAL_DIR``, then ``.tools/`` in the working directory and its
    parents, then ``.tools/`` beside this package's source checkout.
    """
    found = _find_tools(_PACKAGE, ("main.js", "server.json"), os.environ.get("KINESIS_LOCAL_DIR"))
    if found is None:
        raise LocalKinesisError(
            "the local Kinesis server (npm package kinesis-local) is not installed; run "
            f"`make setup` or `{INSTALL_COMMAND}` in the project folder, or set "
            "KINESIS_LOCAL_DIR to the folder holding its main.js"
        )
    return found


def find_dynalite_dir() -> Path:
    """The folder holding dynalite's ``cli.js``: ``$DYNALITE_DIR``, else looked up like
    :func:`find_server_dir`."""
    found = _find_tools(_DYNALITE, ("cli.js", "package.json"), os.environ.get("DYNALITE_DIR"))
    if found is None:
        raise LocalDynamoDBError(
            "the local DynamoDB server (npm package dynalite) is not installed; run "
            f"`make setup` or `{DYNALITE_INSTALL_COMMAND}` in the project folder, or set "
            "DYNALITE_DIR to the folder holding its cli.js"
        )
    return found


#: Starts on fresh ports after a server found its port taken at start, before giving up.
_START_ATTEMPTS = 3


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _answers(port: int, target: str, content_type: str) -> bool:
    """Whether a server answers HTTP on ``port`` (any status: unsigned calls get 400)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        connection.request(
            "POST",
            "/",
            body=b"{}",
            headers={"X-Amz-Target": target, "Content-Type": content_type},
        )
        return connection.getresponse().status > 0
    except OSError:
        return False
    finally:
        connection.close()


def _holds_listener(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds the socket listening on TCP ``port``; ``None`` where
    ``/proc`` cannot tell (not Linux)."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "ADDR:PORT" in hex, state 0A is LISTEN, then the socket's inode
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{fields[9]}]")
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                return True
    return False


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class _LocalServer:
    """A Node.js server process owned by this one: started on free ports, waited for until
    it answers, stopped with its whole process group, killed by the kernel if we die first.
    Subclasses say how to find, run and probe their server."""

    _NAME: ClassVar[str] = "local server"
    _ERROR: ClassVar[type[LocalKinesisError]] = LocalKinesisError

    def __init__(self, *, region: str, start_timeout: float) -> None:
        if start_timeout <= 0:
            raise ConfigError(f"start_timeout must be > 0 seconds, got {start_timeout!r}")
        self.region = region
        self.start_timeout = start_timeout
        self.credentials = LOCAL_CREDENTIALS
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._exit_code: int | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _command(self, node: str) -> tuple[list[str], Path, dict[str, str]]:
        """The command line, working folder and environment; chooses the ports."""
        raise NotImplementedError

    def _answering(self) -> bool:
        raise NotImplementedError

    def _answers_here(self, port: int, target: str, content_type: str) -> bool:
        """Whether our server answers on ``port``. A server of another process that took the
        same free port in the meantime (two test workers start theirs at once) answers too,
        while ours is failing to bind: the listening socket must be our process's own."""
        process = self._process
        if process is None or not _answers(port, target, content_type):
            return False
        return _holds_listener(process.pid, port) is not False

    def start(self) -> None:
        """Start the server and return once it answers; raises the server's error otherwise.

        The server dies with the *thread* that starts it (Linux's parent-death signal follows
        the forking thread, not the process): start it from a thread that outlives it, as a
        ``with`` block does. ``async with`` forks from the event loop's thread.
        """
        for attempt in range(_START_ATTEMPTS):
            self._spawn()
            if self._wait_until_answering(last=attempt == _START_ATTEMPTS - 1):
                return

    def _spawn(self) -> None:
        """Fork the server (quick: no waiting)."""
        if self._process is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
        node = shutil.which("node")
        command, folder, env = self._command(node or "node")
        if node is None:
            raise self._ERROR(
                f"Node.js (`node`) is not on PATH; the {self._NAME} needs Node.js 20+"
            )
        # Closed in stop(): the log lives as long as the server does.
        self._log = tempfile.TemporaryFile(prefix="kinesis-actors-local-")  # noqa: SIM115
        self._process = subprocess.Popen(
            command,
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            process_group=0,  # stop() signals the group: no child of the server survives it
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, async-signal-safe enough
        )

    def _wait_until_answering(self, *, last: bool = True) -> bool:
        """Block until the spawned server answers (True); stop it and raise if it cannot.

        A free port is free only when it is chosen: another process (two test workers
        starting servers at once) can bind it before the server does, which then exits at
        start. Unless this is the ``last`` attempt, that returns False, stopped, for a new
        attempt on new ports."""
        process = self._process
        if process is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        deadline = time.monotonic() + self.start_timeout
        while not self._answering():
            if process.poll() is not None:
                output = self._output()
                self.stop()
                if "EADDRINUSE" in output and not last:
                    return False
                raise self._ERROR(
                    f"the {self._NAME} exited at start (code {self._exit_code}):\n{output}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise self._ERROR(f"the {self._NAME} did not answer within {self.start_timeout} s")
            time.sleep(0.05)  # sync on purpose: __aenter__ runs this in a worker thread
        return True

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-4000:].decode("utf-8", "replace")

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the server's process group (SIGTERM, then SIGKILL after ``timeout``);
        idempotent.

        The servers keep nothing worth a long grace period (their data lives in memory), and
        with HTTP/2 subscriptions recently closed kinesis-local was seen to sit out a 10 s
        SIGTERM wait.
        """
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(process.pid, signal.SIGKILL)
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
        # Forked here, on the event loop's thread: the parent-death signal follows the thread
        # that forks, and anyio retires an idle worker thread after 10 s, which killed a
        # server started from one (seen as SIGKILL mid-benchmark). Only the wait is threaded.
        for attempt in range(_START_ATTEMPTS):
            self._spawn()
            last = attempt == _START_ATTEMPTS - 1
            try:
                if await anyio.to_thread.run_sync(partial(self._wait_until_answering, last=last)):
                    break
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.stop)
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)


class LocalKinesis(_LocalServer):
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


# dynalite 4.0.0 throws from a request's "error" handler, so a client that goes away in the
# middle of a request (a cancelled call, a killed worker: what lease tests do on purpose)
# kills the whole server. This runs its cli.js with that one error logged and survived;
# any other uncaught error still ends the server, with its trace in the log.
_DYNALITE_GUARD = """
process.on("uncaughtException", (err) => {
  if (err && err.code === "ECONNRESET") {
    console.error("a client went away mid-request (survived): " + err.message);
    return;
  }
  console.error(err);
  process.exit(70);
});
process.argv.splice(1, 0, "cli.js");
require(require("path").resolve("cli.js"));
"""


class LocalDynamoDB(_LocalServer):
    """Runs a local DynamoDB (dynalite, in memory) for the lifetime of a ``with`` (or
    ``async with``) block, on a free loopback port: ``endpoint_url`` is plain HTTP.

    ``table_delay`` is how long a table stays CREATING, DELETING or UPDATING (dynalite's
    default is half a second; zero here so tests do not wait). Any credentials are accepted
    (a signature must be present, its value is not checked). It implements the item and
    table operations a lease table needs (conditional writes included), not
    ``ReturnValuesOnConditionCheckFailure``'s item, streams, TTL or transactions.
    """

    _NAME = "local DynamoDB server"
    _ERROR = LocalDynamoDBError

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        table_delay: float = 0.0,
        start_timeout: float = 60.0,
    ) -> None:
        if table_delay < 0:
            raise ConfigError(f"table_delay must be >= 0 seconds, got {table_delay!r}")
        super().__init__(region=region, start_timeout=start_timeout)
        self.table_delay = table_delay
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        """Plain HTTP (HTTP/1.1) endpoint."""
        return f"http://127.0.0.1:{self.port}"

    def _command(self, node: str) -> tuple[list[str], Path, dict[str, str]]:
        server_dir = find_dynalite_dir()
        self.port = _free_port()
        delay = str(round(self.table_delay * 1000))
        command = [
            node,
            "-e",
            _DYNALITE_GUARD,
            "--",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        for flag in ("--createTableMs", "--deleteTableMs", "--updateTableMs"):
            command += [flag, delay]
        return command, server_dir, dict(os.environ)

    def _answering(self) -> bool:
        return self._answers_here(
            self.port, "DynamoDB_20120810.ListTables", "application/x-amz-json-1.0"
        )

    def client(self, *, config: ClientConfig | None = None) -> DynamoDBClient:
        """A :class:`~kinesis_actors.client.DynamoDBClient` for this server."""
        return DynamoDBClient(
            region=self.region,
            endpoint_url=self.endpoint_url,
            verify=False,
            credentials=self.credentials,
            config=config,
        )
