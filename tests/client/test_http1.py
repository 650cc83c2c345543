"""The lean HTTP/1.1 pool against servers that misbehave in ways a real one cannot be made
to: replies framed every legal way, a stalled reply, an endless head, a connection closed
while idle; and the gate, with 500 callers on a pool of 4. The framing rules themselves are
sans-IO and tested without a loop."""

from __future__ import annotations

import gzip
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.abc
import pytest

from kinesis_actors import errors
from kinesis_actors.client._http1 import (
    MAX_BODY,
    Http1Pool,
    ProtocolError,
    content_length,
    decoded,
    parse_head,
)

Handler = Callable[[anyio.abc.SocketStream, bytes], Awaitable[bool]]


def test_a_head_is_parsed_with_lower_case_names_and_repeats_joined() -> None:
    status, headers, keep_alive = parse_head(
        b"HTTP/1.1 200 OK\r\nContent-Type: a\r\nX-Two: 1\r\nx-two:  2 "
    )
    assert (status, keep_alive) == (200, True)
    assert headers == {"content-type": "a", "x-two": "1, 2"}
    assert parse_head(b"HTTP/1.0 500 Oops")[2] is False


@pytest.mark.parametrize(
    "head",
    [b"SSH-2.0-OpenSSH", b"HTTP/2 200", b"HTTP/1.1 2x0 OK", b"HTTP/1.1 200 OK\r\nno colon",
     b"HTTP/1.1 200 OK\r\nName : space", b"HTTP/1.1 200 OK\r\n folded: line"],
)  # fmt: skip
def test_a_head_that_is_not_http_1_is_refused(head: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_head(head)


def test_content_length_repeats_must_agree() -> None:
    assert content_length({"content-length": "12"}) == 12
    assert content_length({"content-length": "12, 12"}) == 12
    assert content_length({}) is None
    for bad in ("12, 13", "-1", "1e3", ""):
        with pytest.raises(ProtocolError):
            content_length({"content-length": bad})


def test_compressed_bodies_are_decoded_within_the_bound() -> None:
    assert decoded(gzip.compress(b"{}"), "gzip") == b"{}"
    assert decoded(zlib.compress(b"{}"), "deflate") == b"{}"
    assert decoded(b"{}", "identity") == b"{}"
    with pytest.raises(ProtocolError, match="not valid gzip"):
        decoded(b"{}", "gzip")
    with pytest.raises(ProtocolError, match="unsupported"):
        decoded(b"{}", "br")
    with pytest.raises(ProtocolError, match="larger than"):
        decoded(gzip.compress(bytes(MAX_BODY + 1)), "gzip")


# -- against a tiny server ---------------------------------------------------------------------


class Server:
    """Accepts connections and answers each request with ``handler(stream, request)``;
    the handler's False closes the connection."""

    def __init__(self, listener: anyio.abc.SocketListener, handler: Handler) -> None:
        self.listener = listener
        self.handler = handler
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def serve(self, stream: anyio.abc.SocketStream) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        buffer = b""
        try:
            async with stream:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        buffer += await stream.receive()
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    while len(buffer) < length:
                        buffer += await stream.receive()
                    buffer = buffer[length:]
                    if not await self.handler(stream, head):
                        return
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass
        finally:
            self.open -= 1


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[Server]]]:
    async with anyio.create_task_group() as tg:

        async def start(handler: Handler) -> Server:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
            server = Server(listener, handler)
            tg.start_soon(listener.serve, server.serve)
            return server

        yield start
        tg.cancel_scope.cancel()


def pool(server: Server, **overrides: float) -> Http1Pool:
    settings: dict[str, float] = {
        "connect_timeout": 5.0,
        "read_timeout": 5.0,
        "write_timeout": 5.0,
        "pool_timeout": 30.0,
    } | overrides
    return Http1Pool(
        f"http://127.0.0.1:{server.port}/",
        ssl_context=ssl.create_default_context(),
        proxy=None,
        max_connections=int(overrides.get("max_connections", 4)),
        max_idle=4,
        connect_timeout=settings["connect_timeout"],
        read_timeout=settings["read_timeout"],
        write_timeout=settings["write_timeout"],
        pool_timeout=settings["pool_timeout"],
    )


def replying(raw: bytes, keep: bool = True) -> Handler:
    async def handler(stream: anyio.abc.SocketStream, head: bytes) -> bool:
        await stream.send(raw)
        return keep

    return handler


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("raw", "keep"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", True),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", True),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"1\r\n{\r\n1;x=y\r\n}\r\n0\r\nT: 1\r\n\r\n",
            True,
        ),
        (b"HTTP/1.1 200 OK\r\n\r\n{}", False),  # the body runs to the connection's end
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", False),
    ],
)  # fmt: skip
async def test_every_legal_framing_is_read_and_the_connection_kept_only_when_it_may_be(
    serve: Callable[[Handler], Awaitable[Server]], raw: bytes, keep: bool
) -> None:
    server = await serve(replying(raw, keep))
    http = pool(server)
    for _ in range(3):
        reply = await http.post({"X-Amz-Target": "K.Op"}, b"{}", "Op")
        assert (reply.status, reply.body) == (200, b"{}")
    await http.aclose()
    assert server.connections == (1 if keep else 3)


@pytest.mark.anyio
async def test_a_stalled_reply_is_a_read_timeout_and_its_connection_is_dropped(
    serve: Callable[[Handler], Awaitable[Server]],
) -> None:
    stall = anyio.Event()

    async def handler(stream: anyio.abc.SocketStream, head: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{")
        await stall.wait()
        return False

    server = await serve(handler)
    http = pool(server, read_timeout=0.2)
    with pytest.raises(errors.TransportError, match="ReadTimeout"):
        await http.post({}, b"{}", "Op")
    stall.set()
    assert http._idle == []
    await http.aclose()


@pytest.mark.anyio
async def test_an_endless_head_is_refused_not_buffered(
    serve: Callable[[Handler], Awaitable[Server]],
) -> None:
    server = await serve(replying(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20_000))
    http = pool(server)
    with pytest.raises(errors.TransportError, match="RemoteProtocolError: no end of the reply"):
        await http.post({}, b"{}", "Op")
    await http.aclose()


@pytest.mark.anyio
async def test_a_connection_the_server_closed_while_idle_is_not_reused(
    serve: Callable[[Handler], Awaitable[Server]],
) -> None:
    async def handler(stream: anyio.abc.SocketStream, head: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return False  # closes, without saying so in the reply

    server = await serve(handler)
    http = pool(server)
    await http.post({}, b"{}", "Op")
    with anyio.fail_after(5):
        while server.open:  # the server's close has happened
            await anyio.sleep(0.01)
    reply = await http.post({}, b"{}", "Op")  # a new connection, not a reset one
    assert reply.body == b"{}" and server.connections == 2
    await http.aclose()


@pytest.mark.anyio
async def test_the_gate_keeps_500_callers_to_the_pools_connections(
    serve: Callable[[Handler], Awaitable[Server]],
) -> None:
    async def handler(stream: anyio.abc.SocketStream, head: bytes) -> bool:
        await anyio.sleep(0.001)
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True

    server = await serve(handler)
    http = pool(server, max_connections=4)
    async with anyio.create_task_group() as tg:
        for _ in range(500):
            tg.start_soon(http.post, {}, b"{}", "Op")
    await http.aclose()
    assert server.most_open <= 4 and server.connections <= 4


@pytest.mark.anyio
async def test_a_caller_that_waits_too_long_at_the_gate_gets_a_pool_timeout(
    serve: Callable[[Handler], Awaitable[Server]],
) -> None:
    release = anyio.Event()

    async def handler(stream: anyio.abc.SocketStream, head: bytes) -> bool:
        await release.wait()
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True

    server = await serve(handler)
    http = pool(server, max_connections=1, pool_timeout=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.post, {}, b"{}", "Op")
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(errors.TransportError, match="PoolTimeout"):
            await http.post({}, b"{}", "Op")
        release.set()
    await http.aclose()
