"""The read-rate benchmark runs against the local server and gives its figures (tiny rows)."""

from __future__ import annotations

import pytest

from benchmarks.read_rate_bench import MIB, measure_cap, measure_caught_up
from kinesis_actors import LocalKinesis

pytestmark = [pytest.mark.anyio, pytest.mark.local_kinesis]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a benchmark's figures, not a backend's behaviour


async def test_the_read_rate_benchmark_reads_the_backlog_and_counts_calls_at_the_tip(
    local_kinesis: LocalKinesis,
) -> None:
    assert await measure_cap(local_kinesis, 8 * MIB) > 0
    assert await measure_caught_up(local_kinesis, 1.0, 1_000) > 0
