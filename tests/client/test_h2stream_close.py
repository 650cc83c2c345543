"""Closing a subscription's HTTP/2 connection early, seen from the server's side.

A server (``h2``, plain TCP on loopback) answers, then sends data the client never reads: the
client reads only the response headers and closes. The server must see the client's
RST_STREAM and GOAWAY and then an orderly end of the connection, never a reset: kinesis-mock
(http4s ember) never tears down a connection whose read fails, so a reset left the
subscription's lease held and every resubscription to the shard got ResourceInUse (for up to
5 minutes).
"""

from __future__ import annotations

import anyio
import anyio.abc
import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from kinesis_actors.client._h2stream import H2Stream

pytestmark = pytest.mark.anyio

CHUNK = 16 * 1024
IN_FLIGHT = 4 * CHUNK  # sent after the client's last read, and less than loopback buffers hold


async def connect_client(port: int) -> H2Stream:
    """What ``H2Stream.open`` does, on a plain TCP connection (it insists on TLS)."""
    sock = await anyio.connect_tcp("127.0.0.1", port)
    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    connection.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**30}
    )
    connection.initiate_connection()
    connection.increment_flow_control_window(2**30 - 65535)
    stream_id = connection.get_next_available_stream_id()
    connection.send_headers(
        stream_id,
        [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"x"), (b":path", b"/")],
        end_stream=True,
    )
    stream = H2Stream(sock, connection, stream_id, 10.0, "SubscribeToShard")
    await stream._flush()
    while not stream.status:
        await stream._read()
    return stream


async def test_an_early_close_ends_the_connection_in_order_not_with_a_reset() -> None:
    seen: list[str] = []  # what the server saw, in order
    answered = anyio.Event()  # the client has read the response headers (and reads no more)
    in_flight = anyio.Event()  # the server has sent IN_FLIGHT bytes the client will not read
    ended = anyio.Event()

    async def serve(sock: anyio.abc.SocketStream) -> None:
        server = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        server.initiate_connection()
        await sock.send(server.data_to_send())
        stream_id = 0
        async with sock, anyio.create_task_group() as tg:

            async def stream_data() -> None:
                # Sent in full without blocking, so only the reading task below ever sees
                # how the connection ended (a blocked send could take the reset's error).
                await answered.wait()
                for _ in range(IN_FLIGHT // CHUNK):
                    server.send_data(stream_id, b"x" * CHUNK)
                    await sock.send(server.data_to_send())
                in_flight.set()

            try:
                while True:
                    try:
                        data = await sock.receive()
                    except anyio.EndOfStream:
                        seen.append("end")
                        break
                    for event in server.receive_data(data):
                        if isinstance(event, h2.events.RequestReceived):
                            stream_id = event.stream_id
                            server.send_headers(stream_id, [(b":status", b"200")])
                            await sock.send(server.data_to_send())
                            tg.start_soon(stream_data)
                        elif isinstance(event, h2.events.StreamReset):
                            seen.append("rst_stream")
                        elif isinstance(event, h2.events.ConnectionTerminated):
                            seen.append("goaway")
            except (anyio.BrokenResourceError, OSError) as exc:
                seen.append(f"reset: {exc!r}")
            finally:
                tg.cancel_scope.cancel()
                ended.set()

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, serve)
                stream = await connect_client(port)
                assert stream.status == 200
                answered.set()
                await in_flight.wait()
                await stream.aclose()
                await ended.wait()
                tg.cancel_scope.cancel()
    assert seen == ["rst_stream", "goaway", "end"], seen
