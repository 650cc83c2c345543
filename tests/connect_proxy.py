"""A loopback HTTP CONNECT proxy for tests: what a corporate ``HTTPS_PROXY`` does, and no more.

It answers ``CONNECT host:port`` with 200 and then copies bytes both ways (half-closes
included), counting the tunnels it opened and keeping the ``Proxy-Authorization`` headers it
saw. ``hosts`` maps names to addresses the way a proxy's own DNS would: the local server's
certificate is issued to the name ``Unknown``, which only the proxy can resolve here. Anything
but CONNECT gets 405, an unknown or unreachable target 502. It runs its own asyncio loop in a
thread, so it serves tests on either anyio backend; :meth:`stop` closes the listening socket
and every open tunnel, after which connecting is refused. :meth:`reset` aborts every open
tunnel at the TCP level (RST both ways, as a network failure does) and keeps serving: it is
how the tests reset a SubscribeToShard stream, whose HTTP/2 cannot pass the HTTP/1.1 fault
proxy (``tests/faults.py``) but passes a CONNECT tunnel.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Self


class ConnectProxy:
    def __init__(self, hosts: Mapping[str, str] | None = None) -> None:
        self.hosts = {name.lower(): address for name, address in (hosts or {}).items()}
        self.port = 0
        #: Tunnels opened (CONNECT answered 200), and the targets asked for, in order.
        self.tunnels = 0
        self.targets: list[str] = []
        #: Why each CONNECT answered 502 failed to reach its target, in order.
        self.failures: list[str] = []
        #: The Proxy-Authorization header of each CONNECT (None when absent).
        self.authorizations: list[str | None] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()

    @property
    def address(self) -> str:
        """``127.0.0.1:port``, how the client names this proxy in its errors."""
        return f"127.0.0.1:{self.port}"

    def url(self, userinfo: str = "") -> str:
        """The value for ``HTTPS_PROXY``, optionally with ``user:password@``."""
        return f"http://{userinfo}{self.address}"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="connect-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the CONNECT proxy did not start")
        return self

    def stop(self) -> None:
        """Close the listening socket and every tunnel; idempotent."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def reset(self) -> int:
        """Abort every open tunnel with a TCP RST to both its ends (SO_LINGER 0, then close);
        returns how many connections were reset. New tunnels are served as before."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the CONNECT proxy is not running")
        done = threading.Event()
        aborted = 0

        def abort_all() -> None:
            nonlocal aborted
            try:
                for writer in list(self._writers):
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        linger = struct.pack("ii", 1, 0)
                        # A tunnel whose end closed on its own has no socket left to reset.
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    writer.transport.abort()
                    aborted += 1
            finally:
                done.set()

        loop.call_soon_threadsafe(abort_all)
        if not done.wait(10):
            raise RuntimeError("the CONNECT proxy did not reset its tunnels")
        return aborted

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            loop.run_until_complete(server.wait_closed())
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            # Every tunnel's task runs to its end (a cancellation it did not survive is an
            # outcome here, not a traceback on the test's output). With no task, gather()
            # would look for this thread's current loop, and there is none.
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Cancelled at stop, a handler task ends quietly: Python 3.11's stream server asks a
        # cancelled handler for its exception and logs the CancelledError as an error.
        with contextlib.suppress(asyncio.CancelledError):
            await self._tunnel(reader, writer)

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = [*lines[0].split(" "), "", ""][:3]
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if method != "CONNECT":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            self.targets.append(target)
            self.authorizations.append(headers.get("proxy-authorization"))
            host, _, port = target.rpartition(":")
            address = self.hosts.get(host.lower(), host)
            try:
                up_reader, up_writer = await asyncio.open_connection(address, int(port))
            except (OSError, ValueError) as exc:
                # The reason says why the target could not be reached (a test that fails on
                # a 502 then shows it: refused, no such address, too many open files).
                why = f"Bad Gateway ({type(exc).__name__}: {exc})".replace("\r", " ")
                why = why.replace("\n", " ")[:200]
                self.failures.append(why)
                writer.write(f"HTTP/1.1 502 {why}\r\nContent-Length: 0\r\n\r\n".encode())
                return
            self._writers.add(up_writer)
            self.tunnels += 1
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                self._writers.discard(up_writer)
                up_writer.close()
        finally:
            self._writers.discard(writer)
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of file, then pass the half-close on."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
