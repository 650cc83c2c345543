"""What the Spark benchmarks share: their Spark session, and the CPU of the run's processes.

``spark_session`` is the active session or a new ``local[2]`` one tuned for a small machine;
:class:`ProcessCpu` samples ``/proc`` for every process of the run (the driver, the JVM,
the Python workers), by role, so that a figure says whose CPU it is.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from typing import Any

__all__ = ["ProcessCpu", "spark_session"]

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def spark_session() -> tuple[Any, bool]:
    """The active Spark session, or a new ``local[2]`` one (then ``True``: stop it after)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415 - after PYSPARK_PYTHON is set

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    warehouse = tempfile.mkdtemp(prefix="spark-bench-warehouse-")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kinesis-actors-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        # A Python worker connects back to the JVM within this (15 s by default): on a busy
        # 2-core machine one did not, and the run failed.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session, True


# -- CPU of the run's processes, from /proc ------------------------------------------------------


def _stat(pid: int) -> tuple[int, float] | None:
    """``(parent pid, user + system CPU seconds)`` of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "exited_unknown"
    if "python_streaming_source_runner" in cmdline:
        return "source_runner"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python_workers"
    if "java" in cmdline.split(" ", 1)[0] or "org.apache.spark" in cmdline:
        return "jvm"
    if "node" in cmdline.split(" ", 1)[0]:
        return "kinesis_server"
    return "other"


#: Roles a process may be seen with before it has exec'd its own program (and None: unseen).
_PROVISIONAL = frozenset({None, "jvm", "other"})
#: How long after first sight such a role is looked at again: a fork's exec follows within
#: milliseconds, and the JVM's own command line (its class path) is long to read each time.
_EXEC_WINDOW = 5.0


class ProcessCpu:
    """CPU seconds per role of this process's descendants between ``start`` and ``stop``.

    ``/proc`` is scanned every ``interval`` seconds so that processes which end during the
    window (the query's source runner) still count with the last CPU seen. Processes alive
    at ``start`` count from then; later ones from zero (their start-up is part of the cost).
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._root = os.getpid()
        self._base: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._roles: dict[int, str] = {}
        self._seen_at: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._self_cpu = 0.0

    def _descendants(self) -> dict[int, float]:
        parents: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            found = _stat(int(name))
            if found is not None:
                parents[int(name)], cpu[int(name)] = found
        tree: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            tree.setdefault(parent, []).append(pid)
        out: dict[int, float] = {}
        todo = list(tree.get(self._root, []))
        while todo:
            pid = todo.pop()
            out[pid] = cpu[pid]
            todo.extend(tree.get(pid, []))
        return out

    def _sample(self) -> None:
        for pid, seconds in self._descendants().items():
            if pid not in self._roles:
                self._base.setdefault(pid, 0.0)
                self._seen_at[pid] = time.monotonic()
            if self._roles.get(pid) in _PROVISIONAL and (
                time.monotonic() - self._seen_at.get(pid, 0.0) < _EXEC_WINDOW
            ):
                # A child seen between its fork and its exec still shows its parent's
                # command line (the JVM's, for the query's source runner): look again.
                self._roles[pid] = _role(pid)
            self._last[pid] = seconds

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        self._base = dict(self._descendants())
        self._last = dict(self._base)
        self._roles = {pid: _role(pid) for pid in self._base}
        self._self_cpu = time.process_time()
        self._thread = threading.Thread(target=self._run, name="proc-cpu", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        roles: dict[str, float] = {"this_process": time.process_time() - self._self_cpu}
        for pid, seconds in self._last.items():
            role = self._roles[pid]
            roles[role] = roles.get(role, 0.0) + max(0.0, seconds - self._base.get(pid, 0.0))
        return {role: round(seconds, 3) for role, seconds in roles.items()}
