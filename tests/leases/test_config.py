"""LeaseConfig: the KCL's defaults, derived intervals, and a ConfigError naming the option."""

from __future__ import annotations

import pytest

from kinesis_actors.errors import ConfigError
from kinesis_actors.leases import LeaseConfig


def test_defaults_follow_the_kcl_and_derive_the_intervals() -> None:
    config = LeaseConfig()
    assert config.failover_time == 10.0
    assert config.renew_period == pytest.approx(10 / 3)
    assert config.take_period == pytest.approx(10 / 6)
    assert config.checkpoint_period == config.renew_period
    assert config.max_leases_to_steal is None


def test_explicit_intervals_win() -> None:
    config = LeaseConfig(failover_time=1.0, renew_interval=0.2, take_interval=0.1)
    assert (config.renew_period, config.take_period) == (0.2, 0.1)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"failover_time": 0}, "failover_time"),
        ({"renew_interval": -1}, "renew_interval"),
        ({"take_interval": float("nan")}, "take_interval"),
        ({"shard_sync_interval": 0}, "shard_sync_interval"),
        ({"max_leases_to_steal": 0}, "max_leases_to_steal"),
        ({"max_leases": 1.5}, "max_leases"),
        ({"create_table": "yes"}, "create_table"),
        ({"failover_time": 1.0, "renew_interval": 1.0}, "renew_interval"),
        ({"failover_time": 1.0, "renew_interval": 0.6}, "renew_interval"),
        ({"failover_time": 1.0, "take_interval": 0.6}, "take_interval"),
        ({"failover_time": 0.05}, "failover_time"),
        ({"failover_time": 0.0001}, "failover_time"),
        ({"renew_interval": 0.01}, "renew_interval"),
        ({"take_interval": 0.001}, "take_interval"),
        ({"checkpoint_interval": 0.001}, "checkpoint_interval"),
        ({"renew_interval": 1.0, "checkpoint_interval": 2.0}, "checkpoint_interval"),
    ],
)
def test_a_bad_option_is_a_config_error_naming_it(options: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=f"LeaseConfig.{named}"):
        LeaseConfig(**options)  # type: ignore[arg-type]


def test_a_too_small_failover_time_is_a_config_error_naming_it_and_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"LeaseConfig.failover_time must be at least 1.0 s"):
        LeaseConfig(failover_time=0.05)


def test_the_smallest_failover_time_takes_its_derived_intervals() -> None:
    config = LeaseConfig(failover_time=1.0)
    assert config.renew_period == pytest.approx(1 / 3)
    assert config.take_period == pytest.approx(1 / 6)
