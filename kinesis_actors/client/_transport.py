"""The unary calls' transport, chosen from the client's configuration.

HTTP/1.1 (the default) goes through ``_http1``'s lean pool. ``ClientConfig.http2`` keeps
httpx, which negotiates HTTP/2 over TLS, behind a gate of our own: at most
``max_connections`` callers inside httpx at once. httpcore's pool walks every queued request
on every connection event (``_assign_requests_to_connections``, with ``has_expired`` and a
``getpeername`` per connection), so its cost grows with the square of the callers waiting;
the gate keeps that queue no longer than the pool, and the rest wait in O(1).

Both answer :meth:`post` with an ``_http1.Reply`` and raise typed TransportErrors.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Protocol

import anyio
import httpx

from .. import errors
from ._config import ClientConfig
from ._http1 import Http1Pool, Reply
from ._httpx_log import OUR_REQUEST, quiet_httpx
from ._proxy import Proxy
from ._tls import transport_error

__all__ = ["HttpxPool", "Transport", "new_transport"]

_READ = httpx.ByteStream(b"")  # what a response's stream becomes once read

#: How long closing the connections may take when the caller is being cancelled.
_CLOSE_TIMEOUT = 5.0


class Transport(Protocol):
    async def post(
        self,
        headers: Mapping[str, str],
        body: bytes,
        operation: str,
        *,
        patience: float | None = None,
    ) -> Reply: ...

    async def aclose(self) -> None: ...


class HttpxPool:
    """httpx's client (for HTTP/2), gated to ``max_connections`` callers at once."""

    def __init__(
        self, url: str, client: httpx.AsyncClient, config: ClientConfig, proxy: Proxy | None
    ) -> None:
        quiet_httpx()
        self._url = url
        self._client = client
        self._proxy = proxy
        self._gate = anyio.Semaphore(config.max_connections)
        self._pool_timeout = config.pool_timeout
        self._timeout = httpx.Timeout(
            connect=config.connect_timeout,
            read=config.read_timeout,
            write=config.write_timeout,
            pool=config.pool_timeout,
        )

    async def post(
        self,
        headers: Mapping[str, str],
        body: bytes,
        operation: str,
        *,
        patience: float | None = None,
    ) -> Reply:
        # The gate's wait and httpx's own pool wait share one pool_timeout in spirit: each
        # is bounded by it (httpx's is now short: the gate lets in no more than it holds).
        with anyio.move_on_after(self._pool_timeout) as waited:
            await self._gate.acquire()
        if waited.cancelled_caught:
            raise errors.TransportError(
                f"PoolTimeout: no connection free within {self._pool_timeout} s",
                operation=operation,
            )
        try:
            timeout = self._timeout
            if patience is not None:  # before first contact: see ``_contact``
                timeout = httpx.Timeout(
                    connect=min(patience, timeout.connect or patience),
                    read=min(patience, timeout.read or patience),
                    write=timeout.write,
                    pool=timeout.pool,
                )
            ours = OUR_REQUEST.set(True)  # httpx's line for it goes to DEBUG (_httpx_log)
            try:
                response = await self._client.post(
                    self._url, content=body, headers=headers, timeout=timeout
                )
            finally:
                OUR_REQUEST.reset(ours)
        except httpx.TimeoutException as exc:  # httpx says nothing more than the kind
            raise errors.TransportError(_timed_out(exc, timeout), operation=operation) from exc
        except httpx.TransportError as exc:
            raise transport_error(exc, operation, self._proxy) from exc
        finally:
            self._gate.release()
        reply = Reply(response.status_code, response.headers, response.content)
        # An httpx response and its (read, closed) stream refer to each other, so each
        # call's request and body (up to 5 MiB) waited for a garbage collection; without
        # the cycle they go with the call.
        response.stream = _READ
        return reply

    async def aclose(self) -> None:
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await self._client.aclose()


def _timed_out(exc: httpx.TimeoutException, timeout: httpx.Timeout) -> str:
    """The timeout in the words of ``_http1``'s (which ``_contact`` reads)."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"ConnectTimeout: no connection within {timeout.connect:g} s"
    if isinstance(exc, httpx.ReadTimeout):
        return f"ReadTimeout: no reply bytes for {timeout.read:g} s"
    if isinstance(exc, httpx.WriteTimeout):
        return f"WriteTimeout: the request was not sent within {timeout.write:g} s"
    return f"PoolTimeout: no connection free within {timeout.pool:g} s"


def new_transport(
    url: str,
    config: ClientConfig,
    pool_ssl: ssl.SSLContext | None,
    proxy: Proxy | None,
) -> Transport:
    """The transport for ``config``: the lean HTTP/1.1 pool, or gated httpx for HTTP/2."""
    keepalive = min(config.max_keepalive_connections, config.max_connections)
    if not config.http2:
        return Http1Pool(
            url,
            ssl_context=pool_ssl,
            proxy=proxy,
            max_connections=config.max_connections,
            max_idle=keepalive,
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            write_timeout=config.write_timeout,
            pool_timeout=config.pool_timeout,
        )
    client = httpx.AsyncClient(
        http2=True,
        # No context for an http:// endpoint: httpx would build (and load a bundle into) one.
        verify=pool_ssl if pool_ssl is not None else False,
        # Resolved by botocore (trust_env stays off: httpx's reading of the environment
        # differs from botocore's, and the SDKs agree with botocore).
        proxy=None if proxy is None else httpx.Proxy(proxy.url, headers=dict(proxy.headers)),
        limits=httpx.Limits(
            max_connections=config.max_connections, max_keepalive_connections=keepalive
        ),
        timeout=httpx.Timeout(
            connect=config.connect_timeout,
            read=config.read_timeout,
            write=config.write_timeout,
            pool=config.pool_timeout,
        ),
        trust_env=False,
    )
    return HttpxPool(url, client, config, proxy)
