"""``kinesis-actors local``: the embedded server in the foreground, until Ctrl-C.

Streams asked for with ``--create-stream NAME[:SHARDS]`` are created, and ACTIVE, before the
line with the endpoints is printed: a script that waits for that line can use them at once.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading

import anyio

from ..client import StreamRef
from ..errors import ConfigError
from ..local import LocalKinesis

__all__ = ["run_local", "stream_spec"]

#: How long creating the streams at start may take (the local server takes ~0.1 s each).
_CREATE_BOUND = 60.0


def stream_spec(text: str) -> tuple[str, int]:
    """``NAME`` or ``NAME:SHARDS`` (one shard if not given), checked as argparse wants."""
    name, _, shards = text.strip().partition(":")
    try:
        StreamRef.parse(name, option="--create-stream")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(
            exc.message.removeprefix("--create-stream").lstrip(": ")
        ) from None
    count = int(shards) if shards.isdigit() else 0 if shards else 1
    if count <= 0:
        raise argparse.ArgumentTypeError(
            f"expected NAME or NAME:SHARDS with SHARDS a positive whole number, got {text!r}"
        )
    return name, count


async def _create(server: LocalKinesis, streams: dict[str, int]) -> None:
    with anyio.fail_after(_CREATE_BOUND):
        async with server.client(tls=False) as client:
            for name, shards in streams.items():
                await client.create_stream(name, shards)


def run_local(streams: dict[str, int] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM (exit 0), or until the server dies (exit 1)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalKinesis() as server:
        if streams:
            anyio.run(_create, server, streams)
        print(
            json.dumps(
                {
                    "endpoint_url": server.endpoint_url,
                    "tls_endpoint_url": server.tls_endpoint_url,
                    "region": server.region,
                    "credentials": list(server.credentials),
                    "streams": dict(streams or {}),
                }
            ),
            flush=True,
        )
        try:
            while not stop.wait(0.5):
                if not server.running:
                    return 1
        except KeyboardInterrupt:
            pass
    return 0
