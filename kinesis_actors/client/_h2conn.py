"""One HTTP/2 connection carrying several SubscribeToShard streams (see ``_h2pool``).

Written on ``h2`` (sans-IO) and anyio sockets, the way httpcore drives h2, without a task of
its own: whichever subscription needs bytes and finds none reads the socket once, hands every
frame to the stream it belongs to, and lets the next one read. Only one task reads at a time
(``_reading``), and each round is a socket read, h2's parsing and a send, with no user code in
it; sends are serialized by a lock. The others wait each on an event of its own, set when a
round brings its stream something or when the reader leaves and one of them must read next:
a frame wakes one waiter, not every stream of the connection. A subscription nobody reads
never reads the socket, and its bytes stop at its stream window (``_h2flow``), so its
siblings keep reading.

- The receive window is advertised in SETTINGS (``SETTINGS_INITIAL_WINDOW_SIZE``): a window
  raised only by WINDOW_UPDATE frames (httpcore's way) stalls every stream of the local test
  server after 49,152 bytes. The connection window is raised once, at the start, to cover
  every stream window of the connection (``_h2flow.connection_window``).
- A failure of the connection (reset, end, protocol error, GOAWAY) fails every stream on it,
  and only those; a stream reset by the server fails that stream only.
- Closing the connection sends GOAWAY, then half-closes it and discards what is still in
  flight until the server closes its side (bounded), so nothing is left half-read and the
  server sees an orderly end, not a reset (see :meth:`MuxConnection.aclose`).
- Behind a proxy (``HTTPS_PROXY``, see ``_proxy``) the connection is an HTTP CONNECT tunnel
  through it, with TLS and HTTP/2 inside, as curl and httpx do.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.abc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSAttribute, TLSStream

from .. import errors
from ._h2flow import ConnectionCredit, ResetGuard, StreamCredit, connection_window
from ._proxy import Proxy, open_tunnel
from ._tls import transport_error

__all__ = ["CLOSE_TIMEOUT", "MuxConnection", "Target"]

log = logging.getLogger("kinesis_actors.client")

_READ_SIZE = 65536
#: Closing a connection is bounded: the server may end it only at its next event (1 s).
CLOSE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how a connection goes: the endpoint, TLS, proxy and windows."""

    host: str
    port: int
    netloc: str
    ssl_context: ssl.SSLContext
    proxy: Proxy | None
    connect_timeout: float
    read_timeout: float
    window: int
    subscriptions: int
    operation: str


@dataclass(slots=True)
class _Stream:
    """What the connection has received for one stream, until its subscription takes it."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    # (bytes, flow-controlled length) per DATA frame; bounded by the stream window, since
    # credit for a frame is returned only once it is taken.
    chunks: deque[tuple[bytes, int]] = field(default_factory=deque)
    ended: bool = False
    error: errors.TransportError | None = None
    credit: StreamCredit = field(default_factory=lambda: StreamCredit(65535))


def _require_h2(sock: anyio.abc.ByteStream, netloc: str, operation: str) -> None:
    if sock.extra(TLSAttribute.alpn_protocol, None) != "h2":
        raise errors.TransportError(
            f"{netloc} did not negotiate HTTP/2 (ALPN)", operation=operation
        )


async def _connect(target: Target) -> anyio.abc.ByteStream:
    """A TLS connection to the target, directly or inside its proxy's tunnel."""
    if target.proxy is None:
        return await anyio.connect_tcp(
            target.host, target.port, ssl_context=target.ssl_context, tls_standard_compatible=False
        )
    tunnel = await open_tunnel(target.proxy, target.host, target.port, operation=target.operation)
    try:
        return await TLSStream.wrap(
            tunnel,
            hostname=target.host,
            ssl_context=target.ssl_context,
            standard_compatible=False,
        )
    except BaseException:
        with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
            await tunnel.aclose()
        raise


def new_h2(window: int, subscriptions: int) -> h2.connection.H2Connection:
    """A client-side h2 state machine with its windows set, preface not yet sent."""
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
    increment = connection_window(subscriptions, window) - 65535
    if increment > 0:
        connection.increment_flow_control_window(increment)
    return connection


class MuxConnection:
    """An HTTP/2 connection for up to ``target.subscriptions`` streams (see module doc).

    The pool reserves a slot (:attr:`reserved`) before it opens a stream, so concurrent
    subscribers spread over connections instead of all opening new ones.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self.reserved = 0  # slots taken (streams open or opening); the pool's count
        self.connected = anyio.Event()
        self.failure: errors.TransportError | None = None  # why it cannot be used
        self.abandoned = False  # its connect was cancelled: its waiters try another
        self._socket: anyio.abc.ByteStream | None = None
        self._h2: h2.connection.H2Connection | None = None
        self._streams: dict[int, _Stream] = {}
        self._guard = ResetGuard()
        self._credit = ConnectionCredit(target.subscriptions, target.window)
        self._reading = False
        # Streams waiting while another reads, each with the event that wakes it (at most
        # one a stream of the connection). A frame wakes its own stream's waiter, not every
        # waiter: woken all at once, 50 streams a connection woke 50 times a frame, and at
        # 2,048 shards the wake-ups alone took the loop (20 s to open, 223 s at 4,096).
        self._parked: dict[int, anyio.Event] = {}
        # Taken without a checkpoint when free: a read round that has nothing to send (the
        # usual one, credit being handed back in batches) costs no trip through the loop.
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._going_away = False
        self._in_flight = False  # a stream was reset: the server may still be sending
        self.http_version = "HTTP/2"

    @property
    def usable(self) -> bool:
        """Whether a new stream may go on this connection."""
        return self.failure is None and not self._going_away

    def slots(self) -> int:
        """How many streams this connection takes (the server may allow fewer)."""
        limit = self.target.subscriptions
        if self._h2 is not None:
            limit = min(limit, self._h2.remote_settings.max_concurrent_streams)
        return limit

    async def connect(self) -> None:
        """Connect, negotiate HTTP/2 and send the preface with the windows."""
        target = self.target
        try:
            with anyio.fail_after(target.connect_timeout):
                sock = await _connect(target)
        except (OSError, TimeoutError, anyio.BrokenResourceError) as exc:
            # ssl.SSLCertVerificationError is an OSError: permanent, CertificateError.
            raise transport_error(exc, target.operation, target.proxy) from exc
        try:
            _require_h2(sock, target.netloc, target.operation)
            alpn = sock.extra(TLSAttribute.alpn_protocol, None)
            self.http_version = "HTTP/2" if alpn == "h2" else f"ALPN {alpn!r}"
            self._socket = sock
            self._h2 = new_h2(target.window, target.subscriptions)
            await self._send(self._h2.data_to_send())  # the preface is not frames: unfiltered
        except BaseException:
            with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
                await sock.aclose()
            raise

    # Streams -------------------------------------------------------------------------------

    def begin(self, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> int:
        """Queue a request (headers and its small body) with h2; its stream id, known to the
        caller before any await, so a cancellation before the :meth:`flush` that sends it
        still finds the stream to reset (an unread subscription would hold its shard)."""
        connection = self._live()
        try:
            stream_id = connection.get_next_available_stream_id()
            connection.send_headers(stream_id, list(headers))
            # Request bodies here are a few hundred bytes: far below the initial window and
            # the smallest frame size a peer may impose.
            connection.send_data(stream_id, body, end_stream=True)
        except h2.exceptions.H2Error as exc:
            raise errors.TransportError(
                f"{type(exc).__name__}: {exc}", operation=self.target.operation
            ) from exc
        self._streams[stream_id] = _Stream(credit=StreamCredit(self.target.window))
        return stream_id

    async def response(self, stream_id: int) -> tuple[int, dict[str, str]]:
        """Wait for the response headers of ``stream_id``: its status and headers."""
        stream = self._streams[stream_id]
        await self._pull(stream_id, stream, lambda: bool(stream.status))
        return stream.status, stream.headers

    async def receive(self, stream_id: int) -> bytes:
        """The next chunk of ``stream_id``'s body; ``b""`` at its end. Its credit goes back."""
        stream = self._streams[stream_id]
        while True:
            if stream.chunks:
                data, length = stream.chunks.popleft()
                if self._credit_stream(stream_id, stream.credit.taken(length)):
                    await self.flush()
                return data
            if stream.ended:
                return b""
            await self._pull(stream_id, stream, lambda: bool(stream.chunks))

    async def release(self, stream_id: int) -> None:
        """Forget ``stream_id`` (and its unread bytes): reset it once if it has not ended."""
        stream = self._streams.pop(stream_id, None)
        if stream is None or self._h2 is None:
            return
        stream.chunks.clear()  # their connection credit was counted on receipt
        if self.failure is not None:
            return
        if not stream.ended and stream.error is None:
            self._reset(stream_id)
        with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
            try:
                await self.flush()
            except errors.TransportError:
                log.debug("resetting an HTTP/2 stream failed", exc_info=True)

    def _credit_stream(self, stream_id: int, length: int) -> bool:
        """Hand ``length`` bytes of credit back to the stream; whether there is a frame to
        send."""
        if not length or self._h2 is None or self.failure is not None or self._going_away:
            return False
        # Ended or reset by the server: its window is moot.
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            self._h2.increment_flow_control_window(length, stream_id=stream_id)
            return True
        return False

    # Reading ---------------------------------------------------------------------------------

    def _live(self) -> h2.connection.H2Connection:
        if self.failure is not None:
            raise self.failure
        if self._h2 is None:
            raise errors.TransportError("not connected", operation=self.target.operation)
        return self._h2

    async def _pull(self, stream_id: int, stream: _Stream, check: Callable[[], bool]) -> None:
        """Read rounds until ``check()``, the stream's end or its failure (bounded by the read
        timeout: silence on this stream, whatever its siblings receive). While another task
        reads, wait to be woken by a round that brought this stream something, or to read
        next."""
        timeout = self.target.read_timeout
        try:
            with anyio.fail_after(timeout):
                while not (check() or stream.ended):
                    if stream.error is not None:
                        raise stream.error
                    self._live()
                    if self._reading:
                        await self._park(stream_id)
                    else:
                        await self._read_round()
        except TimeoutError as exc:
            raise errors.TransportError(
                f"ReadTimeout: no data for {timeout} s", operation=self.target.operation
            ) from exc
        finally:
            # Leaving (answered, failed or cancelled) while nobody reads: a waiting stream
            # reads next, so no stream waits for a round that nobody makes.
            if not self._reading and self._parked:
                self._wake(next(iter(self._parked)))
        if stream.error is not None and not check():
            raise stream.error

    async def _park(self, stream_id: int) -> None:
        wake = self._parked[stream_id] = anyio.Event()
        try:
            await wake.wait()
        finally:
            if self._parked.get(stream_id) is wake:
                del self._parked[stream_id]

    def _wake(self, stream_id: int) -> None:
        wake = self._parked.pop(stream_id, None)
        if wake is not None:
            wake.set()

    async def _read_round(self) -> None:
        assert self._socket is not None and self._h2 is not None
        self._reading = True
        try:
            try:
                data = await self._socket.receive(_READ_SIZE)
            except anyio.EndOfStream as exc:
                raise self._fail("RemoteProtocolError: the server closed the connection") from exc
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise self._fail(f"{type(exc).__name__}: {exc}") from exc
            try:
                events = self._h2.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                failure = self._fail(f"RemoteProtocolError: {type(exc).__name__}: {exc}")
                with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
                    await self._send(self._guard.filter(self._h2.data_to_send()))
                raise failure from exc
            for event in events:
                self._handle(event)
            if not self._going_away:  # after GOAWAY, h2 sends nothing (it would raise)
                owed = self._credit.due(self._h2.inbound_flow_control_window)
                if owed:
                    self._h2.increment_flow_control_window(owed)
            await self.flush()
        finally:
            self._reading = False
            if self.failure is not None or self._going_away:  # every stream has its answer
                for stream_id in list(self._parked):
                    self._wake(stream_id)

    def _reset(self, stream_id: int) -> None:
        """RST_STREAM ``stream_id``, once (``ResetGuard``)."""
        assert self._h2 is not None
        self._guard.allow(stream_id)
        try:
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        except h2.exceptions.H2Error:
            self._guard.revoke(stream_id)  # already closed: nothing to send
            log.debug("stream %d was already closed", stream_id, exc_info=True)
        else:
            self._in_flight = True

    def _handle(self, event: h2.events.Event) -> None:
        stream_id: int | None = getattr(event, "stream_id", None)
        stream = self._streams.get(stream_id) if stream_id else None
        if stream_id is not None and stream is not None:
            # Its waiter runs once this task next waits, the round's frames all handled.
            self._wake(stream_id)
        if isinstance(event, h2.events.DataReceived):
            # The connection's credit goes back after the round (``_h2flow``).
            length = event.flow_controlled_length or 0
            if stream is None:
                pass  # released already: its window is moot
            elif event.data:
                stream.chunks.append((event.data, length))
            else:  # padding only: nothing will take it
                self._credit_stream(event.stream_id, stream.credit.taken(length))
        elif isinstance(event, h2.events.ResponseReceived) and stream is not None:
            for name, value in event.headers or ():
                key = name.decode() if isinstance(name, bytes) else name
                text = value.decode() if isinstance(value, bytes) else value
                if key == ":status":
                    stream.status = int(text)
                else:
                    stream.headers[key] = text
        elif isinstance(event, h2.events.StreamEnded) and stream is not None:
            stream.ended = True
        elif isinstance(event, h2.events.StreamReset) and stream is not None:
            stream.error = errors.TransportError(
                f"RemoteProtocolError: stream reset by the server (error {event.error_code})",
                operation=self.target.operation,
            )
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._going_away = True
            error = errors.TransportError(
                f"RemoteProtocolError: connection terminated (GOAWAY {event.error_code})",
                operation=self.target.operation,
            )
            for each in self._streams.values():
                if not each.ended and each.error is None:
                    each.error = error

    def connect_failed(self, exc: BaseException) -> None:
        """Its connect ended with ``exc``: a transport error is why it cannot be used;
        anything else (its connecting subscriber was cancelled) abandons it, not its fault,
        and its waiters try another connection."""
        if isinstance(exc, errors.TransportError):
            self.failure = exc
            return
        self.abandoned = True
        self.failure = errors.TransportError(
            "the connection was not established", operation=self.target.operation
        )

    def _fail(self, message: str) -> errors.TransportError:
        """The connection is unusable: every stream on it fails with ``message``."""
        if self.failure is None:
            self.failure = errors.TransportError(message, operation=self.target.operation)
        return self.failure

    # Writing ---------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Send what h2 has to send (one sender at a time), without unwanted RST_STREAMs."""
        if self._h2 is None:
            return
        async with self._send_lock:
            data = self._guard.filter(self._h2.data_to_send())
            if data:
                await self._send(data)

    async def _send(self, data: bytes) -> None:
        """Send ``data`` whole: shielded (bounded), since a send cut by one subscription's
        cancellation would leave half a frame on a connection its siblings still use."""
        assert self._socket is not None
        try:
            with anyio.move_on_after(CLOSE_TIMEOUT, shield=True) as scope:
                await self._socket.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise self._fail(f"{type(exc).__name__}: {exc}") from exc
        if scope.cancelled_caught:
            raise self._fail(f"WriteTimeout: a send took more than {CLOSE_TIMEOUT} s")

    # Closing ---------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """GOAWAY, then close the connection in order (bounded).

        A stream closed before its end still has bytes in flight (the server keeps writing
        until it learns of the reset). Closing a socket with unread bytes makes the kernel
        abort the connection (TCP RST), and the server's next read then fails instead of
        ending: kinesis-mock (http4s ember) never tears such a connection down, so its
        subscriptions keep their shards' leases and every resubscription gets ResourceInUse
        until the server's 5-minute cap. So after GOAWAY the connection is half-closed and
        read to its end, discarding, until the server closes it (at most ``CLOSE_TIMEOUT``);
        only then is the socket closed.
        """
        sock, connection = self._socket, self._h2
        self._going_away = True
        if sock is None:
            return
        with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
            try:
                if connection is not None and self.failure is None:
                    connection.close_connection()
                    async with self._send_lock:
                        await sock.send(self._guard.filter(connection.data_to_send()))
                    if (self._in_flight or self._streams) and await self._send_eof(sock):
                        await self._discard_until_closed(sock)
            except Exception:  # best effort: the socket closes below anyway
                log.debug("closing an HTTP/2 connection cleanly failed", exc_info=True)
        self._fail("the connection was closed")
        with anyio.CancelScope(shield=True):
            await sock.aclose()

    @staticmethod
    async def _send_eof(sock: anyio.abc.ByteStream) -> bool:
        """Half-close the connection (TCP FIN); False if the stream cannot."""
        try:
            await sock.send_eof()
        except NotImplementedError:
            # TLS streams cannot (anyio): shut the TCP socket's sending side under them.
            raw = sock.extra(SocketAttribute.raw_socket, None)
            if raw is None:
                return False
            raw.shutdown(socket.SHUT_WR)
        return True

    @staticmethod
    async def _discard_until_closed(sock: anyio.abc.ByteStream) -> None:
        try:
            while await sock.receive(_READ_SIZE):
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass  # the server closed (or reset) its side: nothing is left in flight
