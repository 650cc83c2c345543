"""ProducerConfig rejects bad settings at construction, naming the option."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_actors import ProducerConfig, errors
from kinesis_actors.producer._config import queue_limits


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("queue_limit_records", 0),
        ("queue_limit_records", 1.5),
        ("queue_limit_bytes", -1),
        ("aggregation", "yes"),
        ("aggregation_max_bytes", 20),
        ("aggregation_max_bytes", 11 * 1024 * 1024),
        ("linger", -0.1),
        ("max_call_bytes", 11 * 1024 * 1024),
        ("max_in_flight_calls", 0),
        ("rate_limit", 0),
        ("rate_limit", float("nan")),
        ("retry_base", 0),
        ("record_ttl", 0),
        ("record_ttl", -5),
        ("fail_on_error", 1),
        ("preserve_order", None),
        ("backpressure_warning_after", 0),
        ("restart_intensity", (1, 0)),
        ("restart_intensity", (-1, 5.0)),
        ("restart_intensity", (True, 5.0)),
        ("restart_intensity", [3, 5.0]),
    ],
)
def test_bad_settings_name_the_option(option: str, value: Any) -> None:
    with pytest.raises(errors.ConfigError, match=f"ProducerConfig.{option}"):
        ProducerConfig(**{option: value})


def test_retry_max_below_retry_base_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="retry_max"):
        ProducerConfig(retry_base=2.0, retry_max=1.0)


def test_defaults_are_sized_for_one_shard() -> None:
    config = ProducerConfig()
    assert (config.queue_limit_records, config.queue_limit_bytes) == (None, None)  # at open
    assert queue_limits(config, 1) == (10_000, 8 * 1024 * 1024)
    assert config.aggregation_max_bytes == 51_200
    assert config.linger == 0.1
    assert config.record_ttl is None


@pytest.mark.parametrize(
    ("open_shards", "records", "nbytes"),
    [
        (0, 10_000, 8 * 1024 * 1024),  # a summary without a count reads as one shard
        (16, 10_000, 8 * 1024 * 1024),
        (125, 10_000, 8 * 1024 * 1024),
        (126, 10_080, 8 * 1024 * 1024),
        (129, 10_320, 129 * 64 * 1024),
        (1_024, 81_920, 64 * 1024 * 1024),
        (2_048, 163_840, 128 * 1024 * 1024),
        (20_000, 163_840, 128 * 1024 * 1024),  # the bound stops growing
    ],
)
def test_the_default_queue_grows_with_the_shards_between_a_floor_and_a_bound(
    open_shards: int, records: int, nbytes: int
) -> None:
    assert queue_limits(ProducerConfig(), open_shards) == (records, nbytes)


def test_queue_limits_the_caller_set_are_kept_whatever_the_shards() -> None:
    config = ProducerConfig(queue_limit_records=500)
    assert queue_limits(config, 1_024) == (500, 64 * 1024 * 1024)
    config = ProducerConfig(queue_limit_bytes=1_000_000)
    assert queue_limits(config, 1_024) == (81_920, 1_000_000)
