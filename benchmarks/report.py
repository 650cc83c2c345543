"""The suite's outputs beyond the JSON: PNG plots (matplotlib, Agg) and a Markdown table.

``RESULTS.md`` is written for the README to include: it names the date, the machine and the
mode, gives every scenario's figures with this project's peers as ratios, says why any peer
could not run, and links the plots next to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["markdown", "summary", "write_plots"]

PLOTS = {
    "producer_throughput": "producer_throughput.png",
    "producer_capacity": "producer_capacity.png",
    "producer_memory": "producer_memory.png",
    "consumer_throughput": "consumer_throughput.png",
    "latency": "latency.png",
    "consumer_memory": "consumer_memory.png",
}


# -- plots -------------------------------------------------------------------------------------


def _bars(axis: Any, rows: list[dict[str, Any]], key: str, label: str) -> None:
    """Grouped bars: one group per config, one bar per peer (missing where it did not run)."""
    configs = list(dict.fromkeys(row["config"] for row in rows))
    peers = list(dict.fromkeys(row["peer"] for row in rows))
    width = 0.8 / max(len(peers), 1)
    for index, peer in enumerate(peers):
        values = []
        for config in configs:
            row = next((r for r in rows if r["peer"] == peer and r["config"] == config), None)
            values.append(row[key] if row and row["status"] == "ok" else 0.0)
        positions = [at + (index - (len(peers) - 1) / 2) * width for at in range(len(configs))]
        axis.bar(positions, values, width, label=peer)
    axis.set_xticks(range(len(configs)), configs, fontsize=8)
    axis.set_ylabel(label)
    axis.set_yscale("log")
    axis.grid(axis="y", alpha=0.3)


def write_plots(results: dict[str, Any], out: Path) -> list[str]:
    """Write every plot the results have data for; returns their file names."""
    import matplotlib  # noqa: PLC0415 - the bench extra; imported only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    scenarios = results["scenarios"]
    written: list[str] = []

    def save(figure: Any, name: str) -> None:
        figure.tight_layout()
        figure.savefig(out / PLOTS[name], dpi=110)
        plt.close(figure)
        written.append(PLOTS[name])

    for name in ("producer_throughput", "consumer_throughput"):
        if name in scenarios:
            rows = scenarios[name]["rows"]
            figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
            _bars(top, rows, "records_per_s", "records/s (log)")
            _bars(bottom, rows, "client_cpu_us_per_record", "client CPU µs/record (log)")
            top.set_title(name.replace("_", " "))
            top.legend(fontsize=8)
            save(figure, name)
    if "producer_capacity" in scenarios:
        rows = [r for r in scenarios["producer_capacity"]["rows"] if r["status"] == "ok"]
        figure, axis = plt.subplots(figsize=(9, 4))
        for row in rows:
            axis.plot(*zip(*row["share_timeline"], strict=True), marker=".", label=row["peer"])
        axis.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        axis.set_xlabel("second")
        axis.set_ylabel("share of emulated capacity")
        axis.set_title("producer share of a 2-shard stream's write capacity")
        axis.legend(fontsize=8)
        save(figure, "producer_capacity")
        figure, axis = plt.subplots(figsize=(9, 4))
        for row in rows:
            times, values = zip(*row["rss_kib"], strict=True)
            axis.plot(times, [v / 1024 for v in values], label=row["peer"])
        axis.set_xlabel("second")
        axis.set_ylabel("RSS MiB")
        axis.set_title("producer RSS under sustained backpressure (throttled target)")
        axis.legend(fontsize=8)
        save(figure, "producer_memory")
    if "latency" in scenarios:
        rows = [r for r in scenarios["latency"]["rows"] if r["p50_ms"] is not None]
        figure, axis = plt.subplots(figsize=(7, 4))
        positions = range(len(rows))
        axis.bar([p - 0.2 for p in positions], [r["p50_ms"] for r in rows], 0.4, label="p50")
        axis.bar([p + 0.2 for p in positions], [r["p99_ms"] for r in rows], 0.4, label="p99")
        axis.set_xticks(list(positions), [r["name"] for r in rows], fontsize=8)
        axis.set_ylabel("ms, put -> batch delivered")
        axis.set_title("put -> consume latency")
        axis.legend(fontsize=8)
        save(figure, "latency")
    if "consumer_memory" in scenarios:
        memory = scenarios["consumer_memory"]
        figure, axis = plt.subplots(figsize=(9, 4))
        times, values = zip(*memory["rss_kib"], strict=True)
        axis.plot(times, [v / 1024 for v in values], label="RSS")
        axis.axvspan(memory["stall_at_s"], memory["resume_at_s"], alpha=0.2, label="stalled")
        ceiling = (memory["rss_kib_at_stall"] + memory["bound_kib"]) / 1024
        axis.axhline(ceiling, color="red", linestyle="--", linewidth=0.8, label="bound")
        axis.set_xlabel("second")
        axis.set_ylabel("RSS MiB")
        axis.set_title(f"{memory['shards']}-shard EFO consumer, downstream stalled")
        axis.legend(fontsize=8)
        save(figure, "consumer_memory")
    return written


# -- Markdown ----------------------------------------------------------------------------------


def _num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    return f"{value:,.{digits}f}"


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def _throughput(rows: list[dict[str, Any]]) -> list[str]:
    header = [
        "config",
        "peer",
        "records/s",
        "vs project",
        "client µs/rec",
        "CPU vs project",
        "target µs/rec",
        "target < client",
        "note",
    ]
    body = []
    for row in rows:
        if row["status"] != "ok":
            body.append(
                [row["config"], row["peer"], "-", "-", "-", "-", "-", "-", row["status"] + ": "
                 + row["reason"].replace("|", "/")]
            )  # fmt: skip
            continue
        body.append(
            [
                row["config"],
                row["peer"],
                _num(row["records_per_s"]),
                _ratio(row.get("vs_project")),
                _num(row["client_cpu_us_per_record"], 1),
                _ratio(row.get("cpu_vs_project")),
                _num(row["target_cpu_us_per_record"], 1),
                _num(row["target_below_client_cpu"]),
                _spread(row.get("runs_records_per_s") or []),
            ]
        )
    return _table(header, body)


def _spread(rates: list[float]) -> str:
    """``median of 3: 80,292-106,229 rec/s`` for a repeated row, nothing for a single run."""
    if len(rates) < 2:
        return ""
    return f"median of {len(rates)}: {_num(min(rates))}-{_num(max(rates))} rec/s"


def markdown(results: dict[str, Any], plots: list[str]) -> str:
    """The table the README includes (``benchmarks/results/RESULTS.md`` by default)."""
    machine, scenarios = results["machine"], results["scenarios"]
    lines = [
        "# kinesis-actors benchmarks",
        "",
        f"- date: {results['date']}; mode: `{results['mode']}`; {results['seconds']:.0f} s in all",
        f"- machine: {machine['cpu_model']}, {machine['cores']} cores, "
        f"{machine['implementation']} {machine['python']}, {machine['platform']}",
        f"- load average {results['loadavg_start']} at start, {results['loadavg_end']} at end",
        "- every client runs in one process against a loopback load target in a process of "
        "its own; *vs project* is peer / kinesis-actors for the same config (rates: higher is "
        "faster; CPU: higher costs more); *target < client* says the target was not the "
        "bottleneck; every row starts after a full garbage collection.",
    ]
    repeats = results.get("scale", {}).get("repeats", 1)
    if repeats > 1:
        lines.append(
            f"- throughput rows: each peer ran {repeats} times, peers interleaved; the run with "
            "the median rate is shown, the note gives the range"
        )
    lines.append("")

    def plot(name: str) -> None:
        file = PLOTS[name]
        if file in plots:
            lines.extend([f"![{name.replace('_', ' ')}]({file})", ""])

    if "producer_throughput" in scenarios:
        lines += ["## Producer throughput", ""]
        lines.append("4-shard target without limits; each producer unpaced; then flushed.")
        lines += ["", *_throughput(scenarios["producer_throughput"]["rows"]), ""]
        plot("producer_throughput")
    if "producer_capacity" in scenarios:
        capacity = scenarios["producer_capacity"]
        lines += ["## Producer share of emulated capacity, and memory under backpressure", ""]
        lines.append(
            f"{capacity['shards']}-shard target emulating the service's write limits (1,000 "
            f"records/s and 1 MiB/s a shard); {capacity['record_bytes']} B records without "
            f"aggregation pushed flat out for {capacity['seconds']:.0f} s, each producer paced "
            "as it ships. Share: mean over the steady seconds."
        )
        body = []
        for row in capacity["rows"]:
            if row["status"] != "ok":
                reason = row["status"] + ": " + row["reason"]
                body.append([row["peer"], "-", "-", "-", "-", "-", reason])
                continue
            rss = "/".join(
                f"{row[key] / 1024:.0f}" for key in ("rss_kib_first", "rss_kib_max", "rss_kib_last")
            )
            body.append(
                [
                    row["peer"],
                    f"{row['share_mean'] * 100:.0f}%",
                    _num(row["records"]),
                    _num(row["throttled_at_target"]),
                    rss,
                    f"{row['client_cpu_s']:.2f} / {row['target_cpu_s']:.2f}",
                    "",
                ]
            )
        header = [
            "peer",
            "share",
            "records",
            "throttled",
            "RSS MiB first/max/last",
            "CPU s client / target",
            "note",
        ]
        lines += ["", *_table(header, body), ""]
        plot("producer_capacity")
        plot("producer_memory")
    if "consumer_throughput" in scenarios:
        lines += ["## Consumer decode throughput", ""]
        lines.append(
            "4-shard synthetic target serving endless 100 B records (plain, and KPL aggregates "
            "of 10); TLS + HTTP/2 for this project, HTTP/1.1 for the aiobotocore/botocore peers."
        )
        lines += ["", *_throughput(scenarios["consumer_throughput"]["rows"]), ""]
        plot("consumer_throughput")
    if "latency" in scenarios:
        latency = scenarios["latency"]
        lines += ["## Put -> consume latency", ""]
        lines.append(
            f"{latency['shards']}-shard target, one PutRecord every "
            f"{latency['interval_s'] * 1e3:.0f} ms, {latency['samples']} records; "
            f"{latency['peers_not_measured']}."
        )
        body = [
            [row["name"], _num(row["p50_ms"], 1), _num(row["p99_ms"], 1), _num(row["samples"])]
            for row in latency["rows"]
        ]
        lines += ["", *_table(["read mode", "p50 ms", "p99 ms", "samples"], body), ""]
        plot("latency")
    if "consumer_memory" in scenarios:
        memory = scenarios["consumer_memory"]
        lines += ["## Memory of a stalled EFO consumer", ""]
        lines.append(
            f"{memory['shards']}-shard EFO consumer; after warming up, its loop stops taking "
            f"batches for {memory['stall_seconds']:.0f} s while the target keeps every shard "
            f"full ({memory['event_kib']:.0f} KiB events). RSS at the stall "
            f"{memory['rss_kib_at_stall'] / 1024:.0f} MiB, at most "
            f"{memory['rss_kib_max_during_stall'] / 1024:.0f} MiB during it: "
            f"{memory['rss_growth_kib'] / 1024:+.1f} MiB against a bound of "
            f"{memory['bound_kib'] / 1024:.0f} MiB (shards x prefetch {memory['prefetch_batches']}"
            f" x 2 x event): {'flat' if memory['flat'] else '**NOT flat**'}; "
            f"{memory['events_during_stall']} events sent during the stall."
        )
        lines.append("")
        plot("consumer_memory")
    lines += ["## Peers", ""]
    body = [
        [peer["name"], peer["role"], peer["version"], peer["status"], peer["detail"]]
        for peer in results["peers"]
    ]
    lines += [*_table(["peer", "role", "version", "status", "detail"], body), ""]
    check = results["checks"]["target_cpu_below_client"]
    lines.append(
        f"Target CPU below client CPU in every throughput row: "
        f"{'yes' if check['passed'] else '**no**'} ({check['rows']} rows"
        + (f"; not in: {', '.join(check['failures'])}" if check["failures"] else "")
        + ")."
    )
    return "\n".join(lines) + "\n"


#: Short column names for the terminal summary.
_SHORT = {"kinesis-actors put_many": "put_many"}


def _rate_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row["status"] != "ok":
        return "n/a" if row["status"] == "unsupported" else row["status"]
    return f"{row['records_per_s']:,.0f}"


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            [
                row[0].ljust(widths[0]),
                *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)),
            ]
        ).rstrip()
        for row in rows
    ]


def summary(results: dict[str, Any]) -> str:
    """A screenful for the terminal: records/s per config and peer, the capacity share, the
    latency and the stalled consumer's memory, and the CPU check. ``RESULTS.md`` has the rest."""
    scenarios = results["scenarios"]
    lines = [
        f"kinesis-actors bench ({results['mode']}, {results['seconds']:.0f} s; load average "
        f"{results['loadavg_start'][0]} at start)"
    ]
    for name, title in (
        ("producer_throughput", "producer"),
        ("consumer_throughput", "consumer"),
    ):
        rows = scenarios.get(name, {}).get("rows", [])
        if not rows:
            continue
        peers = list(dict.fromkeys(row["peer"] for row in rows))
        configs = list(dict.fromkeys(row["config"] for row in rows))
        cells = {(row["config"], row["peer"]): row for row in rows}
        table = [[f"{title} records/s", *(_SHORT.get(peer, peer) for peer in peers)]]
        table += [
            [config, *(_rate_cell(cells.get((config, peer))) for peer in peers)]
            for config in configs
        ]
        lines += ["", *_aligned(table)]
    capacity = scenarios.get("producer_capacity", {}).get("rows", [])
    if capacity:
        shares = ", ".join(
            f"{_SHORT.get(row['peer'], row['peer'])} "
            + (f"{row['share_mean'] * 100:.0f}%" if row["status"] == "ok" else row["status"])
            for row in capacity
        )
        lines += ["", f"share of emulated capacity: {shares}"]
    latency = scenarios.get("latency", {}).get("rows", [])
    if latency:
        lines.append("put -> consume latency (kinesis-actors):")
        lines += [
            f"  {row['name']}: p50 {row['p50_ms']:,.0f} ms, p99 {row['p99_ms']:,.0f} ms"
            for row in latency
        ]
    memory = scenarios.get("consumer_memory")
    if memory:
        lines.append(
            f"stalled EFO consumer's memory: {memory['rss_growth_kib'] / 1024:+.1f} MiB against "
            f"a bound of {memory['bound_kib'] / 1024:.0f} MiB: "
            + ("flat" if memory["flat"] else "NOT flat")
        )
    check = results["checks"]["target_cpu_below_client"]
    lines.append(
        "load target's CPU below the client's in every throughput row: "
        + ("yes" if check["passed"] else f"NO ({', '.join(check['failures'])})")
    )
    return "\n".join(lines) + "\n"
