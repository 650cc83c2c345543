"""Fixtures of the command-line tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def closed_port_url() -> Iterator[str]:
    """An endpoint where nothing listens: a port bound for the whole test but never listening,
    so a connection is refused, and no other process (another test worker) can take it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
