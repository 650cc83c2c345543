"""HTTP/1.1 with keep-alive, for unary calls (httpx's pooled connections) and the admin API.

A connection answers its requests in order. While an answer is delayed (a stalled shard, an
injected delay) the connection stops reading, so pipelined requests wait their turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

from ._service import CUT, Reply, Result, Service

__all__ = ["Http1"]

_MAX_HEAD = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


def _head(status: int, content_type: str, length: int, keep_alive: bool) -> bytes:
    connection = "" if keep_alive else "Connection: close\r\n"
    return (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n"
        "x-amzn-RequestId: 00000000-0000-0000-0000-000000000000\r\n"
        f"{connection}\r\n"
    ).encode()


def _header(head: bytes, lowered: bytes, name: bytes) -> bytes | None:
    start = lowered.find(b"\r\n" + name + b":")
    if start < 0:
        return None
    start += len(name) + 3
    end = lowered.find(b"\r\n", start)
    return head[start : end if end >= 0 else len(head)].strip()


class Http1:
    """The HTTP/1.1 side of one connection (the owning protocol feeds it bytes)."""

    def __init__(self, service: Service, transport: asyncio.Transport) -> None:
        self._service = service
        self._transport = transport
        self._buffer = bytearray()
        self._busy = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._busy:
            self._process()

    def _process(self) -> None:
        buffer = self._buffer
        while not self._closed:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    self._fail(431, b"request head too large")
                return
            head = bytes(buffer[:end])
            lowered = head.lower()
            length_text = _header(head, lowered, b"content-length")
            length = int(length_text) if length_text else 0
            total = end + 4 + length
            if len(buffer) < total:
                return
            body = bytes(buffer[end + 4 : total])
            del buffer[:total]
            keep_alive = _header(lowered, lowered, b"connection") != b"close"
            line = head.split(b"\r\n", 1)[0].split(b" ")
            path = line[1] if len(line) > 1 else b"/"
            if path.startswith(b"/_"):
                self._write(self._admin(path, body), keep_alive)
                continue
            target = _header(head, lowered, b"x-amz-target") or b""
            operation = target.decode("latin-1").rpartition(".")[2]
            result = self._service.respond(operation, body)
            if not self._finish(result, keep_alive):
                return

    def _finish(self, result: Result, keep_alive: bool) -> bool:
        """Write a ready answer (True: go on), or wait for a pending one (False)."""
        if isinstance(result, Reply):
            self._write(result, keep_alive)
            return keep_alive
        if isinstance(result, str):  # CUT
            self.close()
            return False
        self._busy = True
        self._transport.pause_reading()
        self._task = asyncio.get_running_loop().create_task(self._later(result, keep_alive))
        return False

    async def _later(self, pending: Awaitable[Reply | str], keep_alive: bool) -> None:
        outcome = await pending
        self._busy = False
        self._task = None
        if self._closed:
            return
        if outcome == CUT or not isinstance(outcome, Reply):
            self.close()
            return
        self._write(outcome, keep_alive)
        if keep_alive:
            self._transport.resume_reading()
            self._process()

    def _write(self, reply: Reply, keep_alive: bool) -> None:
        if self._closed:
            return
        self._transport.write(
            _head(reply.status, reply.content_type, len(reply.body), keep_alive) + reply.body
        )
        if not keep_alive:
            self.close()

    def _admin(self, path: bytes, body: bytes) -> Reply:
        service = self._service
        document: Any
        try:
            if path == b"/_stats":
                document = service.stats()
            elif path == b"/_control":
                document = service.control(json.loads(body or b"{}"))
            elif path == b"/_ping":
                document = {"ok": True}
            else:
                return Reply(404, b'{"error":"no such admin path"}', "application/json")
        except (ValueError, TypeError, KeyError, RuntimeError) as exc:
            return Reply(400, json.dumps({"error": repr(exc)}).encode(), "application/json")
        return Reply(200, json.dumps(document).encode(), "application/json")

    def _fail(self, status: int, message: bytes) -> None:
        self._write(Reply(status, message, "text/plain"), keep_alive=False)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport.close()

    def connection_lost(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        if not self._busy:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if not self._busy and not self._closed:
            self._transport.resume_reading()
