"""``benchmarks.spark_scale`` runs a tiny row end to end and reports every figure.

No speed is asserted (a few shards mean nothing): only that the AvailableNow query read every
record, that the tasks and the CPU figures are there, and that the idle query read nothing.
"""

from __future__ import annotations

import pytest

from benchmarks.spark_scale import measure, report

pytestmark = pytest.mark.local_kinesis


@pytest.mark.slow
def test_a_tiny_row_reads_every_record_and_reports_every_figure() -> None:
    row = measure(4, idle=0.5, settle=0.5)
    assert row["rows"] == row["records"] == 12
    assert row["tasks_per_batch"] and all(0 < tasks <= 4 for tasks in row["tasks_per_batch"])
    assert row["tasks"] == sum(row["tasks_per_batch"])
    for key in (
        "available_now_s",
        "worker_cpu_ms_per_task",
        "runner_cpu_s",
        "planner_busy_ms_per_shard",
        "planner_final_ms_per_shard",
    ):
        assert row[key] > 0, (key, row[key])
    assert row["idle_rows"] == 0
    assert row["idle_runner_share"] >= 0 and row["idle_jvm_share"] >= 0
    results = {"rows": [row], "loadavg_start": [0, 0, 0], "loadavg_end": [0, 0, 0], "seconds": 1}
    assert "idle runner (cores)" in report(results)
