"""A fault-injecting HTTP/1.1 proxy in front of the local Kinesis server.

The local server never throttles, never stalls and never drops a connection, so the tests
that need those faults put this proxy between the client and the server. It runs its own
asyncio loop in a thread, so it serves tests on either anyio backend.

``FaultProxy(upstream_port, decide)`` forwards every request unless ``decide(request)``
returns a fault: ``Cut()`` closes the connection after reading the request (the client sees
a dropped connection mid-request), ``Reply(status, body)`` answers in the server's stead
(throttling errors, 5xx), ``Delay(seconds)`` stalls before forwarding (with ``reply=True``:
holds the answer back), and
``RejectRecords(indices)`` makes a PutRecords call partially fail the way the service does: the
other records are forwarded (the request body is rewritten; the local server does not check
signatures) and the answer merges their results with per-record ``ErrorCode`` entries.
``LoseReply()`` forwards the request and closes the connection once the server has answered,
without passing the answer on: the write landed, and the client cannot know it (the fault a
conditional write's retry meets). ``Rewrite(transform)`` forwards the request and replaces the
server's answer body with ``transform(body)`` (a truncated reply, a field removed, a record
garbled) under the server's status. ``GARBLED_BODIES`` are the 2xx bodies a broken proxy or
a cut connection produces.
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
    """Wait before forwarding; with ``reply``, forward at once and hold the answer back
    instead (the request has landed, its reply is still on its way)."""

    seconds: float
    reply: bool = False


@dataclass(frozen=True)
class RejectRecords:
    """Fail these PutRecords entries (by index) with ``code``; forward the others."""

    indices: frozenset[int]
    code: str = "ProvisionedThroughputExceededException"
    delay: float = 0.0  # a slow server that also throttles


@dataclass(frozen=True)
class LoseReply:
    """Forward, let the server answer, then close the connection without passing it on."""


@dataclass(frozen=True)
class Rewrite:
    """Forward, then answer with ``transform(server's body)`` under the server's status."""

    transform: Callable[[bytes], bytes]


#: 2xx bodies that cannot be believed: empty, truncated JSON, not JSON, JSON but no object.
GARBLED_BODIES: dict[str, bytes] = {
    "empty": b"",
    "truncated": b'{"Records": [{"Data": "aGVsbG8=", "Seq',
    "html": b"<html><body>502 Bad Gateway</body></html>",
    "not-an-object": b"[]",
}


def garbled(kind: str) -> Reply:
    """A 200 whose body is one of :data:`GARBLED_BODIES`."""
    return Reply(200, GARBLED_BODIES[kind])


Fault = Cut | Reply | Delay | RejectRecords | Rewrite | LoseReply | None
Decide = Callable[[Request], Fault]


@dataclass
class ProxyStats:
    requests: int = 0
    forwarded: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    by_target: dict[str, int] = field(default_factory=dict)
    rejected_records: int = 0


def _with_length(head: bytes, length: int) -> bytes:
    lines = head.decode("latin-1").split("\r\n")
    lines = [
        f"Content-Length: {length}" if line.lower().startswith("content-length:") else line
        for line in lines
    ]
    return "\r\n".join(lines).encode("latin-1")


def _merge(total: int, rejected: list[int], code: str, forwarded: list[dict[str, object]]) -> bytes:
    """A PutRecords answer: ``forwarded`` results in order, ``code`` at the rejected indices."""
    results: list[dict[str, object]] = []
    passed = iter(forwarded)
    failed = 0
    for index in range(total):
        if index in rejected:
            results.append({"ErrorCode": code, "ErrorMessage": "Rate exceeded (injected)"})
            failed += 1
        else:
            result = next(passed)
            if result.get("ErrorCode"):
                failed += 1
            results.append(result)
    return json.dumps({"FailedRecordCount": failed, "Records": results}).encode()


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

    def _reply(self, writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status} OK\r\nContent-Type: application/x-amz-json-1.1\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

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
                    if not fault.reply:
                        await asyncio.sleep(fault.seconds)
                rejected: list[int] = []
                if isinstance(fault, RejectRecords):
                    if fault.delay:
                        await asyncio.sleep(fault.delay)
                    records = json.loads(body)["Records"]
                    rejected = sorted(i for i in fault.indices if 0 <= i < len(records))
                    self._count("rejected-records")
                    self.stats.rejected_records += len(rejected)
                    if len(rejected) == len(records):
                        self._reply(writer, 200, _merge(len(records), rejected, fault.code, []))
                        await writer.drain()
                        continue
                    kept = [r for i, r in enumerate(records) if i not in set(rejected)]
                    document = json.loads(body)
                    document["Records"] = kept
                    body = json.dumps(document).encode()
                    head = _with_length(head, len(body))
                if upstream is None:
                    upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                up_reader, up_writer = upstream
                up_writer.write(head + body)
                await up_writer.drain()
                response_head, _, response_body = await _read_message(up_reader)
                self.stats.forwarded += 1
                if isinstance(fault, Delay) and fault.reply:
                    await asyncio.sleep(fault.seconds)
                if isinstance(fault, LoseReply):
                    self._count("lost-reply")
                    return
                if isinstance(fault, Rewrite):
                    self._count("rewrite")
                    new_body = fault.transform(response_body)
                    writer.write(_with_length(response_head, len(new_body)) + new_body)
                elif isinstance(fault, RejectRecords) and response_head.startswith(b"HTTP/1.1 200"):
                    results = json.loads(response_body)["Records"]
                    total = len(results) + len(rejected)
                    self._reply(writer, 200, _merge(total, rejected, fault.code, results))
                else:
                    writer.write(response_head + response_body)
                await writer.drain()
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()
