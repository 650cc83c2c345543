"""The server: listeners on loopback, one asyncio loop, run in a process or a thread.

``python -m benchmarks.loadtarget._server CONFIG_JSON`` serves until its stdin closes (the
parent went away) or it is terminated; it prints one JSON line with its ports when ready.
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ._config import TargetConfig
from ._h2 import H2
from ._http1 import Http1
from ._service import Service

__all__ = ["Connection", "serve"]


class Connection(asyncio.Protocol):
    """One accepted connection: HTTP/1.1, or HTTP/2 when TLS negotiated ``h2``."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._handler: Http1 | H2 | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        counts = self._service.connections
        counts["opened"] += 1
        counts["open"] += 1
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            counts["tls"] += 1
            if ssl_object.selected_alpn_protocol() == "h2":
                counts["h2"] += 1
                self._handler = H2(self._service, transport)
                return
        self._handler = Http1(self._service, transport)

    def data_received(self, data: bytes) -> None:
        if self._handler is not None:
            self._handler.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._service.connections["open"] -= 1
        if self._handler is not None:
            self._handler.connection_lost()

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()


def _tls_context(config: TargetConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(config.cert_file, config.key_file)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


async def serve(
    config: TargetConfig,
    ready: Callable[[dict[str, Any]], None],
    stop: asyncio.Event,
    cpu_clock: Callable[[], float] = time.process_time,
) -> None:
    """Listen on free loopback ports, call ``ready`` with them, and serve until ``stop``."""
    service = Service(config, cpu_clock)
    loop = asyncio.get_running_loop()
    plain = await loop.create_server(lambda: Connection(service), "127.0.0.1", 0, backlog=1024)
    servers = [plain]
    ports: dict[str, Any] = {"port": plain.sockets[0].getsockname()[1], "tls_port": None}
    if config.tls:
        secure = await loop.create_server(
            lambda: Connection(service), "127.0.0.1", 0, ssl=_tls_context(config), backlog=1024
        )
        servers.append(secure)
        ports["tls_port"] = secure.sockets[0].getsockname()[1]
    ready(ports)
    try:
        await stop.wait()
    finally:
        for server in servers:
            server.close()


def run_in_thread(
    config: TargetConfig,
) -> tuple[threading.Thread, dict[str, Any], Callable[[], None]]:
    """Serve from a thread with its own loop; returns (thread, ports, stop)."""
    started = threading.Event()
    box: dict[str, Any] = {}

    def main() -> None:
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        box["stop"] = lambda: loop.call_soon_threadsafe(stop.set)

        def ready(ports: dict[str, Any]) -> None:
            box["ports"] = {**ports, "native_id": threading.get_native_id()}
            started.set()

        try:
            loop.run_until_complete(serve(config, ready, stop, time.thread_time))
        except BaseException as exc:
            box["error"] = exc
            started.set()
            raise
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="kinesis-load-target", daemon=True)
    thread.start()
    if not started.wait(30) or "error" in box:
        raise RuntimeError(f"the load target did not start: {box.get('error')!r}")
    return thread, box["ports"], box["stop"]


def main(argv: list[str]) -> None:
    config = TargetConfig.from_dict(json.loads(argv[1]))
    gc.freeze()  # what is loaded now is never garbage; keep the collector off it

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)

        def watch_stdin() -> None:
            sys.stdin.buffer.read()
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=watch_stdin, daemon=True).start()

        def ready(ports: dict[str, Any]) -> None:
            sys.stdout.write(json.dumps(ports) + "\n")
            sys.stdout.flush()

        await serve(config, ready, stop)

    asyncio.run(run())


if __name__ == "__main__":
    main(sys.argv)
