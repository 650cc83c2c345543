"""The cost of a shard from 16 to 1,000 shards, every benchmark of it side by side in one run.

    .venv/bin/python -m benchmarks.scale_table [--shards 16,128,512,1000]
        [--callers 1,16,256,1024] [--quick] [--with-spark] [--with-leases] [--json]

One invocation runs, at every shard count, the rows of :mod:`benchmarks.scale_bench` (a
polling Consumer: open, every shard read, idle CPU, CPU per record, RSS per shard) and
:mod:`benchmarks.efo_scale_bench` (an EFO Consumer on the local server: open, descriptors,
RSS; and on the load target, which serves 1,000 subscriptions where the local server cannot:
every shard read), and :mod:`benchmarks.unary_bench` at every caller count (CPU per call,
this client and boto3), then prints one markdown table: a column per shard count, a row per
figure. The Spark source (:mod:`benchmarks.spark_scale`) and lease groups
(:mod:`benchmarks.lease_bench`) take many minutes more: ``--with-spark`` and
``--with-leases`` add their rows.

Where a figure was measured before this work, its cell reads ``before → now``. The "before"
figures are constants, not a run: the measurement on main of the issue "Thousands of shards"
(2-core machine, its 1,024-shard column set against our 1,000, the local server's limit), and
for the unary call the same benchmark's run on httpx 0.28.1 before the client's own pool
(docs/architecture.md). The load average is printed with each part: on a shared machine the
wall times move with it, the CPU figures much less.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import efo_scale_bench, scale_bench, unary_bench
from benchmarks._common import load, machine

__all__ = ["BEFORE", "PARTS", "main", "markdown", "run"]

SHARDS = (16, 128, 512, 1000)
CALLERS = unary_bench.CONCURRENCY
PARTS = ("polling", "efo", "efo_load", "unary", "spark", "leases")

#: Before this work, by shard count (the issue's measurement on main, 2-core machine; its
#: 1,024-shard column stands for our 1,000) and, for ``unary``, by callers (unary_bench on
#: httpx 0.28.1, docs/architecture.md). Cells as they were published.
BEFORE: dict[str, dict[int, str]] = {
    "polling_open_read": {16: "0.4 / 0.4", 128: "2.6 / 5.1", 512: "14.5 / 30", 1000: "26.5 / 77"},
    "polling_idle": {16: "0.01", 128: "0.12", 512: "0.59", 1000: "0.96"},
    "efo": {
        16: "0.3 s / 29 / 173",
        128: "0.8 s / 141 / 181",
        512: "1.6 s / 525 / 212",
        1000: "3.9 s / 1,037 / 251",
    },
    "unary": {1: "1,257", 16: "2,228", 256: "3,184", 1024: "4,431"},
    "unary_boto3": {1: "1,087", 16: "1,215", 256: "1,303", 1024: "1,371"},
    "spark_available_now": {16: "10", 128: "38", 512: "79", 1000: "170"},
    "spark_worker_cpu": {16: "6", 128: "18", 512: "57", 1000: "117"},
    "spark_planner": {16: "0.049-0.069", 128: "0.46-0.54", 512: "1.6-4.9", 1000: "3.9-4.1"},
    "spark_idle": {16: "3", 128: "21-25", 512: "53-59", 1000: "68-72"},
    "leases_even": {512: "34 / 103"},
    "leases_failover": {512: "27 / 16"},
}


def _before(key: str, count: int) -> str | None:
    cells = BEFORE.get(key, {})
    if count in cells:
        return cells[count]
    return cells.get(1000) if count == 1024 else None  # the 1,024 shards


def _leases(count: int) -> dict[str, Any]:
    """A lease group of ``count`` leases: when 2 and 4 workers' shares are even, and the
    takeover after one of 2 and one of 4 workers stops without a word (failover 10 s)."""
    from benchmarks import lease_bench  # noqa: PLC0415 - the local DynamoDB, only when asked

    two = lease_bench.run(
        leases=count,
        workers=(2, 4),
        seconds=5.0,
        failover_runs=1,
        failover_shards=count,
        failover_workers=2,
    )
    four = lease_bench.run(
        leases=count, workers=(), failover_runs=1, failover_shards=count, failover_workers=4
    )
    return {
        "shards": count,
        "even_after_s": [row["even_after_s"] for row in two["cost"]],
        "failover_s": [two["failover"][0]["failover_s"], four["failover"][0]["failover_s"]],
    }


def run(
    shards: Sequence[int] = SHARDS,
    callers: Sequence[int] = CALLERS,
    *,
    parts: Sequence[str] = ("polling", "efo", "efo_load", "unary"),
    idle: float = scale_bench.IDLE_SECONDS,
    records: int = scale_bench.RECORDS,
    quick: bool = False,
    smoke: bool = False,
    settle: float | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every part asked for, one after another; each keeps its own module's figures."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    counts = tuple(shards)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "shards": list(counts),
        "callers": list(callers),
        "loadavg": {},
        "failed": {},
    }

    def part(name: str, measure: Callable[[], Any]) -> None:
        """One part; a part that fails is reported and the others still run (a run is long:
        one server's limit must not throw away what the others measured)."""
        if name not in parts:
            return
        progress(f"{name} at {', '.join(map(str, counts))} (load average {load()})")
        began = load()
        try:
            results[name] = measure()
        except Exception as exc:
            results["failed"][name] = repr(exc)
            progress(f"{name} failed: {''.join(traceback.format_exception(exc))}")
        results["loadavg"][name] = {"start": began, "end": load()}

    part("polling", lambda: scale_bench.run(counts, idle, records, settle)["rows"])
    part("efo", lambda: efo_scale_bench.run(counts))
    part("efo_load", lambda: efo_scale_bench.run(counts, load_target=True))
    part("unary", lambda: unary_bench.run(quick, smoke, tuple(callers))["rows"])

    def spark() -> list[dict[str, Any]]:
        from benchmarks import spark_scale  # noqa: PLC0415 - pyspark, only when asked

        rows: list[dict[str, Any]] = spark_scale.run(counts, idle)["rows"]
        return rows

    part("spark", spark)
    part("leases", lambda: [_leases(count) for count in counts])
    results["seconds"] = time.perf_counter() - started
    return results


# -- the table ----------------------------------------------------------------------------


def _num(value: Any, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _cell(now: str, before: str | None) -> str:
    return now if before is None else f"{before} → {now}"


def _by(rows: Sequence[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in rows}


def _line(label: str, cells: Sequence[str]) -> str:
    return "| " + " | ".join([label, *cells]) + " |"


def _row(
    label: str,
    counts: Sequence[int],
    rows: dict[Any, dict[str, Any]],
    show: Callable[[dict[str, Any]], str],
    before: str | None = None,
) -> str:
    cells = []
    for count in counts:
        row = rows.get(count)
        now = "not run" if row is None else show(row)
        cells.append(_cell(now, None if before is None else _before(before, count)))
    return _line(label, cells)


def _polling(counts: Sequence[int], rows: dict[Any, dict[str, Any]]) -> list[str]:
    return [
        _row(
            "polling `Consumer`: open / every shard read, s",
            counts,
            rows,
            lambda r: f"{r['open_s']:.2f} / {r['all_read_s']:.2f}",
            "polling_open_read",
        ),
        _row(
            "polling: CPU of the open / until every shard read, s",
            counts,
            rows,
            lambda r: f"{r['open_cpu_s']:.2f} / {r['all_read_cpu_s']:.2f}",
        ),
        _row(
            "polling: idle CPU (no new records), cores",
            counts,
            rows,
            lambda r: f"{r['idle_cpu_share']:.3f}",
            "polling_idle",
        ),
        _row(
            "polling: CPU per record, µs (net / with the open)",
            counts,
            rows,
            lambda r: (
                f"{_num(r.get('cpu_us_per_record'), 1)} / "
                f"{_num(r.get('gross_cpu_us_per_record'), 1)}"
            ),
        ),
        _row(
            "polling: `statistics()` CPU, ms / close, s",
            counts,
            rows,
            lambda r: f"{_num(r.get('statistics_cpu_ms'), 2)} / {_num(r.get('close_s'), 2)}",
        ),
        _row(
            "polling: RSS growth per shard, KiB (open / every shard read); RSS MB",
            counts,
            rows,
            lambda r: (
                f"{r['rss_open_kib_per_shard']:.0f} / {r['rss_read_kib_per_shard']:.0f}; "
                f"{r['rss_read_mb']:.0f}"
            ),
        ),
    ]


def _efo_cell(row: dict[str, Any]) -> str:
    fds = row.get("fds")
    rss = row.get("rss_mb")
    tail = ""
    if fds is None:  # not every shard subscribed in the time given: the end's figures
        fds, rss, tail = row.get("fds_end"), row.get("rss_end_mb"), " (at the end)"
    return f"{row['open_s']:.1f} s / {_num(fds)} / {_num(rss)}{tail}"


def _efo(counts: Sequence[int], rows: dict[Any, dict[str, Any]]) -> list[str]:
    return [
        _row(
            "EFO `Consumer`: open / file descriptors / RSS MB",
            counts,
            rows,
            _efo_cell,
            "efo",
        ),
        _row(
            "EFO: connections; every shard read, s (or shards read)",
            counts,
            rows,
            lambda r: f"{_num(r.get('connections'))}; {_read_in(r)}",
        ),
    ]


def _read_in(row: dict[str, Any]) -> str:
    if row.get("all_read_s") is not None:
        return f"{row['all_read_s']:.1f}"
    return f"{row.get('shards_read')} read in {efo_scale_bench.READ_ALL_TIMEOUT:.0f} s"


def _efo_load(counts: Sequence[int], rows: dict[Any, dict[str, Any]]) -> list[str]:
    return [
        _row(
            "EFO from the load target: every shard read, s; connections / descriptors",
            counts,
            rows,
            lambda r: (
                f"{_read_in(r)}; {_num(r.get('connections'))} / "
                f"{_num(r.get('fds', r.get('fds_end')))}"
            ),
        ),
    ]


def _unary(callers: Sequence[int], rows: Sequence[dict[str, Any]]) -> list[str]:
    ours = _by([r for r in rows if r["peer"] == "kinesis-actors"], "concurrency")
    boto3 = _by([r for r in rows if r["peer"] == "boto3"], "concurrency")
    ratio = {
        level: {"ratio": ours[level]["cpu_us_per_call"] / boto3[level]["cpu_us_per_call"]}
        for level in ours
        if level in boto3
    }
    return [
        _line("**callers at once**", [f"**{level:,}**" for level in callers]),
        _row(
            "a unary call's CPU, this client, µs",
            callers,
            ours,
            lambda r: f"{r['cpu_us_per_call']:,.0f}",
            "unary",
        ),
        _row(
            "a unary call's CPU, boto3, µs",
            callers,
            boto3,
            lambda r: f"{r['cpu_us_per_call']:,.0f}",
            "unary_boto3",
        ),
        _row("this client / boto3", callers, ratio, lambda r: f"{r['ratio']:.2f}"),
    ]


def _spark(counts: Sequence[int], rows: dict[Any, dict[str, Any]]) -> list[str]:
    return [
        _row(
            "Spark `Trigger.AvailableNow` into noop, wall s",
            counts,
            rows,
            lambda r: f"{r['available_now_s']:.1f}",
            "spark_available_now",
        ),
        _row(
            "Spark Python worker CPU for that query, s",
            counts,
            rows,
            lambda r: f"{r['worker_cpu_s']:.1f}",
            "spark_worker_cpu",
        ),
        _row(
            "driver planner CPU, one busy trigger, s",
            counts,
            rows,
            lambda r: f"{r['planner_busy_ms_per_shard'] * r['shards'] / 1000:.3f}",
            "spark_planner",
        ),
        _row(
            "an idle query, % of a core (source runner + JVM)",
            counts,
            rows,
            lambda r: f"{(r['idle_runner_share'] + r['idle_jvm_share']) * 100:.0f}",
            "spark_idle",
        ),
    ]


def _leases_rows(counts: Sequence[int], rows: dict[Any, dict[str, Any]]) -> list[str]:
    def pair(values: Sequence[Any]) -> str:
        return " / ".join("not done" if value is None else f"{value:.0f}" for value in values)

    return [
        _row(
            "lease group: shares even, 2 / 4 workers, s",
            counts,
            rows,
            lambda r: pair(r["even_after_s"]),
            "leases_even",
        ),
        _row(
            "takeover after one of 2 / 4 workers stops (failover 10 s), s",
            counts,
            rows,
            lambda r: pair(r["failover_s"]),
            "leases_failover",
        ),
    ]


def markdown(results: dict[str, Any]) -> str:
    """The table, with what it was measured on and the load average of each part."""
    counts: list[int] = results["shards"]
    out = [
        _line("shards", [f"{count:,}" for count in counts]),
        "|---|" + "---:|" * len(counts),
    ]
    if "polling" in results:
        out += _polling(counts, _by(results["polling"], "shards"))
    if "efo" in results:
        out += _efo(counts, _by(results["efo"], "shards"))
    if "efo_load" in results:
        out += _efo_load(counts, _by(results["efo_load"], "shards"))
    if "spark" in results:
        out += _spark(counts, _by(results["spark"], "shards"))
    if "leases" in results:
        out += _leases_rows(counts, _by(results["leases"], "shards"))
    if "unary" in results:
        out += _unary(results["callers"], results["unary"])
    failed = results.get("failed", {})
    out += [_line(f"{name}: failed", [error.replace("|", "/")]) for name, error in failed.items()]
    width = max(line.count("|") for line in out)  # callers and shards may differ in number
    out = [line + " |" * (width - line.count("|")) for line in out]
    facts = results["machine"]
    loads = "; ".join(
        f"{name} {span['start']} → {span['end']}" for name, span in results["loadavg"].items()
    )
    out += [
        "",
        f"Measured {results['date']} on {facts['cores']} cores ({facts['cpu_model']}), "
        f"{facts['implementation']} {facts['python']}, in {results['seconds']:.0f} s. "
        f"Load average (1, 5, 15 min) at each part's start → end: {loads}.",
        "Cells `before → now`: before is the measurement on main before this work (constants, "
        "see the module's docstring).",
    ]
    return "\n".join(out)


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected positive whole numbers like 16,128, got {text!r}"
        )
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shards", type=_counts, default=SHARDS, help="comma-separated")
    parser.add_argument("--callers", type=_counts, default=CALLERS, help="unary callers")
    parser.add_argument("--idle", type=float, default=scale_bench.IDLE_SECONDS)
    parser.add_argument("--records", type=int, default=scale_bench.RECORDS)
    parser.add_argument("--quick", action="store_true", help="fewer unary calls a row")
    parser.add_argument("--with-spark", action="store_true", help="add the Spark source's rows")
    parser.add_argument("--with-leases", action="store_true", help="add the lease group's rows")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args(argv)
    parts = ["polling", "efo", "efo_load", "unary"]
    parts += ["spark"] * args.with_spark + ["leases"] * args.with_leases
    results = run(
        args.shards,
        args.callers,
        parts=parts,
        idle=args.idle,
        records=args.records,
        quick=args.quick,
        progress=lambda message: print(f"scale_table: {message}", file=sys.stderr, flush=True),
    )
    if args.json:
        print(json.dumps(results, indent=1, default=str))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
