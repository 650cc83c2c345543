"""``benchmarks.spark_scale`` runs a tiny row end to end and reports every figure.

No speed is asserted (a few shards mean nothing): only that the AvailableNow query read every
record, that the tasks and the CPU figures are there, that the idle query read nothing, and
that the marginal reads were one micro-batch each, of the same tasks, over the rows asked.
"""

from __future__ import annotations

import pytest

from benchmarks._spark import spark_session
from benchmarks.spark_scale import marginal, measure, report, report_marginal

pytestmark = pytest.mark.local_kinesis


@pytest.mark.slow
def test_a_tiny_row_reads_every_record_and_reports_every_figure() -> None:
    spark, owned = spark_session()
    try:
        row = measure(4, idle=0.5, settle=0.5, spark=spark)
        extra = marginal(4, (8, 40), spark)
    finally:
        if owned:
            spark.stop()
    assert row["rows"] == row["records"] == 12
    assert row["tasks_per_batch"] and all(0 < tasks <= 4 for tasks in row["tasks_per_batch"])
    assert row["tasks"] == sum(row["tasks_per_batch"])
    for key in (
        "available_now_s",
        "worker_cpu_ms_per_task",
        "planner_busy_ms_per_shard",
        "planner_final_ms_per_shard",
    ):
        assert row[key] > 0, (key, row[key])
    # The query's source runner is a process of its own that a 12-row query can start and end
    # between two of the CPU sampler's looks (0.2 s apart): under load it was seen at 0.0.
    assert row["runner_cpu_s"] >= 0
    assert row["idle_rows"] == 0
    assert row["idle_runner_share"] >= 0 and row["idle_jvm_share"] >= 0
    results = {"rows": [row], "loadavg_start": [0, 0, 0], "loadavg_end": [0, 0, 0], "seconds": 1}
    assert "idle runner (cores)" in report(results)
    assert extra["rows"] == [8, 40] and extra["tasks"] > 0
    assert len(extra["worker_cpu_s"]) == 2 and isinstance(extra["marginal_us_per_row"], float)
    marginal_results = {"marginal": [extra], "loadavg_start": [0], "loadavg_end": [0]}
    assert "marginal µs/row" in report_marginal({**marginal_results, "seconds": 1})
