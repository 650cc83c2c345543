"""The async-kinesis consumer peer leaves no pending task behind for asyncio to complain about.

Its ``close`` can leave ``get_records`` tasks running (a fetch round started them after it
looked); collected pending, they printed "Task was destroyed but it is pending!" in the
middle of the benchmark's output. The harness cancels what the peer left.
"""

from __future__ import annotations

import gc
import logging

import pytest

from benchmarks._common import Clock
from benchmarks.loadtarget import LoadTarget, Synthetic
from benchmarks.peers import ConsumeSpec, consume_async_kinesis


# Three rows of async-kinesis's consumer: ~20 s on a busy machine.
@pytest.mark.slow
def test_the_async_kinesis_consumer_row_ends_with_no_task_destroyed_while_pending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, "asyncio")
    synthetic = Synthetic(record_size=100, records_per_event=1000)
    with LoadTarget(shards=4, synthetic=synthetic, tls=True) as target:
        for _ in range(3):  # the race in its close does not lose every time
            # Its count may fall short (it stops iterating when a read comes back empty): only
            # what it leaves behind is checked here.
            consume_async_kinesis(target, ConsumeSpec(2000), Clock(target))
            gc.collect()
    destroyed = [r.getMessage() for r in caplog.records if "destroyed" in r.getMessage()]
    assert not destroyed, destroyed
