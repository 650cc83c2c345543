"""The KCL models the lease benchmark compares with: their arithmetic, from the intervals."""

from __future__ import annotations

import pytest

from benchmarks import kcl_model


def test_the_kcl_2_model_follows_its_default_intervals() -> None:
    model = kcl_model.kcl2_calls_per_s(100, 3)
    assert model["renewals_per_s"] == pytest.approx(100 / 3.308)  # 30.23
    assert model["scans_per_s"] == pytest.approx(3 / 20.05 + 1 / 60)
    assert model["calls_per_s"] == pytest.approx(model["renewals_per_s"] + model["scans_per_s"])
    low, high = kcl_model.kcl_failover_window()
    assert (low, high) == pytest.approx((20.05 - (10 / 3 - 0.025), 40.1))


@pytest.mark.parametrize(
    ("leases", "workers", "total"),
    [(100, 4, 30.956), (100, 10, 31.957), (1_000, 4, 303.024), (1_000, 10, 304.025)],
)
def test_the_kcl_3_model_follows_its_default_intervals(
    leases: int, workers: int, total: float
) -> None:
    """Renewals as in 2.x; a query of the owner index each 9.975 s and a metrics write each
    30 s on every worker; the leader's two scans (20 s, 120 s) and its lock's heartbeat
    (30 s), which the others read as often."""
    model = kcl_model.kcl3_calls_per_s(leases, workers)
    assert model["renewals_per_s"] == pytest.approx(leases / 3.308)
    assert model["queries_per_s"] == pytest.approx(workers / 9.975)
    assert model["scans_per_s"] == pytest.approx(1 / 20 + 1 / 120)
    assert model["metrics_per_s"] == pytest.approx(workers / 30)
    assert model["leader_lock_per_s"] == pytest.approx(workers / 30)
    assert model["calls_per_s"] == pytest.approx(total, abs=0.001)


def test_a_checkpoint_is_one_update_in_both_models_and_none_by_default() -> None:
    for model in (kcl_model.kcl2_calls_per_s, kcl_model.kcl3_calls_per_s):
        plain, checkpointed = model(100, 4), model(100, 4, checkpoint_every=60.0)
        assert plain["checkpoints_per_s"] == 0.0
        assert checkpointed["checkpoints_per_s"] == pytest.approx(100 / 60)
        assert checkpointed["calls_per_s"] == pytest.approx(plain["calls_per_s"] + 100 / 60)


@pytest.mark.parametrize("every", [0.0, -1.0, float("nan")])
def test_a_checkpoint_cadence_that_is_not_positive_is_refused(every: float) -> None:
    with pytest.raises(ValueError, match="checkpoint_every"):
        kcl_model.kcl3_calls_per_s(100, 4, checkpoint_every=every)
