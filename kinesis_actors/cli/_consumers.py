"""``kinesis-actors consumers list|deregister``: find and remove EFO consumers.

A consumer left registered by a killed job costs money and uses one of the stream's 20
slots; these commands are the cleanup.
"""

from __future__ import annotations

import json
import sys

from ..client import KinesisClient
from ..consumer import deregister_consumer, list_consumers


async def run_consumers(
    client: KinesisClient, *, action: str, stream: str, name: str | None
) -> int:
    """List as JSON (one object per consumer), or deregister ``name`` and wait until it is gone."""
    if action == "list":
        consumers = await list_consumers(client, stream)
        json.dump(
            [
                {
                    "name": c["ConsumerName"],
                    "arn": c["ConsumerARN"],
                    "status": c["ConsumerStatus"],
                    "created": c["ConsumerCreationTimestamp"].isoformat(),
                }
                for c in consumers
            ],
            sys.stdout,
            indent=2,
        )
        print()
        return 0
    assert name is not None
    if await deregister_consumer(client, stream, name):
        print(json.dumps({"deregistered": name, "stream": stream}))
        return 0
    print(
        f"kinesis-actors: error: no consumer named {name!r} on stream {stream!r}; "
        f"'kinesis-actors consumers list --stream {stream}' shows the registered ones",
        file=sys.stderr,
    )
    return 2
