"""One worker of the demo's consumer group (``_demo_group``), as its own process.

``python -m kinesis_actors.cli._demo_worker WORKER SETTINGS``: a lease-table
:class:`~kinesis_actors.Consumer` that prints one JSON line per event on its standard output
(the shards it starts and stops reading, from the consumer's own ``lease_event`` log records,
and the data of every batch before committing it) and stops cleanly on SIGTERM (checkpoint,
then release). A module of its own that nothing imports, so running it imports it once.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from typing import Any

import anyio

from ..client import KinesisClient
from ..consumer import Consumer, ConsumerConfig, StartingPosition
from ..leases import LeaseConfig

__all__: list[str] = []


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class _Events(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "lease_event", None)
        if isinstance(event, dict):
            _emit(event)


async def _work(name: str, settings: dict[str, Any]) -> None:
    config = ConsumerConfig(
        start=StartingPosition.trim_horizon(),
        lease_table=settings["table"],
        worker_id=name,
        dynamodb_endpoint_url=settings["dynamodb"],
        leases=LeaseConfig(**settings["leases"]),
        idle_backoff_initial=0.05,
        idle_backoff_max=0.2,
    )
    client = KinesisClient(
        endpoint_url=settings["kinesis"], verify=False, credentials=tuple(settings["credentials"])
    )
    async with (
        client,
        Consumer(client, settings["stream"], config) as consumer,
        anyio.create_task_group() as tg,
    ):

        async def on_sigterm() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    consumer.stop()
                    return

        tg.start_soon(on_sigterm)
        async for batch in consumer:
            _emit({"ev": "batch", "data": [d.decode() for d in batch.arrow["data"].to_pylist()]})
            consumer.commit(batch)
        tg.cancel_scope.cancel()


def _main() -> None:
    name, settings = sys.argv[1], json.loads(sys.argv[2])
    logger = logging.getLogger("kinesis_actors.consumer")
    logger.setLevel(logging.INFO)
    logger.addHandler(_Events())
    anyio.run(_work, name, settings)


if __name__ == "__main__":
    _main()
