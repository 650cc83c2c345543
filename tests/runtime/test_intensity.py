"""Restart intensity and backoff: sans-IO, driven by a ManualClock and a fixed random source."""

from __future__ import annotations

import pytest

from kinesis_actors.runtime import Backoff, ManualClock, RestartBackoff, RestartIntensity


def test_more_than_n_restarts_within_the_period_is_exceeded() -> None:
    clock = ManualClock()
    intensity = RestartIntensity(2, 10.0, clock=clock)
    causes = [ValueError(str(i)) for i in range(3)]
    assert intensity.record(causes[0])
    clock.advance(1)
    assert intensity.record(causes[1])
    clock.advance(1)
    assert not intensity.record(causes[2])
    assert intensity.causes == causes
    assert intensity.restarts_in_window == 3


def test_restarts_spread_beyond_the_period_are_allowed() -> None:
    clock = ManualClock()
    intensity = RestartIntensity(2, 10.0, clock=clock)
    for i in range(10):
        clock.advance(6.0)
        assert intensity.record(ValueError(str(i))), f"restart {i} refused"
    # Only the restarts inside the last 10 seconds are remembered.
    assert [str(cause) for cause in intensity.causes] == ["8", "9"]
    clock.advance(100)
    assert intensity.restarts_in_window == 0


def test_zero_restarts_allowed_means_the_first_failure_escalates() -> None:
    intensity = RestartIntensity(0, 1.0, clock=ManualClock())
    assert not intensity.record(RuntimeError("first"))


def test_intensity_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="max_restarts"):
        RestartIntensity(-1, 1.0)
    with pytest.raises(ValueError, match="period"):
        RestartIntensity(1, 0)


def test_backoff_grows_exponentially_up_to_the_maximum() -> None:
    backoff = Backoff(initial=0.1, maximum=1.0, multiplier=2.0, jitter=0.0)
    assert [backoff.delay(n, 0.5) for n in range(6)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    )
    assert backoff.delay(10_000, 0.0) == 1.0


def test_jitter_scales_the_delay_down_by_at_most_the_jitter_fraction() -> None:
    backoff = Backoff(initial=1.0, maximum=1.0, jitter=0.5)
    assert backoff.delay(0, 0.0) == 1.0
    assert backoff.delay(0, 0.999999) == pytest.approx(0.5, abs=1e-5)
    assert backoff.delay(0, 0.5) == 0.75


def test_backoff_none_restarts_immediately() -> None:
    assert Backoff.none().delay(5, 0.3) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [{"initial": -1.0}, {"multiplier": 0.5}, {"jitter": 1.5}],
)
def test_backoff_arguments_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_restart_backoff_grows_with_consecutive_crashes_and_resets_after_a_healthy_run() -> None:
    clock = ManualClock()
    draws = iter([0.0, 0.0, 0.0, 1.0 - 1e-9, 0.0])
    tracker = RestartBackoff(
        Backoff(initial=0.1, maximum=10.0, jitter=0.5),
        reset_after=5.0,
        clock=clock,
        random=lambda: next(draws),
    )
    tracker.started()
    assert tracker.next_delay() == pytest.approx(0.1)
    tracker.started()
    clock.advance(1.0)  # short run: still crashing
    assert tracker.next_delay() == pytest.approx(0.2)
    tracker.started()
    assert tracker.next_delay() == pytest.approx(0.4)
    tracker.started()
    assert tracker.next_delay() == pytest.approx(0.4)  # 0.8 jittered down by half
    assert tracker.attempt == 4
    tracker.started()
    clock.advance(5.0)  # healthy long enough: start over
    assert tracker.next_delay() == pytest.approx(0.1)


def test_manual_clock_never_goes_backwards() -> None:
    clock = ManualClock(10.0)
    clock.advance(0.5)
    assert clock.now() == 10.5
    with pytest.raises(ValueError):
        clock.advance(-1)
