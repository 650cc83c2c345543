"""The Spark Connect server bundled with pyspark, as a child process the tests own.

It is pyspark's own ``SparkConnectServer`` class (``jars/spark-connect_2.13-*.jar``, already on
the classpath of a pip-installed pyspark) run by ``bin/spark-submit`` in the foreground, which is
what ``sbin/start-connect-server.sh --wait`` does without the daemon wrapper and its pid files.
Local mode, every port on loopback, no UI. Readiness is an event: the server's own "started at"
line, read from its output as it is written, then one connection to its gRPC port.

Stopping leaves no process behind: the JVM runs in its own process group and dies with the test
process (``PR_SET_PDEATHSIG``); ``stop()`` sends SIGTERM to the group (Spark stops its Python
daemons, which set up process groups of their own), then SIGKILL to the group and to every
descendant found when it was asked to stop, and waits until none is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import pyspark

READY_LINE = "Spark Connect server started at"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """State, parent and start time (clock ticks after boot) of ``pid``, or None if gone.

    The start time tells a process from a later one that reused its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[19])


def _alive_descendants(root: int) -> dict[int, int]:
    """Every living (not zombie) descendant of ``root`` with its start time, from ``/proc``."""
    processes: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) and stat[0] != "Z":
            processes[int(entry.name)] = (stat[1], stat[2])
    found: dict[int, int] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in processes.items() if ppid in frontier} - set(found)
        found.update((pid, processes[pid][1]) for pid in frontier)
    return found


def _is_alive(pid: int, started: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and stat[2] == started


class ConnectServerError(RuntimeError):
    pass


class ConnectServer:
    """``with ConnectServer(workdir) as server:`` then ``server.url`` (``sc://127.0.0.1:PORT``)."""

    def __init__(
        self, workdir: Path, *, hide: Path | None = None, start_timeout: float = 120.0
    ) -> None:
        """``hide``: a folder taken out of the server's Python path (its workers'), so that a
        checkout installed in development mode is not importable there: a server whose Python
        has the dependencies but not kinesis_actors and spark_bridge themselves."""
        self.workdir = workdir
        self.hide = hide
        self.start_timeout = start_timeout
        self.port = 0
        self.log_path = workdir / "connect-server.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        spark_home = Path(pyspark.__file__).parent
        self.port = _free_port()
        confs = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            # If another process took that port before the server bound it, the next one
            # (start reads the port from the started line); by default it would fail.
            "spark.connect.grpc.port.maxRetries": "16",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
            "spark.local.dir": str(self.workdir / "local"),
            "spark.python.worker.reuse": "true",
            # A Python worker connects back to the JVM within this (15 s by default): under
            # load on 2 cores one did not.
            "spark.python.authenticate.socketTimeout": "120s",
        }
        command = [
            str(spark_home / "bin" / "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name",
            "kinesis-actors-connect-tests",
            "--master",
            "local[2]",
            "--driver-memory",
            "1g",
        ]
        for key, value in confs.items():
            command += ["--conf", f"{key}={value}"]
        return command

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeError("the Connect server is already started")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
        env.update(
            SPARK_HOME=str(Path(pyspark.__file__).parent),
            # The server's Python workers run this interpreter, where kinesis_actors and
            # spark_bridge are installed: that is what the server side needs (docs/spark.md).
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
        )
        if self.hide is not None:
            # Python imports sitecustomize from its path at start, after the .pth files that
            # put a development checkout on it: here it takes the checkout off again.
            site = self.workdir / "pythonpath"
            site.mkdir(exist_ok=True)
            (site / "sitecustomize.py").write_text(
                "import os, sys\n"
                f"hidden = {str(self.hide.resolve())!r}\n"
                "sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != hidden]\n"
            )
            env["PYTHONPATH"] = str(site)
        command = self.command()
        log = self.log_path.open("wb")
        self._process = subprocess.Popen(
            command,
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed as one at stop
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl
        )
        assert self._process.stdout is not None
        threading.Thread(
            target=self._copy_output, args=(self._process.stdout, log), daemon=True
        ).start()
        ready = self._ready.wait(self.start_timeout)
        if not ready or self._process.poll() is not None:
            tail = self.output()[-4000:]
            self.stop()
            raise ConnectServerError(f"the Spark Connect server did not start:\n{tail}")
        # The port it bound, from its started line: Spark moves to the next port if another
        # process (the other test worker) took the one picked free before the server bound it.
        bound = re.search(re.escape(READY_LINE) + r":? *[^\s:]+:(\d+)", self.output())
        if bound is None:
            tail = self.output()[-4000:]
            self.stop()
            raise ConnectServerError(f"the Spark Connect server did not say its port:\n{tail}")
        self.port = int(bound.group(1))
        with socket.create_connection(("127.0.0.1", self.port), timeout=5):
            pass  # the gRPC port answers

    def _copy_output(self, source: IO[bytes], log: IO[bytes]) -> None:
        """Copies the server's output to its log (Spark logs go on all run long, so the pipe
        must be drained) and sets ``_ready`` at the started line, or when the output ends."""
        with log:
            for line in source:
                log.write(line)
                log.flush()
                if not self._ready.is_set() and READY_LINE.encode() in line:
                    self._ready.set()
        self._ready.set()  # exited: wake the waiter, which sees it died

    def output(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    def stop(self, grace: float = 20.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        descendants = _alive_descendants(process.pid)  # the Python daemons left its group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid, started in descendants.items():
            if _is_alive(pid, started):  # never a later process that got the same pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (left := {pid for pid, at in descendants.items() if _is_alive(pid, at)}) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)  # processes owned by init now: no event to await their end
        if left:
            raise ConnectServerError(f"processes of the Connect server outlived it: {left}")

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
