"""The lease benchmark: a smoke run of both measurements against the real local servers
(a failover time of 1 s: figures meaningless, shape checked)."""

from __future__ import annotations

import pytest

from benchmarks import lease_bench
from kinesis_actors.leases import LeaseConfig


def test_a_smoke_run_counts_every_request_and_fails_over() -> None:
    results = lease_bench.run(
        leases=6,
        workers=(2,),
        seconds=1.0,
        failover_runs=1,
        failover_shards=4,
        failover_workers=2,
        config=LeaseConfig(failover_time=1.0),
    )
    (cost,) = results["cost"]
    assert cost["failures"] == []
    assert (cost["leases"], cost["workers"]) == (6, 2)
    assert sum(cost["held"]) == 6
    assert {"UpdateItem", "Scan"} <= set(cost["calls"])  # renewals and take rounds
    assert cost["calls_per_s"] == pytest.approx(
        sum(cost["calls"].values()) / cost["seconds"], rel=0.01
    )
    assert cost["ratio_to_kcl"] == pytest.approx(
        cost["calls_per_s"] / cost["kcl"]["calls_per_s"], rel=0.01
    )
    assert cost["ratio_to_kcl3"] == pytest.approx(
        cost["calls_per_s"] / cost["kcl3"]["calls_per_s"], rel=0.01
    )
    (failover,) = results["failover"]
    assert failover["failures"] == []
    assert failover["orphaned_leases"] == 2
    assert failover["failover_s"] is not None  # every orphaned lease was taken over
    assert failover["first_take_s"] <= failover["failover_s"]
    text = lease_bench.render(results)
    assert "DynamoDB requests per second" in text
    assert "all taken over after" in text


def test_checkpoints_ride_on_renewals_and_the_kcl_models_count_one_update_each() -> None:
    results = lease_bench.run(
        leases=4,
        workers=(1,),
        seconds=1.5,
        failover_runs=0,
        config=LeaseConfig(failover_time=1.0),
        checkpoint_every=0.25,
    )
    (cost,) = results["cost"]
    assert cost["failures"] == [] and sum(cost["held"]) == 4
    assert cost["checkpoints_noted_per_s"] > 4  # a checkpoint of each lease about every 0.25 s
    assert cost["kcl"]["checkpoints_per_s"] == pytest.approx(4 / 0.25)
    assert cost["kcl3"]["checkpoints_per_s"] == pytest.approx(4 / 0.25)
    # Renewals every third of a second write them: 12 UpdateItems a second, not 12 + 16.
    assert cost["per_operation_per_s"]["UpdateItem"] < 4 / (1.0 / 3) + 4
    assert "checkpointed every 0.25 s" in lease_bench.render(results)


@pytest.mark.parametrize("every", ["0", "-5", "soon", "inf"])
def test_a_checkpoint_cadence_that_is_not_positive_seconds_is_refused_before_any_run(
    every: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        lease_bench.main(["--checkpoint-every", every])
    assert "positive number of seconds" in capsys.readouterr().err
