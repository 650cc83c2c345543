"""At INFO, the consumer says its own life: opened (streams, shard counts, mode), where each
shard starts and why, closed with its counts; resumed from positions, it says so per shard."""

from __future__ import annotations

import logging

import anyio
import pytest

from kinesis_actors import LocalKinesis
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition

from .helpers import consume, put_plain

pytestmark = pytest.mark.anyio


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "kinesis_actors.consumer" and record.levelno == logging.INFO
    ]


async def test_a_consumer_says_it_opened_where_each_shard_starts_and_what_it_read(
    local_kinesis: LocalKinesis, stream_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "kinesis_actors")
    async with local_kinesis.client(tls=False) as client:
        await client.create_stream(stream_name, 2)
        await put_plain(client, stream_name, ((b"r%d" % i, f"k{i}") for i in range(20)))
        config = ConsumerConfig(
            start=StartingPosition.trim_horizon(), idle_backoff_initial=0.05, idle_backoff_max=0.2
        )
        with anyio.fail_after(60):
            async with Consumer(client, stream_name, config) as consumer:
                await consume(consumer, 20)
                positions = consumer.positions()
        said = _said(caplog)
        assert said[0] == (
            f"consumer opened: {stream_name} (2 shards); mode polling; "
            "every shard read by this worker"
        )
        starts = [line for line in said if ": starts at " in line]
        assert len(starts) == 2
        assert all(line.endswith("starts at TRIM_HORIZON, the initial position") for line in starts)
        assert said[-1] == "consumer closed: 20 records in " + said[-1].split(" in ")[1]
        assert said[-1].endswith("from 2 shards")

        caplog.clear()
        resumed = ConsumerConfig(
            positions=positions, idle_backoff_initial=0.05, idle_backoff_max=0.2
        )
        async with Consumer(client, stream_name, resumed):
            pass
        again = [line for line in _said(caplog) if ": starts " in line]
        assert len(again) == 2
        assert all("from the positions given" in line for line in again), again
