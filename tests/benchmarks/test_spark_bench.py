"""``benchmarks.spark_bench`` runs end to end at a tiny scale and reports every figure.

No speed is asserted (the figures of a few thousand rows mean nothing): only that each
measurement is there, with positive numbers, the Arrow/tuples ratio and the notes.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any

import pytest

from benchmarks._spark import ProcessCpu
from benchmarks.spark_bench import markdown, run

pytestmark = pytest.mark.local_kinesis


def _positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@pytest.mark.slow
def test_a_tiny_run_reports_every_figure() -> None:
    results = run(True, records=3_000, progress=lambda _: None)
    total = 3_000 + results["tail_records"]

    source = results["source"]
    for label in ("executors", "tuples"):
        row = source[label]
        assert row["rows"] == total, row
        assert row["rows_match"], row
        assert row["micro_batches"] >= 1
        for key in ("rows_per_s", "rows_per_s_add_batch", "wall_s", "add_batch_s"):
            assert _positive(row[key]), (label, key, row[key])
        assert _positive(row["cpu_s"]["source_runner"]), row["cpu_s"]
        assert _positive(row["cpu_s"]["jvm"]), row["cpu_s"]
        assert "addBatch" in row["duration_ms_sum"]
        assert row["source_runner_net_cpu_us_per_row"] >= 0
    assert _positive(source["arrow_over_tuples_rows_per_s"]), source

    planner = results["planner_inprocess"]
    assert planner["small"]["rows"] <= planner["all"]["rows"] == 3_000, planner
    for label in ("small", "all"):
        row = planner[label]
        assert _positive(row["driver_cpu_ms_per_batch"]), row
        assert 0 < row["partition_bytes_max"] < 1024, row
        assert 0 < row["data_calls_per_shard"] <= 8, row

    sink = results["sink"]
    assert _positive(sink["batch_write"]["rows_per_s"])
    assert sink["stream_pipeline"]["rows"] == total
    assert _positive(sink["stream_pipeline"]["rows_per_s"])

    assert results["notes"] and all(isinstance(note, str) for note in results["notes"])
    table = markdown(results)
    assert "executors read (Arrow)" in table
    assert "readPath=driver" not in table
    assert "df.write" in table


def test_a_process_seen_before_its_exec_is_counted_under_its_own_role() -> None:
    """The query's source runner is forked by the JVM: seen between its fork and its exec,
    it showed the JVM's command line and its CPU was counted as the JVM's, so the runner's
    figure was missing (a tiny run under load failed so). A child seen first as a shell
    that then execs the runner must be counted as the runner."""
    cpu = ProcessCpu(interval=0.05)
    cpu.start()
    script = 'sleep 0.5; exec "$PYTHON" -c "import time; time.sleep(0.5)" "$ROLE"'
    env = os.environ | {"PYTHON": sys.executable, "ROLE": "python_streaming_source_runner"}
    subprocess.run(["sh", "-c", script], env=env, check=True)
    figures = cpu.stop()
    assert "source_runner" in figures, figures
    assert figures["source_runner"] >= 0
