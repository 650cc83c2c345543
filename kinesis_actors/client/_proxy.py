"""The proxy botocore would use, and an HTTP CONNECT tunnel through it.

Users behind a corporate proxy set ``HTTPS_PROXY`` / ``NO_PROXY`` (or their lower-case forms);
boto3, the KCL and the KPL honour them, so the client does too, resolved by botocore's own
functions (``botocore.utils.get_environ_proxies``, ``ProxyConfiguration``) so the two agree on
every edge (``NO_PROXY`` matching, ``user:password@`` in the URL, a URL without a scheme).
botocore reads proxies from the environment only: its config file has no ``proxies`` setting.

Unary calls hand the proxy to httpx. SubscribeToShard's own transport opens its connection
here: TCP to the proxy, ``CONNECT host:port``, then TLS and HTTP/2 inside the tunnel. The
request and the reply's head are built and parsed without I/O (:func:`connect_request`,
:func:`parse_connect_reply`); :func:`open_tunnel` is the thin I/O around them.

The proxy's password never leaves :attr:`Proxy.headers` (kept out of ``repr``): errors and
logs name a proxy by ``host:port`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
import anyio.abc
from botocore.httpsession import ProxyConfiguration
from botocore.utils import get_environ_proxies

from .. import errors

__all__ = ["Proxy", "connect_request", "open_tunnel", "parse_connect_reply", "resolve_proxy"]

#: The longest CONNECT reply head accepted; a real one is a line or two.
_MAX_REPLY_HEAD = 16384


@dataclass(frozen=True, slots=True)
class Proxy:
    """An ``http://`` proxy: where it is, and the headers a CONNECT sends it.

    ``str()`` is ``host:port``, which is how errors name it; ``headers`` (which may hold
    ``Proxy-Authorization``) is left out of ``repr``.
    """

    host: str
    port: int
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The proxy's URL, without credentials (httpx gets them as ``headers``)."""
        return f"http://{self}"


def resolve_proxy(endpoint_url: str) -> Proxy | None:
    """The proxy botocore would use for ``endpoint_url``, or None (none set, or ``NO_PROXY``).

    Reads the environment (and, on macOS and Windows, the system settings, as urllib does):
    call it where blocking is fine. Raises ConfigError for a proxy this client cannot use
    (only ``http://`` proxies are supported; an ``https://`` one would need TLS inside TLS).
    """
    proxies = ProxyConfiguration(proxies=get_environ_proxies(endpoint_url))
    url = proxies.proxy_url_for(endpoint_url)
    if not url:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError:
        raise errors.ConfigError(
            f"the proxy for {endpoint_url} (HTTPS_PROXY / HTTP_PROXY) has a bad port"
        ) from None
    if parts.scheme != "http" or not parts.hostname:
        raise errors.ConfigError(
            f"the proxy for {endpoint_url} (HTTPS_PROXY / HTTP_PROXY) must be an http:// URL "
            f"with a host; got scheme {parts.scheme!r} for {parts.hostname}:{port}"
        )
    # Proxy-Authorization from user:password@ in the URL, as botocore builds it.
    headers: dict[str, str] = proxies.proxy_headers_for(url)
    return Proxy(parts.hostname, port, headers)


def connect_request(host: str, port: int, headers: Mapping[str, str]) -> bytes:
    """The CONNECT request that opens a tunnel to ``host:port``."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_connect_reply(buffer: bytes) -> tuple[int, str, bytes] | None:
    """``(status, reason, bytes after the head)`` once ``buffer`` holds the reply's head;
    None while more is needed. Raises ValueError for a head that is not HTTP or too long."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > _MAX_REPLY_HEAD:
            raise ValueError(f"no end of the reply head within {_MAX_REPLY_HEAD} bytes")
        return None
    status_line = buffer[:end].split(b"\r\n", 1)[0].decode("latin-1")
    version, _, rest = status_line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ValueError(f"not an HTTP reply: {status_line[:80]!r}")
    return int(code), reason.strip(), buffer[end + 4 :]


async def open_tunnel(
    proxy: Proxy, host: str, port: int, *, operation: str
) -> anyio.abc.SocketStream:
    """A TCP connection through ``proxy`` to ``host:port`` (the caller bounds the time).

    Failures are :class:`~kinesis_actors.errors.TransportError` naming the proxy: it cannot be
    reached, refuses the tunnel (its status and reason), or does not answer in HTTP.
    """
    try:
        sock = await anyio.connect_tcp(proxy.host, proxy.port)
    except OSError as exc:
        raise errors.TransportError(
            f"the proxy {proxy} cannot be reached: {type(exc).__name__}: {exc}",
            operation=operation,
        ) from exc
    try:
        await _handshake(sock, proxy, host, port, operation)
    except BaseException:
        with anyio.move_on_after(1.0, shield=True):
            await sock.aclose()
        raise
    return sock


async def _handshake(
    sock: anyio.abc.SocketStream, proxy: Proxy, host: str, port: int, operation: str
) -> None:
    """Send CONNECT and read the reply's head; the typed error unless the tunnel is open."""
    try:
        await sock.send(connect_request(host, port, proxy.headers))
        buffer = b""
        while (reply := parse_connect_reply(buffer)) is None:
            buffer += await sock.receive()
    except ValueError as exc:
        raise errors.TransportError(
            f"the proxy {proxy} answered CONNECT badly: {exc}", operation=operation
        ) from exc
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
        raise errors.TransportError(
            f"the proxy {proxy} closed the tunnel to {host}:{port} before it opened: "
            f"{type(exc).__name__}: {exc}",
            operation=operation,
        ) from exc
    status, reason, rest = reply
    if not 200 <= status < 300:
        raise errors.TransportError(
            f"the proxy {proxy} refused the tunnel to {host}:{port}: {status} {reason}",
            operation=operation,
        )
    if rest:
        raise errors.TransportError(
            f"the proxy {proxy} sent data before the TLS handshake", operation=operation
        )
