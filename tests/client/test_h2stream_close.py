"""Closing subscriptions' HTTP/2 streams early, seen from the server's side.

A server (``h2``, plain TCP on loopback) answers, then sends data the client never reads: the
client reads only the response headers and closes. The server must see the client's
RST_STREAM and, once the connection's last stream is closed, GOAWAY and then an orderly end
of the connection, never a reset: kinesis-mock (http4s ember) never tears down a connection
whose read fails, so a reset left the subscription's lease held and every resubscription to
the shard got ResourceInUse (for up to 5 minutes). It also tears a connection down on a
second RST_STREAM for one stream, which h2 sends for every frame still in flight on a stream
it has reset: exactly one RST_STREAM per stream must leave.
"""

from __future__ import annotations

import ssl
from dataclasses import replace

import anyio
import anyio.abc
import h2.config
import h2.connection
import h2.events
import pytest

from kinesis_actors import errors
from kinesis_actors.client import _h2conn
from kinesis_actors.client._h2pool import H2Pool
from kinesis_actors.client._h2stream import H2Stream

pytestmark = pytest.mark.anyio

CHUNK = 16 * 1024
IN_FLIGHT = 4 * CHUNK  # sent after the client's last read, and less than loopback buffers hold


@pytest.fixture
def plain_pool(monkeypatch: pytest.MonkeyPatch) -> H2Pool:
    """A pool whose connections are plain TCP (the pool insists on TLS and ALPN)."""

    async def connect(target: _h2conn.Target) -> anyio.abc.ByteStream:
        return await anyio.connect_tcp(target.host, target.port)

    monkeypatch.setattr(_h2conn, "_connect", connect)
    monkeypatch.setattr(_h2conn, "_require_h2", lambda *args: None)
    return H2Pool(
        "https://127.0.0.1:1/",  # the port is the server's: see ``serve_on``
        ssl_context=ssl.create_default_context(),
        proxy=None,
        connect_timeout=5.0,
        read_timeout=10.0,
        window=2**20,
        subscriptions_per_connection=50,
    )


def point_at(pool: H2Pool, port: int) -> None:
    pool._target = replace(pool._target, port=port)


class Server:
    """Answers every request with 200, then (once told) ``IN_FLIGHT`` bytes on the first
    stream and one chunk on every later one; records what it saw, in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.answered = 0
        self.send_now = anyio.Event()
        self.in_flight = anyio.Event()
        self.ended = anyio.Event()
        self.resets: list[int] = []  # the stream of every RST_STREAM frame, as sent
        self._raw = b""

    def _count_resets(self, data: bytes) -> None:
        """Frames as they came (h2 reports a reset of a closed stream to nobody)."""
        self._raw += data
        if self._raw.startswith(b"PRI * HTTP/2.0"):
            if len(self._raw) < 24:
                return
            self._raw = self._raw[24:]
        while len(self._raw) >= 9:
            end = 9 + int.from_bytes(self._raw[:3], "big")
            if len(self._raw) < end:
                break
            if self._raw[3] == 0x3:
                self.resets.append(int.from_bytes(self._raw[5:9], "big") & 0x7FFFFFFF)
            self._raw = self._raw[end:]

    async def serve(self, sock: anyio.abc.SocketStream) -> None:
        server = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        server.initiate_connection()
        await sock.send(server.data_to_send())
        streams: list[int] = []
        async with sock, anyio.create_task_group() as tg:

            async def stream_data() -> None:
                # Sent in full without blocking, so only the reading task below ever sees
                # how the connection ended (a blocked send could take the reset's error).
                await self.send_now.wait()
                for _ in range(IN_FLIGHT // CHUNK):
                    server.send_data(streams[0], b"x" * CHUNK)
                for stream_id in streams[1:]:
                    server.send_data(stream_id, b"y" * CHUNK)
                await sock.send(server.data_to_send())
                self.in_flight.set()

            try:
                while True:
                    try:
                        data = await sock.receive()
                    except anyio.EndOfStream:
                        self.seen.append("end")
                        break
                    self._count_resets(data)
                    for event in server.receive_data(data):
                        if isinstance(event, h2.events.RequestReceived):
                            streams.append(event.stream_id)
                            server.send_headers(event.stream_id, [(b":status", b"200")])
                            if len(streams) == 1:
                                tg.start_soon(stream_data)
                        elif isinstance(event, h2.events.StreamReset):
                            self.seen.append(f"rst_stream {event.stream_id}")
                        elif isinstance(event, h2.events.ConnectionTerminated):
                            self.seen.append("goaway")
                    outgoing = server.data_to_send()
                    if outgoing:
                        await sock.send(outgoing)
            except (anyio.BrokenResourceError, OSError) as exc:
                self.seen.append(f"reset: {exc!r}")
            finally:
                tg.cancel_scope.cancel()
                self.ended.set()


async def test_an_early_close_ends_the_connection_in_order_not_with_a_reset(
    plain_pool: H2Pool,
) -> None:
    server = Server()
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        point_at(plain_pool, listener.extra(anyio.abc.SocketAttribute.local_port))
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, server.serve)
                stream: H2Stream = await H2Stream.on(plain_pool, {}, b"{}")
                assert stream.status == 200
                server.send_now.set()
                await server.in_flight.wait()
                await stream.aclose()
                await server.ended.wait()
                tg.cancel_scope.cancel()
    assert server.seen == ["rst_stream 1", "goaway", "end"], server.seen
    assert server.resets == [1]
    assert plain_pool.statistics().connections == 0


async def test_a_stream_closed_with_data_in_flight_is_reset_once_and_its_sibling_reads_on(
    plain_pool: H2Pool,
) -> None:
    """Two streams on one connection; the first is closed with 64 KiB in flight, which the
    sibling's next read takes off the socket (h2 answers each of those frames with an
    RST_STREAM of its own: none may leave). The sibling reads its chunk; closing it, the
    last, ends the connection in order."""
    server = Server()
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        point_at(plain_pool, listener.extra(anyio.abc.SocketAttribute.local_port))
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, server.serve)
                first = await H2Stream.on(plain_pool, {}, b"{}")
                second = await H2Stream.on(plain_pool, {}, b"{}")
                assert plain_pool.statistics().connections == 1
                assert plain_pool.statistics().streams == 2
                server.send_now.set()
                await server.in_flight.wait()
                await first.aclose()
                assert await second.receive() == b"y" * CHUNK
                assert plain_pool.statistics().connections == 1
                await second.aclose()
                await server.ended.wait()
                tg.cancel_scope.cancel()
    assert server.seen == ["rst_stream 1", "rst_stream 3", "goaway", "end"], server.seen
    assert server.resets == [1, 3]
    assert plain_pool.statistics().connections == 0


async def test_data_and_a_goaway_in_one_read_fail_the_stream_with_a_transport_error(
    plain_pool: H2Pool,
) -> None:
    """A server answers, then in one write sends more than a batch of the connection's
    credit and a GOAWAY: h2 is closed by the time the round hands credit back, and a
    WINDOW_UPDATE then raised h2's own ProtocolError out of the read instead of the
    connection's typed end (found in review)."""

    async def serve(sock: anyio.abc.SocketStream) -> None:
        server = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        server.initiate_connection()
        await sock.send(server.data_to_send())
        async with sock:
            closed = False
            while True:
                try:
                    data = await sock.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    return
                if closed:
                    continue  # what the client says after the GOAWAY: drained, unread
                for event in server.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        server.send_headers(event.stream_id, [(b":status", b"200")])
                        await sock.send(server.data_to_send())
                        server.send_data(event.stream_id, b"z" * CHUNK)
                        server.send_data(event.stream_id, b"z" * CHUNK)
                        server.close_connection()
                        closed = True
                await sock.send(server.data_to_send())

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        point_at(plain_pool, listener.extra(anyio.abc.SocketAttribute.local_port))
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, serve)
                stream = await H2Stream.on(plain_pool, {}, b"{}")
                assert stream.status == 200
                received = b""
                with pytest.raises(errors.TransportError, match="GOAWAY"):
                    while True:
                        received += await stream.receive()
                assert received == b"z" * (2 * CHUNK)
                await stream.aclose()
                tg.cancel_scope.cancel()
