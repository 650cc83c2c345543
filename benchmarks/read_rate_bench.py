"""A polled shard's read rate under ``max_bytes_per_second`` (the cap for a shard shared with
other readers), and its calls while caught up with ``caught_up_millis_behind``.

    .venv/bin/python benchmarks/read_rate_bench.py [--cap-mib 0.5] [--trickle 20]

Against the embedded local Kinesis server, one shard:

- ``cap``: a backlog of 48 records of 64 KiB (3 MiB), read from TRIM_HORIZON by a polling
  Consumer with answers of 8 records (512 KiB), once with the cap and once without. The rate is
  the bytes after the first answer over the time from the first batch to the last (the first
  answer is free: the pacer charges an answer after it arrives).
- ``caught_up``: 4 records a second put for ``trickle`` seconds while a Consumer reads at the
  tip; its client's calls per second, with ``caught_up_millis_behind=1000`` and without.

Run by hand; the test runs it with a short trickle.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from typing import Any

import anyio

from kinesis_actors import (
    Consumer,
    ConsumerConfig,
    LocalKinesis,
    StartingPosition,
)

__all__ = ["main", "measure_cap", "measure_caught_up"]

MIB = 1024 * 1024
RECORD = 64 * 1024
BACKLOG = 48


async def measure_cap(local: LocalKinesis, cap: float | None) -> float:
    """Bytes per second of a backlog read under ``cap`` (None: the default 2 MiB/s)."""
    stream = f"rate-{uuid.uuid4().hex[:8]}"
    async with local.client(tls=False) as client:
        await client.create_stream(stream, 1)
        for index in range(0, BACKLOG, 8):
            await client.call(
                "PutRecords",
                {
                    "StreamName": stream,
                    "Records": [
                        {"Data": b"%06d" % (index + i) + b"." * (RECORD - 6), "PartitionKey": "k"}
                        for i in range(8)
                    ],
                },
            )
        extra: dict[str, Any] = {} if cap is None else {"max_bytes_per_second": cap}
        config = ConsumerConfig(
            start=StartingPosition.trim_horizon(), max_records_per_call=8, **extra
        )
        times: list[tuple[float, int]] = []
        read = 0
        with anyio.fail_after(120):
            async with Consumer(client, stream, config) as records:
                async for batch in records:
                    read += len(batch)
                    times.append((time.perf_counter(), len(batch) * RECORD))
                    if read >= BACKLOG:
                        break
    first, *rest = times
    return sum(size for _, size in rest) / (times[-1][0] - first[0])


async def measure_caught_up(local: LocalKinesis, trickle: float, near: int | None) -> float:
    """The reading client's calls per second while 4 records a second arrive."""
    stream = f"tip-{uuid.uuid4().hex[:8]}"
    async with local.client(tls=False) as writer:
        await writer.create_stream(stream, 1)
        config = ConsumerConfig(start=StartingPosition.latest(), caught_up_millis_behind=near)
        async with local.client(tls=False) as client, Consumer(client, stream, config) as records:

            async def drain() -> None:
                async for _batch in records:
                    pass

            async with anyio.create_task_group() as group:
                group.start_soon(drain)
                before, started = client.statistics().calls, time.perf_counter()
                for index in range(int(trickle * 4)):
                    await writer.call(
                        "PutRecord",
                        {"StreamName": stream, "Data": b"%d" % index, "PartitionKey": "k"},
                    )
                    await anyio.sleep(0.25)
                calls = client.statistics().calls - before
                elapsed = time.perf_counter() - started
                group.cancel_scope.cancel()
    return calls / elapsed


async def run(cap_mib: float, trickle: float) -> dict[str, float]:
    with LocalKinesis() as local:
        return {
            "cap_mib_per_s": cap_mib,
            "read_mib_per_s_capped": await measure_cap(local, cap_mib * MIB) / MIB,
            "read_mib_per_s_default": await measure_cap(local, None) / MIB,
            "calls_per_s_caught_up": await measure_caught_up(local, trickle, 1_000),
            "calls_per_s_default": await measure_caught_up(local, trickle, None),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap-mib", type=float, default=0.5)
    parser.add_argument("--trickle", type=float, default=20.0)
    args = parser.parse_args(argv)
    figures = anyio.run(run, args.cap_mib, args.trickle)
    json.dump({key: round(value, 3) for key, value in figures.items()}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
