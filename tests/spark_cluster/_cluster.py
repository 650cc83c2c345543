"""A Spark standalone cluster on this one machine: a master and two workers, child processes.

Each worker has its own host name, a loopback alias (127.0.0.2, 127.0.0.3: every 127.x address
reaches ``lo`` on Linux), and one core, so the tasks of a stage run on two hosts and Spark may
launch a speculative copy of a task on the host that does not run it (it never puts one on the
host of a running attempt, so ``local`` and ``local-cluster`` never speculate). The JVMs are
pyspark's own classes run by ``bin/spark-class``. Readiness is an event: the master's "elected
leader" line, each worker's "registered with master" line. Every process runs in its own group,
dies with the test process and is killed, with all its descendants, at ``stop()`` (the approach
of tests/spark_connect/_server.py, whose process helpers this reuses).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import pyspark

from tests.spark_connect._server import (
    _alive_descendants,
    _die_with_parent,
    _free_port,
    _is_alive,
)

SPARK_HOME = Path(pyspark.__file__).parent
WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")


class ClusterError(RuntimeError):
    pass


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(SPARK_HOME=str(SPARK_HOME), **extra)
    return env


class Child:
    """One child process in its own group; its output goes to ``log_path``.

    ``ready_line``: ``start()`` returns once a line holding it was written (None: at once)."""

    def __init__(
        self, command: list[str], env: dict[str, str], log_path: Path, ready_line: str | None
    ) -> None:
        self.command = command
        self.env = env
        self.log_path = log_path
        self.ready_line = ready_line
        self.process: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._ended = threading.Event()

    def start(self, timeout: float = 90.0) -> None:
        """Call it from a thread that outlives the child: the child dies with the thread that
        started it (``PR_SET_PDEATHSIG`` follows the thread, not the process)."""
        self.launch()
        self.await_ready(timeout)

    def launch(self) -> None:
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command,
            cwd=self.log_path.parent,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl
        )
        assert self.process.stdout is not None
        threading.Thread(target=self._copy, args=(self.process.stdout, log), daemon=True).start()

    def await_ready(self, timeout: float) -> None:
        if self.ready_line is None:
            return
        if not self._ready.wait(timeout) or self.process is None or self.process.poll() is not None:
            raise ClusterError(f"{self.command[-1]} did not start:\n{self.output()[-4000:]}")

    def _copy(self, source: IO[bytes], log: IO[bytes]) -> None:
        with log:
            for line in source:
                log.write(line)
                log.flush()
                if self.ready_line is not None and self.ready_line.encode() in line:
                    self._ready.set()
        self._ready.set()
        self._ended.set()

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def output(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    def stop(self, grace: float = 10.0) -> set[int]:
        """Kills the group and every descendant; the pids still alive after 10 s."""
        process, self.process = self.process, None
        if process is None:
            return set()
        descendants = _alive_descendants(process.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid, started in descendants.items():
            if _is_alive(pid, started):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (left := {p for p, at in descendants.items() if _is_alive(p, at)}) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)  # processes owned by init now: no event to await their end
        return left


class StandaloneCluster:
    """``with StandaloneCluster(workdir) as cluster:`` then ``cluster.master_url``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.children: list[Child] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spark_class(self, name: str, *args: str) -> list[str]:
        return [str(SPARK_HOME / "bin" / "spark-class"), name, *args]

    def start(self) -> None:
        master = Child(
            self._spark_class(
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(self.port)),
                *("--webui-port", str(_free_port())),
            ),
            clean_env(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_HOSTNAME="127.0.0.1"),
            self.workdir / "master.log",
            "I have been elected leader",
        )
        self.children.append(master)
        master.start()
        # The port the master bound: Spark moves to the next one if another process took the
        # one picked free (another test worker, in between), and the workers must follow it.
        bound = re.search(
            r"Starting Spark master at spark://[^:]+:(\d+)",
            master.log_path.read_text("utf-8", "replace"),
        )
        if bound is None:
            raise ClusterError(f"the master did not say its port: {master.log_path}")
        self.port = int(bound.group(1))
        workers = []
        for host in WORKER_HOSTS:
            work = self.workdir / f"worker-{host}"
            work.mkdir()
            worker = Child(
                self._spark_class(
                    "org.apache.spark.deploy.worker.Worker",
                    *("--host", host, "--port", str(_free_port())),
                    *("--webui-port", str(_free_port())),
                    *("--cores", "1", "--memory", "1g", "--work-dir", str(work)),
                    self.master_url,
                ),
                clean_env(SPARK_LOCAL_IP=host, SPARK_LOCAL_HOSTNAME=host),
                work / "worker.log",
                "Successfully registered with master",
            )
            self.children.append(worker)
            workers.append(worker)
            worker.launch()  # both start at once, from this thread (see Child.start)
        for worker in workers:
            worker.await_ready(90)

    def stop(self) -> None:
        left: set[int] = set()
        for child in reversed(self.children):
            left |= child.stop()
        self.children.clear()
        if left:
            raise ClusterError(f"processes of the cluster outlived it: {left}")

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
