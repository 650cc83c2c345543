"""Shared pieces of the benchmark suite: payloads, clocks, RSS sampling, machine facts.

Every scenario measures the same way (wall clock, this process's CPU, the load target's CPU),
so the figures of this project and of its peers are comparable row by row.
"""

from __future__ import annotations

import os
import platform
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from benchmarks.loadtarget import LoadTarget

__all__ = [
    "KEYS",
    "Clock",
    "RssSampler",
    "cpu_figures",
    "fixed",
    "load",
    "machine",
    "payloads",
    "percent",
    "rss_kib",
    "size_label",
    "text",
    "text_table",
]

VARIANTS = 16
KEYS = [f"pk-{index}" for index in range(1000)]


def load() -> list[float]:
    """The load average: figures taken while it is high are suspect."""
    return [round(x, 2) for x in os.getloadavg()]


def rss_kib() -> int:
    """This process's resident set size in KiB (0 where /proc is missing)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def payloads(size: int) -> list[bytes]:
    """A few random payloads of ``size`` bytes, the same for every peer."""
    rng = random.Random(size)
    return [rng.randbytes(size) for _ in range(VARIANTS)]


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What the figures were measured on (the table's header)."""
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }


@dataclass
class Clock:
    """Wall clock, this process's CPU and the target's CPU between ``start`` and ``stop``.

    Peers run in this process (the target in its own), so ``client_cpu`` is the peer's cost.
    """

    target: LoadTarget
    wall: float = 0.0
    cpu: float = 0.0
    target_cpu: float = 0.0

    def start(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.target_cpu = self.target.cpu_seconds()

    def stop(self) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        self.target_cpu = self.target.cpu_seconds() - self.target_cpu


def cpu_figures(records: int, record_bytes: int, clock: Clock) -> dict[str, Any]:
    """The figures every throughput row carries, from a stopped :class:`Clock`."""
    wall = clock.wall or 1e-9
    per = max(records, 1)
    return {
        "records": records,
        "seconds": clock.wall,
        "records_per_s": records / wall,
        "mb_per_s": records * record_bytes / wall / 1e6,
        "client_cpu_s": clock.cpu,
        "target_cpu_s": clock.target_cpu,
        "client_cpu_us_per_record": clock.cpu / per * 1e6,
        "target_cpu_us_per_record": clock.target_cpu / per * 1e6,
        "client_cpu_share": clock.cpu / wall,
        "target_cpu_share": clock.target_cpu / wall,
        "target_below_client_cpu": clock.target_cpu < clock.cpu,
    }


@dataclass
class RssSampler:
    """Samples this process's RSS every ``interval`` seconds on a thread of its own.

    A thread rather than a task, so a peer that blocks its loop (or has none: boto3) is
    sampled all the same. ``samples`` holds ``(seconds since start, RSS KiB)``.
    """

    interval: float = 0.25
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _started: float = 0.0

    def mark(self) -> None:
        self.samples.append((round(time.perf_counter() - self._started, 3), rss_kib()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.mark()

    def __enter__(self) -> Self:
        self._started = time.perf_counter()
        self.mark()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.mark()


# -- plain-text tables for the per-bench reports (``python benchmarks/x_bench.py``) ---------


def text_table(
    rows: list[dict[str, Any]], columns: list[tuple[str, str, Callable[[Any], str]]]
) -> str:
    """Right-aligned columns: ``(title, key, format)`` each; missing keys format ``None``."""
    header = [title for title, _, _ in columns]
    body = [[fmt(row.get(key)) for _, key, fmt in columns] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *body, strict=False)]
    lines = ["  " + "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += [
        "  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in body
    ]
    return "\n".join(lines)


def fixed(digits: int) -> Callable[[Any], str]:
    """A formatter: thousands separators and ``digits`` decimals; ``-`` for None."""
    return lambda value: "-" if value is None else f"{value:,.{digits}f}"


def text(value: Any) -> str:
    return "-" if value is None else str(value)


def percent(value: Any) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"
