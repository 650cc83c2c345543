"""Connection, timeout and retry settings of a :class:`KinesisClient`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .._validate import check_positive, check_type
from ..errors import ConfigError
from ._retry import RetryPolicy

__all__ = ["ClientConfig"]


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """How the client talks to the service. Every field is validated on construction.

    - ``max_connections`` bounds the shared connection pool (KPL's MaxConnections is 24);
      ``max_keepalive_connections`` how many idle ones are kept.
    - Timeouts are in seconds: ``connect_timeout``, ``read_timeout`` (waiting for a
      response's bytes), ``write_timeout``, ``pool_timeout`` (waiting for a free
      connection). ``subscribe_read_timeout`` is the longest silence tolerated inside a
      SubscribeToShard stream, whose server sends an event at least every few seconds.
    - ``subscribe_window`` is the HTTP/2 receive window of one subscription (advertised in
      SETTINGS), and so the most it holds unread: its credit goes back to the server only as
      its consumer reads. The default, 256 KiB, lets a shard deliver about 2 MB/s across a
      100 ms round trip (credit goes back in quarters of the window), and bounds what a
      stalled shard buffers to 256 KiB.
    - ``subscriptions_per_connection``: SubscribeToShard streams share HTTP/2 connections,
      at most this many on one (a 1,000-shard consumer then needs 20 descriptors, not 1,000).
      A connection's credit goes back on receipt (in batches) and its window covers the
      stream windows of all of them, so a stalled shard never slows its siblings (see
      ``_h2flow``). 1 gives every subscription a connection of its own.
      ``subscriptions_per_connection * subscribe_window`` is at most 2**28 bytes (the
      connection window is four times it, and 16 KiB more where that stays under 2**30).
    - ``http2`` negotiates HTTP/2 over TLS for unary calls too. Off by default: a pool of
      HTTP/1.1 connections keeps a slow GetRecords from sharing a window with PutRecords, and
      httpcore's HTTP/2 stalls after 49,152 bytes of a response on peers that ignore
      WINDOW_UPDATE (the local test server does). SubscribeToShard always uses HTTP/2.
    - ``open_timeout`` bounds how long calls keep trying an endpoint that has never answered
      this client (a wrong URL, a server that is not running, a port that accepts and never
      replies): the first failure is a WARNING at once, each attempt waits at most 3 s until
      the first reply, and ``open_timeout`` seconds after the first attempt a call raises
      :class:`~kinesis_actors.errors.EndpointUnreachableError` naming the endpoint and the
      cause. After the first reply (any status) it no longer applies: an outage later is
      retried by ``retry`` as before.
    - ``retry`` decides which failures are retried and how long to back off.
    """

    max_connections: int = 24
    max_keepalive_connections: int = 24
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    write_timeout: float = 30.0
    pool_timeout: float = 30.0
    subscribe_read_timeout: float = 60.0
    subscribe_window: int = 256 * 1024
    subscriptions_per_connection: int = 50
    http2: bool = False
    open_timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        check_positive("ClientConfig.max_connections", self.max_connections, integer=True)
        check_positive(
            "ClientConfig.max_keepalive_connections", self.max_keepalive_connections, integer=True
        )
        for name in (
            "connect_timeout",
            "read_timeout",
            "write_timeout",
            "pool_timeout",
            "subscribe_read_timeout",
            "open_timeout",
        ):
            check_positive(f"ClientConfig.{name}", getattr(self, name))
        check_positive("ClientConfig.subscribe_window", self.subscribe_window, integer=True)
        if not 65535 <= self.subscribe_window <= 2**28:
            raise ConfigError(
                "ClientConfig.subscribe_window must be between 65535 and 2**28 bytes, "
                f"got {self.subscribe_window!r}"
            )
        check_positive(
            "ClientConfig.subscriptions_per_connection",
            self.subscriptions_per_connection,
            integer=True,
        )
        if self.subscriptions_per_connection * self.subscribe_window > 2**28:
            raise ConfigError(
                "ClientConfig.subscriptions_per_connection * ClientConfig.subscribe_window "
                f"must be at most 2**28 bytes, got {self.subscriptions_per_connection} * "
                f"{self.subscribe_window}"
            )
        check_type("ClientConfig.http2", self.http2, bool, "True or False")
        check_type("ClientConfig.retry", self.retry, RetryPolicy, "a RetryPolicy")
