"""The short form of the pipeline soak (``tests/consumer/pipeline_soak.py``): a producer
through a faulty proxy, a stream split at its midpoint and off it and merged back, read at
once by an EFO consumer whose connection is reset, a polling consumer, a lease group whose
workers are SIGKILLed, and a Spark query whose driver is killed. Every put settles; no
reader loses a record or delivers a key's records out of order (across the off-midpoint
split too); Spark delivers each stream record once."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_actors import LocalDynamoDB, LocalKinesis

from .pipeline_soak import PipelineSettings, run_soak

pytestmark = [pytest.mark.anyio, pytest.mark.local_kinesis, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the group's workers run on asyncio and trio (see ``Workers.start``)


async def test_a_resharded_stream_under_faults_and_kills_keeps_every_key_in_order_for_every_reader(
    local_kinesis: LocalKinesis, local_dynamodb: LocalDynamoDB, tmp_path: Path
) -> None:
    report = await run_soak(
        local_kinesis, local_dynamodb, tmp_path, PipelineSettings(seed=5, seconds=30.0)
    )
    print(f"\npipeline soak: {report.line()}")
    assert report.written > 0 and report.unsettled == 0 and report.failed == 0
    assert report.splits >= 2 and report.merges >= 1  # a midpoint and an off-midpoint split
    assert report.worker_kills >= 2 and report.spark_kills == 1 and report.efo_resets == 1
    assert sum(report.faults.values()) > 0  # the producer met faults
    assert report.worker_deaths == 0
    assert report.off_own_shard >= report.misplaced_records  # the misplaced and their keys' next
    for name, reader in report.readers.items():
        assert reader.lost == 0, name
        assert reader.order_violations == 0, name
    assert report.spark_caught_up and report.spark_deaths == 0
    assert report.readers["spark"].duplicates == 0
