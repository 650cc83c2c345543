"""A lean pool of HTTP/1.1 keep-alive connections for unary calls, on anyio streams.

Why not httpx: measured on the load target (one GetRecords of an empty shard, 3,000 calls in
turn, this process's CPU), an exchange through httpx costs 1,170 µs, through httpcore alone
710 µs, and a plain send and receive on an anyio stream 85 µs; with 256 callers waiting,
httpcore's pool also walks every queued request on every connection event (quadratic in the
waiters: 3.2 ms a call at 256 callers, 4.4 ms at 1,024). A unary call needs little of what
they offer: one POST, a reply framed by ``Content-Length`` (or chunked, or the connection's
end), keep-alive. So this module does that and nothing else:

- The gate: at most ``max_connections`` callers are inside the pool at once (an anyio
  semaphore); the others wait at the gate, each in O(1), for at most ``pool_timeout``. A
  caller inside takes an idle connection (the most recently used: the extras expire) or
  opens one, so the pool never holds more connections than the gate lets callers in.
- Deadlines: ``connect_timeout`` bounds opening a connection (TCP, the proxy's tunnel, TLS),
  ``write_timeout`` sending the request, ``read_timeout`` each wait for the reply's bytes.
- Bounds: a reply head of at most 64 KiB, a body of at most ``MAX_BODY`` bytes (a GetRecords
  reply holds at most 10 MiB of data, 13.4 MB in base64).
- A connection is reused only after a complete, well-framed reply that did not ask to close,
  and only if it is idle for less than ``KEEPALIVE_EXPIRY`` and its socket has nothing to
  read (a server that closed it, or sent something unasked, makes it readable). Any failure
  or cancellation in the middle of an exchange closes it.
- Behind an HTTP proxy (``_proxy``): an ``https://`` endpoint is reached through a CONNECT
  tunnel with TLS inside; an ``http://`` one by sending the request to the proxy with the
  absolute URL, as curl and httpx do.

Every failure leaves as a typed :class:`~kinesis_actors.errors.TransportError` (a
:class:`~kinesis_actors.errors.CertificateError` for a certificate that fails verification),
through ``_tls.transport_error``. HTTP/2 for unary calls (``ClientConfig.http2``) stays on
httpx; SubscribeToShard has ``_h2stream``.
"""

from __future__ import annotations

import select
import ssl
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSStream

from .. import errors
from ._proxy import Proxy, open_tunnel
from ._signing import signed_host
from ._tls import certificate_failure, transport_error

__all__ = [
    "KEEPALIVE_EXPIRY",
    "MAX_BODY",
    "ExchangeTimeout",
    "Http1Pool",
    "ProtocolError",
    "Reply",
]

#: The largest reply body accepted (a GetRecords reply is at most about 13.4 MB).
MAX_BODY = 64 * 1024 * 1024
#: The longest reply head (status line and headers) accepted.
MAX_HEAD = 64 * 1024
#: How long an idle connection is kept. Below Node's default keep-alive timeout (5 s, the
#: local test server's), so a connection is not reused just as its server closes it.
KEEPALIVE_EXPIRY = 4.0
_CLOSE_TIMEOUT = 5.0
_READ_SIZE = 262144
_MAX_TRAILERS = 64


class ProtocolError(Exception):
    """The server's reply is not well-formed HTTP/1.1 (or breaks one of our bounds)."""


class ExchangeTimeout(ProtocolError):
    """The request was not sent, or the reply's bytes did not come, in time."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply: its status, its headers (names lower-cased; repeated ones joined with
    ``", "``) and its whole body (decompressed if the server compressed it)."""

    status: int
    headers: Mapping[str, str]
    body: bytes


def parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """``(status, headers, keeps_alive_by_default)`` of a reply head (without its blank
    line). Sans-IO. Raises :class:`ProtocolError` for anything that is not HTTP/1.x."""
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"not an HTTP/1.1 reply: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name[-1:] in b" \t" or line[:1] in b" \t":
            raise ProtocolError(f"a malformed header line: {line[:80]!r}")
        key = name.decode("latin-1").lower()
        text = value.strip(b" \t").decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return int(code), headers, version == b"HTTP/1.1"


def content_length(headers: Mapping[str, str]) -> int | None:
    """The body's length by ``Content-Length`` (repeats must agree), or None without one."""
    value = headers.get("content-length")
    if value is None:
        return None
    values = {part.strip() for part in value.split(",")}
    if len(values) != 1 or not (length := values.pop()).isdigit():
        raise ProtocolError(f"a bad Content-Length: {value[:80]!r}")
    return int(length)


def decoded(body: bytes, encoding: str) -> bytes:
    """``body`` decompressed per ``Content-Encoding`` (gzip, deflate), bounded by MAX_BODY.
    We never ask for compression; a server that sends it anyway is still understood."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise ProtocolError(f"an unsupported Content-Encoding: {encoding[:40]!r}")
    wbits = zlib.MAX_WBITS | (16 if encoding != "deflate" else 0)
    try:
        decompressor = zlib.decompressobj(wbits)
        out = decompressor.decompress(body, MAX_BODY + 1)
    except zlib.error:
        if encoding != "deflate":
            raise ProtocolError("a body that is not valid gzip") from None
        try:  # "deflate" is sometimes sent raw, without its zlib header
            decompressor = zlib.decompressobj(-zlib.MAX_WBITS)
            out = decompressor.decompress(body, MAX_BODY + 1)
        except zlib.error:
            raise ProtocolError("a body that is not valid deflate") from None
    if len(out) > MAX_BODY:
        raise ProtocolError(f"a decompressed body larger than {MAX_BODY} bytes")
    return out


class _Connection:
    """One keep-alive connection, used by one caller at a time (the one that took it)."""

    __slots__ = ("_buffer", "_scope", "_stream", "_timeout", "idle_since", "socket")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._scope: anyio.CancelScope | None = None
        self._timeout = 0.0
        self.socket = stream.extra(SocketAttribute.raw_socket, None)
        self.idle_since = 0.0

    def reusable(self, now: float) -> bool:
        """Whether this idle connection may carry another request: not expired, and its
        socket has nothing to read (an end of stream, or bytes nobody asked for)."""
        if now - self.idle_since >= KEEPALIVE_EXPIRY or self._buffer or self.socket is None:
            return False
        try:
            readable, _, _ = select.select([self.socket], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    async def close(self) -> None:
        await anyio.aclose_forcefully(self._stream)

    async def _fill(self, *, end_ok: bool = False) -> bool:
        """Read more into the buffer, waiting at most ``read_timeout`` for it; False at the
        stream's end when ``end_ok`` (a body that runs to the end of the connection)."""
        assert self._scope is not None
        self._scope.deadline = anyio.current_time() + self._timeout
        try:
            data = await self._stream.receive(_READ_SIZE)
        except anyio.EndOfStream:
            if end_ok:
                return False
            raise ProtocolError("the server closed the connection before its reply ended") from None
        self._buffer += data
        return True

    async def exchange(
        self, request: bytes, body: bytes, *, write_timeout: float, read_timeout: float
    ) -> tuple[Reply, bool]:
        """Send ``request`` (the head, and the body unless it is in ``body``) and read the
        reply: ``(reply, whether the connection may be reused)``."""
        phase = "WriteTimeout: the request was not sent within"
        with anyio.CancelScope(deadline=anyio.current_time() + write_timeout) as scope:
            self._scope, self._timeout = scope, read_timeout
            await self._stream.send(request)
            if body:
                await self._stream.send(body)
            phase = "ReadTimeout: no reply bytes for"
            result = await self._read_reply()
        self._scope = None
        if scope.cancelled_caught:
            timeout = read_timeout if phase.startswith("Read") else write_timeout
            raise ExchangeTimeout(f"{phase} {timeout:.3g} s")
        return result

    async def _read_reply(self) -> tuple[Reply, bool]:
        buffer = self._buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            while end < 0:
                if len(buffer) > MAX_HEAD:
                    raise ProtocolError(f"no end of the reply head within {MAX_HEAD} bytes")
                await self._fill()
                end = buffer.find(b"\r\n\r\n")
            if end > MAX_HEAD:
                raise ProtocolError(f"a reply head longer than {MAX_HEAD} bytes")
            status, headers, keep_alive = parse_head(bytes(buffer[:end]))
            del buffer[: end + 4]
            if 100 <= status < 200 and status != 101:
                continue  # an interim reply (100 Continue): the real one follows
            break
        if status == 101:
            raise ProtocolError("the server switched protocols")
        connection = headers.get("connection", "").lower()
        reusable = ("close" not in connection) and (keep_alive or "keep-alive" in connection)
        if status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = await self._read_chunked()
        else:
            length = content_length(headers)
            if length is None:
                body, reusable = await self._read_to_end(), False
            else:
                if length > MAX_BODY:
                    raise ProtocolError(f"a reply body of {length} bytes (at most {MAX_BODY})")
                while len(buffer) < length:
                    await self._fill()
                body = bytes(buffer[:length])
                del buffer[:length]
        if buffer:
            reusable = False  # bytes past the reply's end: nobody asked for them
        encoding = headers.get("content-encoding")
        if encoding is not None:
            body = decoded(body, encoding)
        return Reply(status, headers, body), reusable

    async def _read_line(self) -> bytes:
        buffer = self._buffer
        while (end := buffer.find(b"\r\n")) < 0:
            if len(buffer) > 4096:
                raise ProtocolError("a chunk size line longer than 4096 bytes")
            await self._fill()
        line = bytes(buffer[:end])
        del buffer[: end + 2]
        return line

    async def _read_chunked(self) -> bytes:
        buffer, parts, total = self._buffer, [], 0
        while True:
            line = await self._read_line()
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"a bad chunk size: {line[:40]!r}") from None
            if size == 0:
                break
            total += size
            if size < 0 or total > MAX_BODY:
                raise ProtocolError(f"a chunked reply body over {MAX_BODY} bytes")
            while len(buffer) < size + 2:
                await self._fill()
            if buffer[size : size + 2] != b"\r\n":
                raise ProtocolError("a chunk not followed by CRLF")
            parts.append(bytes(buffer[:size]))
            del buffer[: size + 2]
        for _ in range(_MAX_TRAILERS):
            if not await self._read_line():
                return b"".join(parts)
        raise ProtocolError(f"more than {_MAX_TRAILERS} trailer lines")

    async def _read_to_end(self) -> bytes:
        buffer = self._buffer
        while await self._fill(end_ok=True):
            if len(buffer) > MAX_BODY:
                raise ProtocolError(f"a reply body over {MAX_BODY} bytes")
        body = bytes(buffer)
        buffer.clear()
        return body


class Http1Pool:
    """POSTs to one endpoint over a bounded pool of HTTP/1.1 keep-alive connections.

    ``max_connections`` callers at most are inside at once (the gate); ``max_idle``
    connections at most are kept between calls. Use :meth:`post`, then :meth:`aclose`.
    """

    def __init__(
        self,
        url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        proxy: Proxy | None,
        max_connections: int,
        max_idle: int,
        connect_timeout: float,
        read_timeout: float,
        write_timeout: float,
        pool_timeout: float,
    ) -> None:
        parts = urlsplit(url)
        self._tls = parts.scheme == "https"
        if self._tls and ssl_context is None:
            raise errors.ConfigError(f"an https:// endpoint needs a TLS context: {url!r}")
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._tls else 80)
        authority = signed_host(url)  # the Host the signature covers
        path = parts.path or "/"
        # An http:// endpoint behind a proxy is asked for by its absolute URL (the proxy
        # forwards it); an https:// one through a tunnel, so by its path, like a direct one.
        target = f"http://{authority}{path}" if proxy is not None and not self._tls else path
        head = f"POST {target} HTTP/1.1\r\nHost: {authority}\r\n"
        if proxy is not None and not self._tls:
            head += "".join(f"{name}: {value}\r\n" for name, value in proxy.headers.items())
        self._head = head.encode("latin-1")
        self._ssl = ssl_context
        self._proxy = proxy
        self._gate = anyio.Semaphore(max_connections)
        self._max_connections = max_connections
        self._max_idle = max_idle
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._pool_timeout = pool_timeout
        # Bounded by max_idle; the most recently used last (taken first).
        self._idle: list[_Connection] = []
        self._closed = False

    async def post(
        self,
        headers: Mapping[str, str],
        body: bytes,
        operation: str,
        *,
        patience: float | None = None,
    ) -> Reply:
        """Send one POST and return its whole reply; failures are typed TransportErrors.
        ``patience``, if given, also bounds the connect and each wait for the reply's bytes
        (the client's bound before its endpoint first answers)."""
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        gate = self._gate
        if gate.value > 0:
            gate.acquire_nowait()  # the common case, without a cancel scope
        else:
            acquired = False
            with anyio.move_on_after(self._pool_timeout):
                await gate.acquire()
                acquired = True
            if not acquired:
                raise errors.TransportError(
                    f"PoolTimeout: no connection free within {self._pool_timeout} s "
                    f"({self._max_connections} in use)",
                    operation=operation,
                )
        try:
            return await self._post(headers, body, operation, patience)
        finally:
            gate.release()

    async def _post(
        self, headers: Mapping[str, str], body: bytes, operation: str, patience: float | None
    ) -> Reply:
        parts = [self._head]
        for name, value in headers.items():
            parts += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
        parts.append(b"Content-Length: %d\r\n\r\n" % len(body))
        separate = len(body) > 65536  # a large body is sent as it is, not copied once more
        if not separate:
            parts.append(body)
        request = b"".join(parts)
        read_timeout, connect_timeout = self._read_timeout, self._connect_timeout
        if patience is not None:
            read_timeout, connect_timeout = (
                min(read_timeout, patience),
                min(connect_timeout, patience),
            )
        connection = await self._checkout(operation, connect_timeout)
        try:
            reply, reusable = await connection.exchange(
                request,
                body if separate else b"",
                write_timeout=self._write_timeout,
                read_timeout=read_timeout,
            )
        except BaseException as exc:
            await connection.close()
            if isinstance(exc, ExchangeTimeout):
                raise self._error(str(exc), operation) from exc
            if isinstance(exc, ProtocolError):
                raise self._error(f"RemoteProtocolError: {exc}", operation) from exc
            if isinstance(exc, Exception) and not isinstance(exc, errors.KinesisError):
                raise transport_error(exc, operation, self._proxy) from exc
            raise
        if reusable and not self._closed and len(self._idle) < self._max_idle:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            await connection.close()
        return reply

    async def _checkout(self, operation: str, connect_timeout: float) -> _Connection:
        """The most recently used idle connection that can still be used, or a new one."""
        idle = self._idle
        if idle:
            now = time.monotonic()
            while idle:
                connection = idle.pop()
                if connection.reusable(now):
                    return connection
                await connection.close()
        return await self._connect(operation, connect_timeout)

    async def _connect(self, operation: str, connect_timeout: float) -> _Connection:
        try:
            with anyio.fail_after(connect_timeout):
                stream = await self._open_stream(operation)
        except TimeoutError as exc:
            message = f"ConnectTimeout: no connection within {connect_timeout:.3g} s"
            raise self._error(message, operation) from exc
        except Exception as exc:
            if isinstance(exc, errors.KinesisError) or certificate_failure(exc) is not None:
                raise transport_error(exc, operation, self._proxy) from exc
            # anyio says "All connection attempts failed"; the reason is the cause's.
            raise self._error(f"ConnectError: {exc.__cause__ or exc}", operation) from exc
        return _Connection(stream)

    def _error(self, message: str, operation: str) -> errors.TransportError:
        through = f" (through the proxy {self._proxy})" if self._proxy is not None else ""
        return errors.TransportError(f"{message}{through}", operation=operation)

    async def _open_stream(self, operation: str) -> anyio.abc.ByteStream:
        proxy, host, port = self._proxy, self._host, self._port
        if proxy is None:
            if self._tls:
                assert self._ssl is not None  # checked at construction
                return await anyio.connect_tcp(
                    host, port, ssl_context=self._ssl, tls_standard_compatible=False
                )
            return await anyio.connect_tcp(host, port)
        if not self._tls:
            try:
                return await anyio.connect_tcp(proxy.host, proxy.port)
            except OSError as exc:
                raise errors.TransportError(
                    f"the proxy {proxy} cannot be reached: {type(exc).__name__}: {exc}",
                    operation=operation,
                ) from exc
        tunnel = await open_tunnel(proxy, host, port, operation=operation)
        try:
            return await TLSStream.wrap(
                tunnel, hostname=host, ssl_context=self._ssl, standard_compatible=False
            )
        except BaseException:
            await anyio.aclose_forcefully(tunnel)
            raise

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their exchange ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            for connection in idle:
                await connection.close()
