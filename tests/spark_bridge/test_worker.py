"""A Python worker's kept client (``_worker``): opened once per connection, closed at exit.
No server: opening a client to a given endpoint makes no call."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spark_bridge import _worker
from spark_bridge._options import Connection

KEYS = ("local", "local")
LOCAL = Connection(endpoint_url="http://127.0.0.1:9", credentials=KEYS)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    _worker.close_all()
    yield
    _worker.close_all()


def test_tasks_of_one_connection_share_one_client_and_loop() -> None:
    first = _worker.shared_loop(LOCAL)
    again = _worker.shared_loop(
        Connection(endpoint_url="http://127.0.0.1:9", credentials=("local", "local"))
    )
    assert again is first
    network = first.client._network  # open, and for http:// without a TLS context
    assert network is not None and network.pool_ssl is None
    other = _worker.shared_loop(Connection(endpoint_url="http://127.0.0.1:10", credentials=KEYS))
    assert other is not first


def test_the_least_recently_used_loop_is_closed_past_the_bound() -> None:
    loops = [
        _worker.shared_loop(Connection(endpoint_url=f"http://127.0.0.1:{port}", credentials=KEYS))
        for port in range(20, 20 + _worker._MAX_LOOPS + 1)
    ]
    assert (
        _worker.shared_loop(Connection(endpoint_url="http://127.0.0.1:20", credentials=KEYS))
        is not loops[0]
    )


def test_closing_at_exit_closes_every_client() -> None:
    loop = _worker.shared_loop(LOCAL)
    _worker.close_all()
    with pytest.raises(RuntimeError):
        loop.portal.call(lambda: None)  # the loop thread has stopped
    assert _worker.shared_loop(LOCAL) is not loop
