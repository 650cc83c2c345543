"""One HTTP/2 request with a long streamed response, on a connection of its own.

Written on ``h2`` (sans-IO) and anyio sockets for SubscribeToShard, because the flow-control
decisions matter there and httpx/httpcore do not expose them:

- The receive window is advertised in SETTINGS (``SETTINGS_INITIAL_WINDOW_SIZE``). httpcore
  keeps the default 65,535 there and raises windows with WINDOW_UPDATE frames instead; a peer
  that honours only SETTINGS (the local test server does) then stalls every stream after
  49,152 bytes.
- The socket is read only when the caller asks for more data. With one connection per
  subscription, an unread subscription is pushed back by TCP itself and holds at most the
  socket buffers; no sibling shares its connection window (lesson 3, httpcore issue 943).
- Closing early sends RST_STREAM and GOAWAY, then half-closes the connection and discards
  what is still in flight until the server closes its side (bounded), so nothing is left
  half-read and the server sees an orderly end, not a reset (see :meth:`H2Stream.aclose`).
- Behind a proxy (``HTTPS_PROXY``, see ``_proxy``) the connection is an HTTP CONNECT tunnel
  through it, with TLS and HTTP/2 inside, as curl and httpx do.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSAttribute, TLSStream

from .. import errors
from ._proxy import Proxy, open_tunnel
from ._tls import transport_error

__all__ = ["H2Stream"]

log = logging.getLogger("kinesis_actors.client")

_READ_SIZE = 65536
_CLOSE_TIMEOUT = 5.0


def _require_h2(sock: anyio.abc.ByteStream, netloc: str, operation: str) -> None:
    if sock.extra(TLSAttribute.alpn_protocol, None) != "h2":
        raise errors.TransportError(
            f"{netloc} did not negotiate HTTP/2 (ALPN)", operation=operation
        )


async def _connect(
    host: str,
    port: int,
    ssl_context: ssl.SSLContext,
    proxy: Proxy | None,
    operation: str,
) -> anyio.abc.ByteStream:
    """A TLS connection to ``host:port``, directly or inside ``proxy``'s tunnel."""
    if proxy is None:
        return await anyio.connect_tcp(
            host, port, ssl_context=ssl_context, tls_standard_compatible=False
        )
    tunnel = await open_tunnel(proxy, host, port, operation=operation)
    try:
        return await TLSStream.wrap(
            tunnel, hostname=host, ssl_context=ssl_context, standard_compatible=False
        )
    except BaseException:
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await tunnel.aclose()
        raise


class H2Stream:
    """POST ``body`` to ``url`` over HTTP/2 and stream the response body.

    Use :meth:`open` (an async context manager). ``status`` and ``headers`` are known once
    it is open; :meth:`receive` returns the next chunk of the body, or ``b""`` at its end.
    """

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        connection: h2.connection.H2Connection,
        stream_id: int,
        read_timeout: float,
        operation: str,
    ) -> None:
        self._socket = stream
        self._h2 = connection
        self._stream_id = stream_id
        self._read_timeout = read_timeout
        self._operation = operation
        self._chunks: list[bytes] = []  # at most what one socket read decodes to
        self._ended = False
        self.status = 0
        self.headers: dict[str, str] = {}
        alpn = stream.extra(TLSAttribute.alpn_protocol, None)
        #: The protocol negotiated with the server (ALPN), as httpx names it.
        self.http_version = "HTTP/2" if alpn == "h2" else f"ALPN {alpn!r}"

    @classmethod
    async def open(
        cls,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        ssl_context: ssl.SSLContext | None,
        connect_timeout: float,
        read_timeout: float,
        window: int,
        operation: str,
        proxy: Proxy | None = None,
    ) -> Self:
        """Connect (through ``proxy``'s tunnel if given), send the request, and wait for the
        response headers."""
        parts = urlsplit(url)
        if parts.scheme != "https" or parts.hostname is None:
            raise errors.ConfigError(
                f"{operation} needs an https:// endpoint (HTTP/2 over TLS), got {url!r}"
            )
        if ssl_context is None:
            raise errors.ConfigError(f"{operation}: no TLS context for {url!r}")
        port = parts.port or 443
        try:
            with anyio.fail_after(connect_timeout):
                sock = await _connect(parts.hostname, port, ssl_context, proxy, operation)
        except (OSError, TimeoutError, anyio.BrokenResourceError) as exc:
            # ssl.SSLCertVerificationError is an OSError: permanent, CertificateError.
            raise transport_error(exc, operation, proxy) from exc
        try:
            _require_h2(sock, parts.netloc, operation)
            connection = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=True, header_encoding=None)
            )
            connection.local_settings = h2.settings.Settings(
                client=True,
                initial_values={
                    h2.settings.SettingCodes.ENABLE_PUSH: 0,
                    h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1,
                    h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window,
                },
            )
            connection.initiate_connection()
            if window > 65535:
                connection.increment_flow_control_window(window - 65535)
            stream_id = connection.get_next_available_stream_id()
            request_headers = [
                (b":method", b"POST"),
                (b":scheme", b"https"),
                (b":authority", parts.netloc.encode()),
                (b":path", (parts.path or "/").encode()),
            ]
            request_headers.extend(
                (name.lower().encode(), value.encode())
                for name, value in headers.items()
                if name.lower() not in ("host", "connection", "transfer-encoding")
            )
            connection.send_headers(stream_id, request_headers)
            # Request bodies here are a few hundred bytes: far below the initial window and
            # the smallest frame size a peer may impose.
            connection.send_data(stream_id, body, end_stream=True)
            self = cls(sock, connection, stream_id, read_timeout, operation)
            await self._flush()
            while not self.status:
                await self._read()
        except BaseException:
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                await sock.aclose()
            raise
        return self

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
        while not self._chunks:
            if self._ended:
                return b""
            await self._read()
        return self._chunks.pop(0)

    async def read_all(self) -> bytes:
        """The rest of the body (for error responses, which are small)."""
        parts = []
        while chunk := await self.receive():
            parts.append(chunk)
        return b"".join(parts)

    async def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data:
            try:
                await self._socket.send(data)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise errors.TransportError(
                    f"{type(exc).__name__}: {exc}", operation=self._operation
                ) from exc

    async def _read(self) -> None:
        try:
            with anyio.fail_after(self._read_timeout):
                data = await self._socket.receive(_READ_SIZE)
        except TimeoutError as exc:
            raise errors.TransportError(
                f"ReadTimeout: no data for {self._read_timeout} s", operation=self._operation
            ) from exc
        except anyio.EndOfStream as exc:
            raise errors.TransportError(
                "RemoteProtocolError: the server closed the connection mid-stream",
                operation=self._operation,
            ) from exc
        except (OSError, anyio.BrokenResourceError) as exc:
            raise errors.TransportError(
                f"{type(exc).__name__}: {exc}", operation=self._operation
            ) from exc
        for event in self._h2.receive_data(data):
            self._handle(event)
        await self._flush()

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            for name, value in event.headers or ():
                key = name.decode() if isinstance(name, bytes) else name
                text = value.decode() if isinstance(value, bytes) else value
                if key == ":status":
                    self.status = int(text)
                else:
                    self.headers[key] = text
        elif isinstance(event, h2.events.DataReceived):
            if event.data:
                self._chunks.append(event.data)
            # Credit is returned as soon as bytes leave the socket: memory is bounded by
            # reading the socket only on demand, not by the window.
            self._h2.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self._ended = True
        elif isinstance(event, h2.events.StreamReset):
            raise errors.TransportError(
                f"RemoteProtocolError: stream reset by the server (error {event.error_code})",
                operation=self._operation,
            )
        elif isinstance(event, h2.events.ConnectionTerminated) and not self._ended:
            raise errors.TransportError(
                f"RemoteProtocolError: connection terminated (GOAWAY {event.error_code})",
                operation=self._operation,
            )

    async def aclose(self) -> None:
        """Reset the stream if it has not ended, then close the connection (bounded).

        A stream closed before its end still has bytes in flight (a backpressured subscription
        has megabytes: the server keeps writing until it learns of the reset). Closing a socket
        with unread bytes makes the kernel abort the connection (TCP RST), and the server's next
        read then fails instead of ending: kinesis-mock (http4s ember) never tears such a
        connection down, so its subscription keeps the shard's lease and every resubscription
        gets ResourceInUse until the server's 5-minute cap. So after RST_STREAM and GOAWAY the
        connection is half-closed and read to its end, discarding, until the server closes it
        (at most ``_CLOSE_TIMEOUT``); only then is the socket closed.
        """
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            try:
                ended = self._ended
                if not ended:
                    self._h2.reset_stream(self._stream_id, h2.errors.ErrorCodes.CANCEL)
                self._h2.close_connection()
                await self._socket.send(self._h2.data_to_send())
                if not ended and await self._send_eof():
                    await self._discard_until_closed()
            except Exception:  # best effort: the socket closes below anyway
                log.debug("closing an HTTP/2 stream cleanly failed", exc_info=True)
        with anyio.CancelScope(shield=True):
            await self._socket.aclose()

    async def _send_eof(self) -> bool:
        """Half-close the connection (TCP FIN); False if the stream cannot."""
        try:
            await self._socket.send_eof()
        except NotImplementedError:
            # TLS streams cannot (anyio): shut the TCP socket's sending side under them.
            raw = self._socket.extra(SocketAttribute.raw_socket, None)
            if raw is None:
                return False
            raw.shutdown(socket.SHUT_WR)
        return True

    async def _discard_until_closed(self) -> None:
        try:
            while await self._socket.receive(_READ_SIZE):
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass  # the server closed (or reset) its side: nothing is left in flight
