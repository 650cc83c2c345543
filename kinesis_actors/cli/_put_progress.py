"""``put``'s live line on a terminal: lines read, acknowledged, failed, and the rate.

Shown on standard error only when it is a terminal (rich decides, as it does for the demo's
bars), and gone when the command ends (``transient``): standard output keeps only the JSON
summary, and a pipe or a file gets nothing extra. While it shows, whatever is written to
``sys.stderr`` (the library's warnings) is printed above it instead of through it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import anyio
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..producer import ProducerMetrics

__all__ = ["PutProgress", "put_progress"]

#: How often the line is redrawn.
_INTERVAL = 0.2
#: The rate is over the last this many seconds: recent enough to show a stall, long enough
#: not to flicker with each PutRecords answer.
_WINDOW = 5.0


class PutProgress:
    """Redraws the line from the producer's metrics every :data:`_INTERVAL` seconds."""

    def __init__(self, progress: Progress, stream: str) -> None:
        self._progress = progress
        self._task = progress.add_task(
            f"put → {stream}", total=None, read=0, failed=0, rate="", start=True
        )
        # (monotonic time, acknowledged) samples; bounded by the window's length.
        self._samples: deque[tuple[float, int]] = deque(maxlen=int(_WINDOW / _INTERVAL) + 1)

    def show(self, *, read: int, acknowledged: int, failed: int, now: float) -> float:
        """Redraw with these counts at ``now`` (seconds, monotonic); returns the rate shown:
        records acknowledged per second over the last :data:`_WINDOW` seconds."""
        self._samples.append((now, acknowledged))
        first_time, first_count = self._samples[0]
        rate = (acknowledged - first_count) / (now - first_time) if now > first_time else 0.0
        self._progress.update(
            self._task,
            completed=acknowledged,
            read=read,
            failed=failed,
            rate=f"{rate:,.0f} records/s",
        )
        return rate

    async def run(self, metrics: Callable[[], ProducerMetrics]) -> None:
        """Redraw from the producer's metrics every :data:`_INTERVAL` seconds until cancelled."""
        while True:
            now = metrics()
            self.show(
                read=now.records_put,
                acknowledged=now.records_sent,
                failed=now.records_failed,
                now=time.monotonic(),
            )
            await anyio.sleep(_INTERVAL)


def put_progress(console: Console | None = None) -> Progress | None:
    """The live display for ``put``, or None when standard error is not a terminal."""
    console = console if console is not None else Console(stderr=True)
    if not console.is_terminal:
        return None
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("read {task.fields[read]:,}"),
        TextColumn("acknowledged {task.completed:,.0f}"),
        TextColumn("failed {task.fields[failed]:,}"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        redirect_stdout=False,  # standard output is the summary's alone
        redirect_stderr=True,
    )
