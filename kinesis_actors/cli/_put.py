"""``kinesis-actors put --stream S``: produce standard input's lines, one record per line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

from ..client import KinesisClient
from ..producer import Producer, ProducerConfig


async def run_put(
    client: KinesisClient,
    *,
    lines: Iterable[bytes],
    stream: str,
    key: str | None,
    aggregation: bool,
) -> int:
    """Put every non-empty line (without its newline); print a JSON summary on stdout.

    The partition key is ``key`` for every line if given (one shard, in order), else the
    line's number, which spreads lines over the shards.
    """
    config = ProducerConfig(aggregation=aggregation, linger=0.05)
    async with Producer(client, stream, config) as producer:
        for number, line in enumerate(lines):
            data = line.rstrip(b"\r\n")
            if data:
                await producer.put(data, key if key is not None else str(number))
    metrics = producer.metrics
    json.dump(
        {
            "stream": stream,
            "records": metrics.records_sent,
            "failed": metrics.records_failed,
            "calls": metrics.calls,
            "kinesis_records": metrics.kinesis_records_sent,
            "backpressure_cycles": metrics.backpressure_cycles,
        },
        sys.stdout,
    )
    print()
    return 0 if metrics.records_failed == 0 else 1
