"""``kinesis-actors local``: the embedded server in the foreground, until Ctrl-C."""

from __future__ import annotations

import json
import signal
import threading

from ..local import LocalKinesis


def run_local() -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalKinesis() as server:
        print(
            json.dumps(
                {
                    "endpoint_url": server.endpoint_url,
                    "tls_endpoint_url": server.tls_endpoint_url,
                    "region": server.region,
                    "credentials": list(server.credentials),
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
