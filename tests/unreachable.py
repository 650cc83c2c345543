"""Endpoints that cannot be reached, for the tests of a bounded, spoken open.

``refusing_port()`` is a loopback port bound and never listening: every connection is refused
at once. ``Blackhole()`` listens and accepts, and never sends a byte:
the connection succeeds and no reply ever comes, the way a firewall that eats packets after
the handshake or a hung server looks.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

__all__ = ["Blackhole", "Unreachable", "refusing_port", "unreachable", "warnings_naming"]


@contextmanager
def refusing_port() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` for a port bound for the whole block but never listening:
    every connection is refused, and no other process (another test worker) can take it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@dataclass(frozen=True)
class Unreachable:
    """An endpoint that cannot be reached: the fault's name, its URL, and the words the
    client's error gives as its cause."""

    fault: str
    url: str
    cause: str


@contextmanager
def unreachable(fault: str) -> Iterator[Unreachable]:
    """A ``"refusing_port"`` or a ``"blackhole"`` for the block."""
    if fault == "refusing_port":
        with refusing_port() as url:
            yield Unreachable(fault, url, "connection refused")
    else:
        with Blackhole() as hole:
            yield Unreachable(fault, hole.url, "no answer within")


class Blackhole:
    """A loopback listener that accepts every connection and never answers (a thread of its
    own accepts, so it serves either anyio backend). Use it as a context manager."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            self.accepted.append(connection)

    def __enter__(self) -> Blackhole:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(5)
        for connection in self.accepted:
            connection.close()


def warnings_naming(records: list[logging.LogRecord], endpoint: str) -> list[str]:
    """The WARNING messages among ``records`` that say ``endpoint`` cannot be reached."""
    return [
        record.getMessage()
        for record in records
        if record.levelno == logging.WARNING
        and "cannot reach" in record.getMessage()
        and endpoint in record.getMessage()
    ]
