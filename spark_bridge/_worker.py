"""What a source task needs before its first call, paid once per Python worker process.

Spark reuses its Python workers between tasks (``spark.python.worker.reuse``, on by default),
so a worker runs many tasks of a query one after the other. Opening a
:class:`KinesisClient` for each of them cost 43-46 ms of CPU (the service model, the
credentials, botocore's configuration, TLS contexts), a third of a small task's Python time.
Here the client, the event loop thread it lives on and its credentials are kept per
:class:`Connection` (the options that say where and as whom), for the life of the process.

This module owns the cache; a task uses its process's loop for the length of its read (the
least recently used loops past eight are closed). A process
that forks gets new loops (a loop thread does not survive ``fork``). The loops are closed at
interpreter exit (``atexit``); a Spark daemon worker leaves with ``os._exit``, and then the
kernel closes the sockets.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import OrderedDict
from contextlib import ExitStack
from dataclasses import dataclass

from anyio.from_thread import BlockingPortal, start_blocking_portal

from kinesis_actors import KinesisClient

from ._options import Connection

__all__ = ["SharedLoop", "close_all", "shared_loop"]

log = logging.getLogger("spark_bridge.source")

_MAX_LOOPS = 8
"""Connections kept per process (least recently used closed first): a worker serves one
query's connection in practice; tests and notebooks switch between a few."""


@dataclass(slots=True)
class SharedLoop:
    """An open client on its own event loop thread: call its methods through ``portal``."""

    portal: BlockingPortal
    client: KinesisClient
    stack: ExitStack
    pid: int

    def close(self) -> None:
        try:
            self.portal.call(self.client.aclose)
        except Exception:  # closing on the way out: nothing left to tell
            log.debug("closing a worker's Kinesis client", exc_info=True)
        finally:
            self.stack.close()


_lock = threading.Lock()
_loops: OrderedDict[Connection, SharedLoop] = OrderedDict()


def _open(connection: Connection) -> SharedLoop:
    stack = ExitStack()
    try:
        portal = stack.enter_context(start_blocking_portal())
        client = KinesisClient(**connection.client_kwargs())
        portal.call(client.__aenter__)
    except BaseException:
        stack.close()
        raise
    return SharedLoop(portal, client, stack, os.getpid())


def shared_loop(connection: Connection) -> SharedLoop:
    """The process's open client for ``connection``, opened on first use."""
    evicted: list[SharedLoop] = []
    with _lock:
        loop = _loops.get(connection)
        if loop is not None and loop.pid != os.getpid():
            del _loops[connection]  # forked: the loop thread stayed in the parent
            loop = None
        if loop is None:
            loop = _open(connection)
            _loops[connection] = loop
            while len(_loops) > _MAX_LOOPS:
                evicted.append(_loops.popitem(last=False)[1])
        else:
            _loops.move_to_end(connection)
    for old in evicted:
        old.close()
    return loop


def close_all() -> None:
    """Close every loop of this process (at exit)."""
    with _lock:
        loops = [loop for loop in _loops.values() if loop.pid == os.getpid()]
        _loops.clear()
    for loop in loops:
        loop.close()


atexit.register(close_all)
