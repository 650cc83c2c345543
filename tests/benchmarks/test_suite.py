"""``kinesis-actors bench`` runs every scenario and peer and writes the JSON, plots and table.

A smoke run (``--smoke``: tiny counts, about 40 s; its figures mean nothing). No speed is
asserted: only that every scenario and peer is there with numbers (or with the reason a peer
could not run), that the outputs exist, and that the load target's CPU stayed below the
client's in every throughput row (otherwise the rows would measure the target).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from kinesis_actors.cli import main

SCENARIOS = {
    "producer_throughput",
    "producer_capacity",
    "consumer_throughput",
    "latency",
    "consumer_memory",
}
PRODUCERS = {"kinesis-actors", "kinesis-actors put_many", "aiokpl", "async-kinesis", "boto3"}
CONSUMERS = {"kinesis-actors", "async-kinesis", "boto3"}
PNG = b"\x89PNG\r\n\x1a\n"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, str]:
    out = tmp_path_factory.mktemp("bench")
    assert main(["bench", "--smoke", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return results, out, (out / "RESULTS.md").read_text(encoding="utf-8")


def _check_throughput(rows: list[dict[str, Any]], peers: set[str], configs: int) -> None:
    assert {row["peer"] for row in rows} == peers
    assert len(rows) == len(peers) * configs
    for row in rows:
        if row["peer"] == "kinesis-actors":
            assert row["status"] == "ok", row
        if row["status"] != "ok":
            assert row["status"] in ("unsupported", "failed") and row["reason"], row
            continue
        for key in (
            "records_per_s",
            "client_cpu_us_per_record",
            "target_cpu_us_per_record",
            "client_cpu_s",
            "target_cpu_s",
        ):
            assert _number(row[key]) and row[key] >= 0, (key, row)
        assert row["records"] > 0
        if row["peer"] != "kinesis-actors":
            assert _number(row["vs_project"]) and row["vs_project"] > 0


@pytest.mark.slow
def test_json_has_every_scenario_and_peer(outcome: tuple[dict[str, Any], Path, str]) -> None:
    results, _, _ = outcome
    assert set(results["scenarios"]) == SCENARIOS
    assert results["mode"] == "smoke"
    assert {"cpu_model", "cores", "python"} <= set(results["machine"])
    scenarios = results["scenarios"]
    _check_throughput(scenarios["producer_throughput"]["rows"], PRODUCERS, 5)
    configs = {row["config"] for row in scenarios["producer_throughput"]["rows"]}
    assert "100 B agg=on new key per record" in configs  # the UUID keys' workload
    _check_throughput(scenarios["consumer_throughput"]["rows"], CONSUMERS, 4)
    ok = [r for r in scenarios["consumer_throughput"]["rows"] if r["status"] == "ok"]
    assert {r["peer"] for r in ok} == CONSUMERS  # every consumer runs polling at least
    capacity = scenarios["producer_capacity"]["rows"]
    assert {row["peer"] for row in capacity} == PRODUCERS
    for row in capacity:
        if row["status"] == "ok":
            assert row["share_timeline"] and _number(row["share_mean"])
            assert len(row["rss_kib"]) >= 2 and row["rss_kib_max"] > 0
    for row in scenarios["latency"]["rows"]:
        assert _number(row["p50_ms"]) and _number(row["p99_ms"])
    memory = scenarios["consumer_memory"]
    assert memory["shards"] == 8 and len(memory["rss_kib"]) >= 2
    assert memory["stall_at_s"] < memory["resume_at_s"]
    assert _number(memory["rss_growth_kib"]) and _number(memory["bound_kib"])
    peers = {(peer["name"], peer["role"]): peer for peer in results["peers"]}
    assert set(peers) == {(p, "producer") for p in PRODUCERS} | {(p, "consumer") for p in CONSUMERS}
    for peer in peers.values():
        assert peer["status"] in ("ok", "partial", "failed") and peer["detail"]
    # The CPU-share check is computed from the rows; whether it holds is a figure of the full
    # run (a smoke run's rows last milliseconds, so either answer is noise there).
    check = results["checks"]["target_cpu_below_client"]
    assert check["rows"] > 0, check
    assert check["passed"] == (not check["failures"]), check


@pytest.mark.slow
def test_plots_and_table(outcome: tuple[dict[str, Any], Path, str]) -> None:
    results, out, table = outcome
    assert len(results["plots"]) == 6
    for name in results["plots"]:
        assert (out / name).read_bytes().startswith(PNG), name
        assert f"]({name})" in table
    assert f"{results['machine']['cores']} cores" in table
    assert results["machine"]["python"] in table and results["date"] in table
    for row in results["scenarios"]["producer_throughput"]["rows"]:
        assert f"| {row['config']} | {row['peer']} |" in table
        if row["status"] == "ok":
            assert f"{row['records_per_s']:,.0f}" in table
        else:
            assert row["reason"] in table
    for row in results["scenarios"]["latency"]["rows"]:
        assert f"| {row['name']} | {row['p50_ms']:,.1f} |" in table
    verdict = "yes" if results["checks"]["target_cpu_below_client"]["passed"] else "**no**"
    assert f"Target CPU below client CPU in every throughput row: {verdict}" in table


def test_missing_extra_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kinesis_actors.cli import _bench

    monkeypatch.setitem(_bench.BENCH_MODULES, "no_such_module_for_bench", "no-such-peer")
    assert main(["bench", "--quick"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no-such-peer" in error and "[bench]" in error
