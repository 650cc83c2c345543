"""``Producer.statistics()`` and ``Producer.metrics``: the same frozen snapshot, with the
supervision tree in it (a tuple, like ``Consumer.supervision``; empty before open)."""

from __future__ import annotations

import dataclasses

import pytest

from kinesis_actors.client import KinesisClient
from kinesis_actors.producer import Producer, ProducerMetrics, ShardRateLimiter

ENDPOINT = "http://127.0.0.1:9"  # never called: the producer here is not opened


def test_statistics_and_metrics_before_open_are_the_same_zeros_with_no_supervision() -> None:
    producer = Producer(KinesisClient(endpoint_url=ENDPOINT), "orders")
    statistics = producer.statistics()
    assert statistics == producer.metrics
    assert producer.supervision == statistics.supervision == ()
    assert (statistics.outstanding_records, statistics.records_sent, statistics.calls) == (0, 0, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        statistics.records_sent = 1  # type: ignore[misc]


def test_to_dict_has_the_counters_and_averages_but_not_the_supervision_tree() -> None:
    fields = [f.name for f in dataclasses.fields(ProducerMetrics) if f.name != "supervision"]
    statistics = ProducerMetrics(*range(1, len(fields) + 1))
    data = statistics.to_dict()
    assert set(data) == {*fields, "records_per_kinesis_record", "records_per_call"}


def test_rate_limiter_stats_and_all_stats_still_work_and_warn_naming_statistics() -> None:
    limiter = ShardRateLimiter()
    limiter.charge("s0", 1, 10, now=0.0)
    with pytest.warns(DeprecationWarning, match=r"ShardRateLimiter\.statistics\(\)"):
        one = limiter.stats("s0")
    with pytest.warns(DeprecationWarning, match=r"ShardRateLimiter\.all_statistics\(\)"):
        every = limiter.all_stats()
    assert one == limiter.statistics("s0") and every == limiter.all_statistics() == {"s0": one}
