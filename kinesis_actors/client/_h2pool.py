"""SubscribeToShard streams multiplexed over a few HTTP/2 connections.

One connection per subscription costs a file descriptor, a TLS session and its buffers per
shard: under ``ulimit -n 1024`` a 1,024-shard EFO consumer ran out of descriptors. Here a
subscription takes a free slot on a connection that has one (at most
``ClientConfig.subscriptions_per_connection`` per connection), and a connection is opened
only when none has. Slots are reserved before connecting, so a thousand shards subscribing
at once open ``ceil(1000 / subscriptions_per_connection)`` connections, not a thousand.

Isolation between the subscriptions of one connection is flow control's job (``_h2flow``):
each stream's window bounds what an unread subscription holds, and the connection window
covers all of them, so a stalled shard cannot stop its siblings (FLINK-34071). A connection
that fails fails only its own streams; their subscriptions resubscribe, on another connection
or a new one. A connection is closed when its last stream is.
"""

from __future__ import annotations

import copy
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

import anyio

from .. import errors
from ._h2conn import CLOSE_TIMEOUT, MuxConnection, Target
from ._proxy import Proxy

__all__ = ["H2Pool", "H2PoolStatistics", "OpenedStream"]

_SKIPPED_HEADERS = ("host", "connection", "transfer-encoding")


class OpenedStream(NamedTuple):
    """A stream the pool opened: its connection, its id there, and the response's status and
    headers. :class:`~._h2stream.H2Stream` wraps it and gives its slot back on close."""

    connection: MuxConnection
    stream_id: int
    status: int
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class H2PoolStatistics:
    """A snapshot of the pool: the connections taking new streams, and the streams open (or
    opening) on them."""

    connections: int
    streams: int


class H2Pool:
    """Opens streams to one https endpoint on shared HTTP/2 connections (see module doc)."""

    def __init__(
        self,
        url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        proxy: Proxy | None,
        connect_timeout: float,
        read_timeout: float,
        window: int,
        subscriptions_per_connection: int,
        operation: str = "SubscribeToShard",
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "https" or parts.hostname is None:
            raise errors.ConfigError(
                f"{operation} needs an https:// endpoint (HTTP/2 over TLS), got {url!r}"
            )
        if ssl_context is None:  # an http:// client builds none (see ``_tls``)
            raise errors.ConfigError(f"{operation}: no TLS context for {url!r}")
        self._target = Target(
            host=parts.hostname,
            port=parts.port or 443,
            netloc=parts.netloc,
            ssl_context=ssl_context,
            proxy=proxy,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            window=window,
            subscriptions=subscriptions_per_connection,
            operation=operation,
        )
        self._path = (parts.path or "/").encode()
        # Bounded by ceil(streams / subscriptions_per_connection) plus connections closing.
        self._connections: list[MuxConnection] = []

    def statistics(self) -> H2PoolStatistics:
        """How many connections take new streams, and how many streams they carry (a failed
        connection is left out: it closes as its streams are closed)."""
        usable = [c for c in self._connections if c.usable]
        return H2PoolStatistics(connections=len(usable), streams=sum(c.reserved for c in usable))

    async def open_stream(self, headers: Mapping[str, str], body: bytes) -> OpenedStream:
        """POST ``body`` with ``headers`` on a connection with a free slot; the stream, once
        its response headers have arrived (its slot is the caller's to :meth:`release`)."""
        while True:
            connection, new = self._reserve()
            stream_id = 0
            try:
                if new:
                    await self._connect(connection)
                else:
                    await connection.connected.wait()
                    if connection.abandoned:
                        # Its connecting subscriber was cancelled, not refused: not this
                        # one's failure. The slot goes back and another connection is tried.
                        with anyio.CancelScope(shield=True):
                            await self.release(connection, 0)
                        continue
                    self._check_connected(connection)
                stream_id = connection.begin(self._request_headers(headers), body)
                await connection.flush()
                status, response_headers = await connection.response(stream_id)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self.release(connection, stream_id)
                raise
            return OpenedStream(connection, stream_id, status, response_headers)

    async def _connect(self, connection: MuxConnection) -> None:
        try:
            await connection.connect()
        except BaseException as exc:
            connection.connect_failed(exc)
            raise
        finally:
            connection.connected.set()

    def _check_connected(self, connection: MuxConnection) -> None:
        """Subscribers that waited for another's connect fail with it (a copy each)."""
        if connection.failure is not None:
            raise copy.copy(connection.failure)

    def _reserve(self) -> tuple[MuxConnection, bool]:
        """A slot on a connection (and whether the caller must connect it); no await, so two
        subscribers never both see the last free slot."""
        for connection in self._connections:
            if connection.usable and connection.reserved < connection.slots():
                connection.reserved += 1
                return connection, False
        connection = MuxConnection(self._target)
        connection.reserved = 1
        self._connections.append(connection)
        return connection, True

    def _request_headers(self, headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
        request = [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", self._target.netloc.encode()),
            (b":path", self._path),
        ]
        request.extend(
            (name.lower().encode(), value.encode())
            for name, value in headers.items()
            if name.lower() not in _SKIPPED_HEADERS
        )
        return request

    async def release(self, connection: MuxConnection, stream_id: int) -> None:
        """Give back a stream's slot (resetting the stream if it has not ended); close the
        connection if it was the last. Bounded: see ``H2Stream.aclose``."""
        try:
            if stream_id:
                await connection.release(stream_id)
        finally:
            connection.reserved -= 1
            if connection in self._connections and (
                connection.reserved == 0 or not connection.usable
            ):
                self._connections.remove(connection)  # no new stream goes there
            if connection.reserved == 0:
                await connection.aclose()

    async def aclose(self) -> None:
        """Close every connection (their streams fail), concurrently and bounded."""
        connections, self._connections = self._connections, []
        with anyio.move_on_after(CLOSE_TIMEOUT + 0.5, shield=True):
            async with anyio.create_task_group() as tg:
                for connection in connections:
                    tg.start_soon(connection.aclose)
