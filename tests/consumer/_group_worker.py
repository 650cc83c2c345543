"""One worker of a consumer group, as its own process, for the lease acceptance tests.

Run as ``python -m tests.consumer._group_worker SETTINGS_JSON``. It consumes one stream
through a lease table and appends JSON lines to ``settings["log"]``, flushed after every
batch so that a SIGKILL loses at most the batch in progress:

* ``{"ev": "record", "w", "shard", "seq", "sub", "key", "data", "t"}`` for every user record,
  written before the batch is committed;
* ``{"ev": "start" | "stop" | "finish" | "checkpoint" | "release", "w", "shard", ..., "t"}``
  from the consumer's own log (its ``lease_event`` records), so the tests judge the
  consumer by what it says it did;
* ``{"ev": "ready", ...}`` once the consumer is open, ``{"ev": "exit", ..., "leases"}`` after
  a clean stop, with the lease protocol's statistics then (a :class:`LeaseStats` as a dict).

SIGTERM stops it cleanly: the iteration ends, the consumer checkpoints what was committed and
releases its leases.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import time
from typing import IO, Any

import anyio
import anyio.abc

from kinesis_actors import KinesisClient
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition
from kinesis_actors.leases import LeaseConfig

#: The true wall clock, for the log's times (a worker's own clock may be skewed on purpose).
_now = time.time


class _Events(logging.Handler):
    """Writes the consumer's ``lease_event`` log records as JSON lines."""

    def __init__(self, out: IO[str], worker: str) -> None:
        super().__init__(logging.DEBUG)
        self._out = out
        self._worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "lease_event", None)
        if isinstance(event, dict):
            line = {**event, "w": self._worker, "t": _now()}
            self._out.write(json.dumps(line) + "\n")
            self._out.flush()


async def _watch_sigterm(
    consumer: Consumer, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            consumer.stop()
            return


async def work(settings: dict[str, Any], out: IO[str]) -> None:
    worker = settings["worker_id"]
    latest = settings.get("start") == "latest"
    config = ConsumerConfig(
        start=StartingPosition.latest() if latest else StartingPosition.trim_horizon(),
        lease_table=settings["table"],
        worker_id=worker,
        dynamodb_endpoint_url=settings["dynamodb"],
        leases=LeaseConfig(**settings["leases"]),
        idle_backoff_initial=0.05,
        idle_backoff_max=0.2,
        shard_discovery_interval=settings.get("discovery", 1.0),
        max_records_per_call=settings.get("max_records", 10_000),
        mode=settings.get("mode", "polling"),
        consumer_name=settings.get("consumer_name"),
    )
    client = KinesisClient(
        endpoint_url=settings["kinesis_tls" if config.mode == "efo" else "kinesis"],
        verify=False,
        credentials=tuple(settings["credentials"]),
    )
    async with (
        client,
        Consumer(client, settings["stream"], config) as consumer,
        anyio.create_task_group() as tg,
    ):
        # "ready" once a SIGTERM means a clean stop, not the signal's default death.
        await tg.start(_watch_sigterm, consumer)
        out.write(json.dumps({"ev": "ready", "w": worker, "t": _now()}) + "\n")
        out.flush()
        async for batch in consumer:
            now = _now()
            table = batch.arrow.to_pydict()
            for seq, sub, key, data in zip(
                table["sequence_number"],
                table["sub_sequence_number"],
                table["partition_key"],
                table["data"],
                strict=True,
            ):
                line = {
                    "ev": "record",
                    "w": worker,
                    "shard": batch.shard_id,
                    "seq": seq,
                    "sub": sub,
                    "key": key,
                    "data": data.decode(),
                    "t": now,
                }
                out.write(json.dumps(line) + "\n")
            out.flush()
            consumer.commit(batch)
        tg.cancel_scope.cancel()
    stats = consumer.leases
    leases = None if stats is None else dataclasses.asdict(stats)
    out.write(json.dumps({"ev": "exit", "w": worker, "t": _now(), "leases": leases}) + "\n")
    out.flush()


def main() -> None:
    settings = json.loads(sys.argv[1])
    skew = float(settings.get("clock_skew", 0.0))
    if skew:
        # This host's wall clock runs ``skew`` seconds off: nothing the group decides may
        # depend on it (the LATEST pin is the service's time).
        real = time.time
        time.time = lambda: real() + skew
    with open(settings["log"], "a", encoding="utf-8") as out:
        logger = logging.getLogger("kinesis_actors")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(_Events(out, settings["worker_id"]))
        stderr = logging.StreamHandler()
        stderr.setLevel(logging.WARNING)
        logger.addHandler(stderr)
        anyio.run(work, settings, out, backend=settings.get("backend", "asyncio"))


if __name__ == "__main__":
    main()
