"""The export's bookkeeping: one snapshot per source per collection, failures contained."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from kinesis_actors.client import ClientStats
from kinesis_actors.metrics._catalog import client_points
from kinesis_actors.metrics._sampler import LoopSampler
from kinesis_actors.metrics.otel import _export_for, _Source

from .otel_helpers import collect, only

pytestmark = pytest.mark.anyio

CALLS = "kinesis_actors.client.calls"


async def test_each_collection_takes_one_snapshot_per_source_for_all_its_instruments() -> None:
    reader = InMemoryMetricReader()
    export = _export_for(MeterProvider(metric_readers=[reader]))
    taken: list[int] = []

    def read() -> ClientStats:
        taken.append(1)
        return ClientStats(calls=len(taken))

    export.add([_Source(LoopSampler(read), lambda stats: client_points(stats, {"x": "1"}))])
    first = collect(reader)
    assert len(taken) == 1  # seven client instruments, one snapshot
    assert only(first, CALLS, x="1") == 1
    second = collect(reader)
    assert len(taken) == 2
    assert only(second, CALLS, x="1") == 2


async def test_a_failing_source_is_skipped_and_logged_once_while_the_others_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = InMemoryMetricReader()
    export = _export_for(MeterProvider(metric_readers=[reader]))

    def broken() -> ClientStats:
        raise RuntimeError("no snapshot today")

    export.add(
        [
            _Source(LoopSampler(broken), lambda stats: client_points(stats, {"x": "bad"})),
            _Source(LoopSampler(ClientStats), lambda stats: client_points(stats, {"x": "ok"})),
        ]
    )
    with caplog.at_level(logging.ERROR, logger="kinesis_actors.metrics"):
        for _ in range(3):
            collected = collect(reader)
            assert [tags["x"] for tags, _ in collected[CALLS]] == ["ok"]
    assert len(caplog.records) == 1
    assert "no snapshot today" in caplog.text
