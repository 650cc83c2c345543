"""The local servers' processes: started on free loopback ports, waited for until they
answer, stopped with their whole process group, and killed by the kernel if their parent dies
first (Linux). :class:`LocalServer` is the machinery; :mod:`._kinesis` and :mod:`._dynamodb`
say how to find, run and probe each server.
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

from ..errors import ConfigError, KinesisError

__all__ = [
    "LOCAL_CREDENTIALS",
    "LocalDynamoDBError",
    "LocalKinesisError",
    "LocalServer",
    "find_tools",
    "free_port",
]

#: Credentials the local server accepts (it checks that a signature is present, not its value).
LOCAL_CREDENTIALS = ("local", "local")


class LocalKinesisError(KinesisError):
    """The local server is missing, or did not start."""


class LocalDynamoDBError(LocalKinesisError):
    """The local DynamoDB server is missing, or did not start."""


def find_tools(package: Path, files: tuple[str, ...], override: str | None) -> Path | None:
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


#: Starts on fresh ports after a server found its port taken at start, before giving up.
START_ATTEMPTS = 3


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
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


class LocalServer:
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
        for attempt in range(START_ATTEMPTS):
            self._spawn()
            if self._wait_until_answering(last=attempt == START_ATTEMPTS - 1):
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
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl, async-signal-safe enough
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
        for attempt in range(START_ATTEMPTS):
            self._spawn()
            last = attempt == START_ATTEMPTS - 1
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
