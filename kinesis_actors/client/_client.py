"""The async Kinesis client: one signed, retried HTTP call per operation.

``KinesisClient.call`` runs any operation of the service model. The I/O is httpx (a pool of
HTTP/1.1 connections by default, HTTP/2 on request); SubscribeToShard has its own HTTP/2
transport (``_h2stream``). Protocol, signing and retry decisions live in sans-IO helpers beside
this module. What the caller does not set follows botocore's configuration: the endpoint, the
credentials, the CA bundle (``_tls``) and the proxy (``_proxy``).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit

import anyio
import botocore.session
import httpx

from .. import errors
from .._validate import check_type
from ._config import ClientConfig
from ._h2stream import H2Stream
from ._protocol import EncodedRequest, ProtocolCodec
from ._proxy import Proxy, resolve_proxy
from ._retry import RetrySettings
from ._signing import Credentials, Signer, resolve_credentials
from ._subscription import Subscription
from ._tls import resolve_verify, ssl_contexts, transport_error

__all__ = ["ClientStats", "KinesisClient"]

log = logging.getLogger("kinesis_actors.client")

_T = TypeVar("_T")

#: How long closing a connection may take when the caller is being cancelled.
_CLOSE_TIMEOUT = 5.0


@dataclass(slots=True)
class ClientStats:
    """Counters since the client opened.

    ``malformed_replies`` counts 2xx replies (and SubscribeToShard events) that could not be
    believed (:class:`~kinesis_actors.errors.MalformedReplyError`), poison records included.
    """

    calls: int = 0
    attempts: int = 0
    retries: int = 0
    throttled: int = 0
    transport_errors: int = 0
    subscriptions: int = 0
    malformed_replies: int = 0


def _resolve_endpoint(region: str) -> str:
    client = botocore.session.get_session().create_client("kinesis", region_name=region)
    endpoint: str = client.meta.endpoint_url
    return endpoint


@dataclass(frozen=True, slots=True)
class _Network:
    """What botocore's configuration decides about the connections (see ``_tls``,
    ``_proxy``): the TLS contexts and the proxy, if any."""

    pool_ssl: ssl.SSLContext
    subscription_ssl: ssl.SSLContext
    proxy: Proxy | None


def _resolve_network(endpoint_url: str, verify: bool | str) -> _Network:
    """Blocking (config files, CA files): run it in a worker thread."""
    pool_ssl, subscription_ssl = ssl_contexts(resolve_verify(verify))
    return _Network(pool_ssl, subscription_ssl, resolve_proxy(endpoint_url))


class KinesisClient:
    """An async client for every Kinesis operation, with signing, retries and typed errors.

    Use it as an async context manager. Credentials default to botocore's chain; a tuple
    ``(access_key, secret_key)`` or ``(access_key, secret_key, token)`` is accepted (and kept
    as a botocore credentials object, out of any ``repr``). ``verify`` is True (verify, with
    botocore's configured CA bundle: ``AWS_CA_BUNDLE`` or the config file's ``ca_bundle``,
    else certifi's), False (for the local server's self-signed certificate) or the path of a
    CA bundle. The endpoint, unless given, is botocore's for the region. Calls and
    subscriptions go through the proxy botocore would use (``HTTPS_PROXY``, ``NO_PROXY``).
    """

    def __init__(
        self,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        verify: bool | str = True,
        credentials: Credentials = None,
        *,
        config: ClientConfig | None = None,
    ) -> None:
        if not isinstance(region, str) or not region:
            raise errors.ConfigError(f"region must be a non-empty string, got {region!r}")
        if endpoint_url is not None:
            parts = urlsplit(endpoint_url) if isinstance(endpoint_url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
                raise errors.ConfigError(
                    f"endpoint_url must be an http:// or https:// URL, got {endpoint_url!r}"
                )
        check_type("verify", verify, (bool, str), "True, False or a CA bundle path")
        config = ClientConfig() if config is None else config
        check_type("config", config, ClientConfig, "a ClientConfig")
        if credentials is not None and not hasattr(credentials, "get_frozen_credentials"):
            # Validates the shape now, before any I/O, and keeps the secret out of reprs.
            credentials = resolve_credentials(credentials)
        self.region = region
        self.endpoint_url = endpoint_url
        self.verify = verify
        self.config = config
        self.stats = ClientStats()
        self._credentials = credentials
        self._codec: ProtocolCodec | None = None
        self._signer: Signer | None = None
        self._http: httpx.AsyncClient | None = None
        self._network: _Network | None = None
        self._url = ""

    def __repr__(self) -> str:
        proxy = self._network.proxy if self._network is not None else None
        through = f", proxy='{proxy}'" if proxy is not None else ""
        return f"KinesisClient(region={self.region!r}, endpoint_url={self.endpoint_url!r}{through})"

    @property
    def proxy(self) -> Proxy | None:
        """The proxy calls and subscriptions go through (known once open), or None."""
        return self._network.proxy if self._network is not None else None

    async def __aenter__(self) -> Self:
        # Loading the service model, resolving credentials and reading CA files all block.
        self._codec = await anyio.to_thread.run_sync(ProtocolCodec)
        if self.endpoint_url is None:
            self.endpoint_url = await anyio.to_thread.run_sync(_resolve_endpoint, self.region)
        self._url = self.endpoint_url.rstrip("/") + "/"
        credentials = await anyio.to_thread.run_sync(resolve_credentials, self._credentials)
        self._signer = Signer(credentials, self.region)
        self._network = await anyio.to_thread.run_sync(
            _resolve_network, self.endpoint_url, self.verify
        )
        self._http = self._new_http(self._network)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool; bounded in time even when cancelled."""
        http, self._http = self._http, None
        if http is not None:
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                await http.aclose()

    def _new_http(self, network: _Network) -> httpx.AsyncClient:
        config = self.config
        proxy = network.proxy
        return httpx.AsyncClient(
            http2=config.http2,
            verify=network.pool_ssl,
            # Resolved by botocore (trust_env stays off: httpx's reading of the environment
            # differs from botocore's, and the SDKs agree with botocore).
            proxy=None if proxy is None else httpx.Proxy(proxy.url, headers=dict(proxy.headers)),
            limits=httpx.Limits(
                max_connections=config.max_connections,
                max_keepalive_connections=min(
                    config.max_keepalive_connections, config.max_connections
                ),
            ),
            timeout=httpx.Timeout(
                connect=config.connect_timeout,
                read=config.read_timeout,
                write=config.write_timeout,
                pool=config.pool_timeout,
            ),
            trust_env=False,
        )

    @property
    def codec(self) -> ProtocolCodec:
        if self._codec is None:
            raise RuntimeError("KinesisClient is not open: use 'async with KinesisClient(...)'")
        return self._codec

    async def call(
        self,
        operation: str,
        params: Mapping[str, Any] | None = None,
        *,
        retry: RetrySettings | None = None,
    ) -> dict[str, Any]:
        """Run one Kinesis operation and return its result in boto3's shapes.

        Retryable failures (throttling, 5xx, connection resets, timeouts) are retried with
        capped exponential backoff and full jitter per the operation's
        :class:`RetrySettings` (or ``retry``); the last failure is raised as its typed error.
        """
        return await self.send(self.codec.encode(operation, params or {}), retry=retry)

    async def send(
        self, request: EncodedRequest, *, retry: RetrySettings | None = None
    ) -> dict[str, Any]:
        """Run a request already encoded with :attr:`codec` (say by its hand-written
        ``encode_put_records``); retried like :meth:`call`, whose second half it is."""
        self.stats.calls += 1
        return await self._retrying(request.operation, retry, lambda: self._send(request))

    async def _retrying(
        self,
        operation: str,
        settings: RetrySettings | None,
        attempt: Callable[[], Awaitable[_T]],
    ) -> _T:
        """Run ``attempt`` until it succeeds, or the policy gives up and its error is raised."""
        policy = self.config.retry
        retry = 0
        while True:
            try:
                return await attempt()
            except errors.KinesisError as exc:
                delay = policy.next_delay(operation, exc, retry, settings=settings)
                if delay is None:
                    raise
                self.stats.retries += 1
                log.debug("%s failed (%s); retry %d in %.3fs", operation, exc, retry + 1, delay)
                await anyio.sleep(delay)
                retry += 1

    async def _signed_headers(self, request: EncodedRequest) -> dict[str, str]:
        signer = self._signer
        if signer is None:
            raise RuntimeError("KinesisClient is not open: use 'async with KinesisClient(...)'")
        if signer.needs_refresh():
            await anyio.to_thread.run_sync(signer.refresh)
        return signer.sign(self._url, request.headers, request.body)

    async def _send(self, request: EncodedRequest) -> dict[str, Any]:
        http = self._http
        if http is None:
            raise RuntimeError("KinesisClient is not open: use 'async with KinesisClient(...)'")
        headers = await self._signed_headers(request)
        self.stats.attempts += 1
        try:
            response = await http.post(self._url, content=request.body, headers=headers)
        except httpx.TransportError as exc:
            self.stats.transport_errors += 1
            raise transport_error(exc, request.operation, self.proxy) from exc
        try:
            return self.codec.decode(
                request.operation,
                response.status_code,
                response.headers,
                response.content,
                record_count=request.record_count,
            )
        except errors.ThrottlingError:
            self.stats.throttled += 1
            raise
        except errors.MalformedReplyError:
            self.stats.malformed_replies += 1
            raise

    @asynccontextmanager
    async def subscribe_to_shard(
        self,
        consumer_arn: str,
        shard_id: str,
        starting_position: Mapping[str, Any],
    ) -> AsyncIterator[Subscription]:
        """Open a SubscribeToShard stream; yields a :class:`Subscription` of decoded events.

        Each subscription gets an HTTP/2 connection of its own (see ``_h2stream``). Streams
        sharing a connection share its flow-control window: one subscription left unread while
        its siblings are read fills that window and stalls every sibling, and closing a stream
        early does not return the credit (httpcore issue 943). A private connection read only
        on demand makes backpressure on one shard stay on that shard (TCP holds it), and
        closing it releases everything.
        Establishing the stream is retried like a call; failures inside it are raised from
        the iteration as typed errors.
        """
        request = self.codec.encode(
            "SubscribeToShard",
            {
                "ConsumerARN": consumer_arn,
                "ShardId": shard_id,
                "StartingPosition": dict(starting_position),
            },
        )
        response = await self._retrying(
            "SubscribeToShard", None, lambda: self._open_stream(request)
        )
        self.stats.subscriptions += 1
        async with response:
            yield Subscription(response, self.codec, opened_at=time.monotonic(), stats=self.stats)

    async def _open_stream(self, request: EncodedRequest) -> H2Stream:
        headers = await self._signed_headers(request)
        network = self._network
        if network is None:
            raise RuntimeError("KinesisClient is not open: use 'async with KinesisClient(...)'")
        self.stats.attempts += 1
        try:
            response = await H2Stream.open(
                self._url,
                headers,
                request.body,
                ssl_context=network.subscription_ssl,
                connect_timeout=self.config.connect_timeout,
                read_timeout=self.config.subscribe_read_timeout,
                window=self.config.subscribe_window,
                operation=request.operation,
                proxy=network.proxy,
            )
        except errors.TransportError:
            self.stats.transport_errors += 1
            raise
        if response.status != 200:
            async with response:
                body = await response.read_all()
            raise self.codec.decode_error(
                request.operation, response.status, response.headers, body
            )
        return response

    # Conveniences for demos and tests -------------------------------------------------------

    async def create_stream(self, name: str, shard_count: int, wait: bool = True) -> None:
        """Create a provisioned stream; with ``wait``, return once it is ACTIVE.

        Like every wait here, it has no timeout of its own: bound it with ``anyio.fail_after``.
        """
        await self.call("CreateStream", {"StreamName": name, "ShardCount": shard_count})
        if wait:
            await self.wait_for_stream(name)

    async def delete_stream(self, name: str, wait: bool = True) -> None:
        """Delete a stream (and its consumers); with ``wait``, return once it is gone."""
        await self.call("DeleteStream", {"StreamName": name, "EnforceConsumerDeletion": True})
        delay = 0.02
        while wait:
            try:
                await self.call("DescribeStreamSummary", {"StreamName": name})
            except errors.ResourceNotFoundError:
                return
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def wait_for_consumer(self, consumer_arn: str) -> dict[str, Any]:
        """Poll DescribeStreamConsumer until the consumer is ACTIVE; return its description."""
        return await self._wait_until_active(
            "DescribeStreamConsumer",
            {"ConsumerARN": consumer_arn},
            "ConsumerDescription",
            "ConsumerStatus",
        )

    async def wait_for_stream(self, name: str) -> dict[str, Any]:
        """Poll DescribeStreamSummary until the stream is ACTIVE; return its summary."""
        return await self._wait_until_active(
            "DescribeStreamSummary",
            {"StreamName": name},
            "StreamDescriptionSummary",
            "StreamStatus",
        )

    async def _wait_until_active(
        self, operation: str, params: Mapping[str, Any], result_key: str, status_key: str
    ) -> dict[str, Any]:
        delay = 0.02
        while True:
            described: dict[str, Any] = (await self.call(operation, params))[result_key]
            if described[status_key] == "ACTIVE":
                return described
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)
