"""Rows run in turn, each in a fresh process, and each row's ratio to the first, round by
round: the shape of the CPU benchmarks (``producer_cpu``, ``consumer_cpu``). Rows run back to
back, so a drift of the machine's speed moves both sides of a ratio alike."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

from benchmarks._common import load

__all__ = ["in_turn", "median_range", "ratio_lines"]


def in_turn(module: str, names: list[str], rounds: int, args: list[str]) -> dict[str, Any]:
    """Each row ``rounds`` times, rows in turn, each in a fresh ``python -m module --one NAME
    *args``, whose last line of output is the row as JSON."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    started = load()
    for round_ in range(rounds):
        for name in names:
            argv = [sys.executable, "-m", module, "--one", name, *args]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out.splitlines()[-1]))
            print(f"round {round_ + 1}/{rounds} {name}: {runs[name][-1]}", file=sys.stderr)
    return {"loadavg_start": started, "loadavg_end": load(), "runs": runs}


def median_range(rows: list[dict[str, Any]], key: str) -> str:
    """The rows' ``key``, as "median (lowest-highest)"; rows without it are left out."""
    values = sorted(row[key] for row in rows if row.get(key) is not None)
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({values[0]:.2f}-{values[-1]:.2f})"


def ratio_lines(runs: dict[str, list[dict[str, Any]]], key: str, what: str) -> list[str]:
    """Each row's ``key`` over the first row's, round by round: median (range); none for one
    row."""
    names = list(runs)
    if len(names) < 2:
        return []
    lines = [f"{what}, round by round, against {names[0]}: median (range)"]
    first = runs[names[0]]
    for name in names[1:]:
        ratios = sorted(row[key] / base[key] for row, base in zip(runs[name], first, strict=True))
        median = statistics.median(ratios)
        lines.append(f"  {name}: {median:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})")
    return lines
