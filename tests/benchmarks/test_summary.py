"""``kinesis-actors bench`` ends with a screenful, not the whole report.

The summary is built from the results alone (no run here): a records/s table per throughput
scenario with a column per peer, one line each for the capacity share, latency, memory and
the CPU check; ``--full-report`` prints ``RESULTS.md`` as well.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from benchmarks import suite
from benchmarks.report import summary


def _row(config: str, peer: str, rate: float | None, status: str = "ok") -> dict[str, Any]:
    row: dict[str, Any] = {"config": config, "peer": peer, "status": status}
    if rate is not None:
        row["records_per_s"] = rate
    return row


RESULTS: dict[str, Any] = {
    "mode": "quick",
    "seconds": 412.0,
    "loadavg_start": [1.5, 1.0, 0.5],
    "scenarios": {
        "producer_throughput": {
            "rows": [
                _row("100 B agg=on", "kinesis-actors", 31748.4),
                _row("100 B agg=on", "aiokpl", 1093.2),
                _row("10 KiB agg=off", "kinesis-actors", 2298.0),
                _row("10 KiB agg=off", "aiokpl", None, "failed"),
            ]
        },
        "consumer_throughput": {
            "rows": [
                _row("plain efo", "kinesis-actors", 12560.0),
                _row("plain efo", "boto3", None, "unsupported"),
            ]
        },
        "producer_capacity": {
            "rows": [
                {"peer": "kinesis-actors", "status": "ok", "share_mean": 1.003},
                {"peer": "aiokpl", "status": "ok", "share_mean": 0.16},
            ]
        },
        "latency": {"rows": [{"name": "efo", "p50_ms": 16.9, "p99_ms": 46.8}]},
        "consumer_memory": {"rss_growth_kib": 13414.0, "bound_kib": 16384.0, "flat": True},
    },
    "checks": {"target_cpu_below_client": {"passed": True, "rows": 6, "failures": []}},
}


def test_the_summary_is_a_table_of_rates_per_peer_and_one_line_per_other_figure() -> None:
    text = summary(RESULTS)
    lines = text.splitlines()
    assert lines[0].startswith("kinesis-actors bench (quick, 412 s")
    header = next(line for line in lines if line.startswith("producer records/s"))
    assert header.split()[-2:] == ["kinesis-actors", "aiokpl"]
    assert next(line for line in lines if line.startswith("100 B agg=on")).split()[-2:] == [
        "31,748",
        "1,093",
    ]
    assert next(line for line in lines if line.startswith("10 KiB agg=off")).endswith("failed")
    assert next(line for line in lines if line.startswith("plain efo")).endswith("n/a")
    assert "share of emulated capacity: kinesis-actors 100%, aiokpl 16%" in text
    assert "efo: p50 17 ms, p99 47 ms" in text
    assert "+13.1 MiB against a bound of 16 MiB: flat" in text
    assert "in every throughput row: yes" in text
    assert len(lines) < 25  # a screenful


@pytest.mark.parametrize("full", [False, True], ids=["summary", "full-report"])
def test_the_full_report_is_printed_only_when_asked(
    full: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = tmp_path / "RESULTS.md"
    report.write_text("# kinesis-actors benchmarks\n\nevery row and note\n", encoding="utf-8")

    def write(results: dict[str, Any], out: Path) -> dict[str, Path]:
        results["plots"] = []
        return {"json": tmp_path / "results.json", "table": report}

    monkeypatch.setattr(suite, "run", lambda *args: dict(RESULTS))
    monkeypatch.setattr(suite, "write", write)
    parser = argparse.ArgumentParser()
    suite.add_bench_arguments(parser)
    argv = ["--smoke", "--out", str(tmp_path), *(["--full-report"] if full else [])]
    assert suite.run_from_args(parser.parse_args(argv)) == 0
    out = capsys.readouterr().out
    assert "producer records/s" in out
    assert ("every row and note" in out) == full
    assert ("--full-report prints it" in out) == (not full)
