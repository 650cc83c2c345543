"""One SubscribeToShard request's stream: its response and its streamed body.

The stream lives on a connection it may share with other subscriptions (``_h2conn``, pooled
by ``_h2pool``). Reading it takes bytes the connection has received for it and hands their
flow-control credit back to the server, so a subscription that is not read holds at most its
stream window (``ClientConfig.subscribe_window``) and never its siblings' share.

Closing a stream before its end resets it (once: ``_h2flow.ResetGuard``); closing the last
stream of a connection closes the connection in order (see ``MuxConnection.aclose``).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Self

import anyio

from ._h2conn import CLOSE_TIMEOUT
from ._h2pool import H2Pool

if TYPE_CHECKING:
    from ._h2conn import MuxConnection
    from ._proxy import Proxy

__all__ = ["H2Stream"]

#: Closing a stream, the connection's orderly close included, takes at most this long.
_CLOSE_TIMEOUT = CLOSE_TIMEOUT


class H2Stream:
    """POST a request over HTTP/2 and stream the response body.

    Opened on a pool's connection by :meth:`on` or, on a connection of its own, by
    :meth:`open`; an async context manager. ``status`` and ``headers`` are known once it is
    open; :meth:`receive` returns the next chunk of the body, or ``b""`` at its end.
    """

    def __init__(
        self,
        pool: H2Pool,
        connection: MuxConnection,
        stream_id: int,
        status: int,
        headers: dict[str, str],
    ) -> None:
        self._pool = pool
        self._connection = connection
        self._stream_id = stream_id
        self._closed = False
        self.status = status
        self.headers = headers
        #: The protocol negotiated with the server (ALPN), as httpx names it.
        self.http_version = connection.http_version

    @classmethod
    async def open(
        cls,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        ssl_context: ssl.SSLContext,
        connect_timeout: float,
        read_timeout: float,
        window: int,
        operation: str,
        proxy: Proxy | None = None,
    ) -> H2Stream:
        """Connect (through ``proxy``'s tunnel if given) on a connection of its own, send the
        request, and wait for the response headers (the connection closes with the stream:
        a pool of one slot)."""
        pool = H2Pool(
            url,
            ssl_context=ssl_context,
            proxy=proxy,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            window=window,
            subscriptions_per_connection=1,
            operation=operation,
        )
        return await cls.on(pool, headers, body)

    @classmethod
    async def on(cls, pool: H2Pool, headers: Mapping[str, str], body: bytes) -> H2Stream:
        """Send the request on a slot of ``pool`` (a connection it shares with others, or a
        new one) and wait for the response headers; closing the stream gives the slot back."""
        opened = await pool.open_stream(headers, body)
        return cls(pool, opened.connection, opened.stream_id, opened.status, opened.headers)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def receive(self) -> bytes:
        """The next chunk of the response body; ``b""`` once the stream has ended."""
        return await self._connection.receive(self._stream_id)

    async def read_all(self) -> bytes:
        """The rest of the body (for error responses, which are small)."""
        parts = []
        while chunk := await self.receive():
            parts.append(chunk)
        return b"".join(parts)

    async def aclose(self) -> None:
        """Reset the stream if it has not ended and give its slot back (bounded, shielded);
        the last stream of a connection closes it in order."""
        if self._closed:
            return
        self._closed = True
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await self._pool.release(self._connection, self._stream_id)
