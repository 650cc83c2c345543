"""A fault-injecting HTTP/1.1 proxy in front of the local Kinesis server.

The local server never throttles, never stalls and never drops a connection, so the tests
that need those faults put this proxy between the client and the server. It runs its own
asyncio loop in a thread, so it serves tests on either anyio backend.

``FaultProxy(upstream_port, decide)`` forwards every request unless ``decide(request)``
returns a fault: ``Cut()`` closes the connection after reading the request (the client sees
a dropped connection mid-request), ``Reply(status, body)`` answers in the server's stead
(throttling errors, 5xx), ``Delay(seconds)`` stalls before forwarding.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    target: str  # the operation, from X-Amz-Target ("PutRecords")
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        document: dict[str, object] = json.loads(self.body or b"{}")
        return document


@dataclass(frozen=True)
class Cut:
    """Close the connection without answering."""


@dataclass(frozen=True)
class Reply:
    """Answer instead of the server."""

    status: int
    body: bytes
    content_type: str = "application/x-amz-json-1.1"

    @classmethod
    def error(cls, code: str, message: str = "injected", status: int = 400) -> Reply:
        return cls(status, json.dumps({"__type": code, "message": message}).encode())


@dataclass(frozen=True)
class Delay:
    """Wait before forwarding."""

    seconds: float


Fault = Cut | Reply | Delay | None
Decide = Callable[[Request], Fault]


@dataclass
class ProxyStats:
    requests: int = 0
    forwarded: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    by_target: dict[str, int] = field(default_factory=dict)


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return head, headers, body


class FaultProxy:
    def __init__(self, upstream_port: int, decide: Decide | None = None) -> None:
        self.upstream_port = upstream_port
        self.decide: Decide = decide or (lambda request: None)
        self.stats = ProxyStats()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    def _count(self, name: str) -> None:
        self.stats.faults[name] = self.stats.faults.get(name, 0) + 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head, headers, body = await _read_message(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                target = headers.get("x-amz-target", "").rsplit(".", 1)[-1]
                self.stats.requests += 1
                self.stats.by_target[target] = self.stats.by_target.get(target, 0) + 1
                fault = self.decide(Request(target, headers, body))
                if isinstance(fault, Cut):
                    self._count("cut")
                    return
                if isinstance(fault, Reply):
                    self._count(f"reply-{fault.status}")
                    writer.write(
                        f"HTTP/1.1 {fault.status} Injected\r\n"
                        f"Content-Type: {fault.content_type}\r\n"
                        f"Content-Length: {len(fault.body)}\r\n\r\n".encode()
                        + fault.body
                    )
                    await writer.drain()
                    continue
                if isinstance(fault, Delay):
                    self._count("delay")
                    await asyncio.sleep(fault.seconds)
                if upstream is None:
                    upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                up_reader, up_writer = upstream
                up_writer.write(head + body)
                await up_writer.drain()
                response_head, _, response_body = await _read_message(up_reader)
                self.stats.forwarded += 1
                writer.write(response_head + response_body)
                await writer.drain()
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()
