"""One signed, retried HTTP call per operation, for any AWS JSON service: the base of
:class:`~kinesis_actors.client.KinesisClient` and :class:`~kinesis_actors.client.DynamoDBClient`.

The I/O is ``_transport``'s: a lean pool of HTTP/1.1 connections by default (``_http1``),
httpx when HTTP/2 is asked for. Protocol, signing and retry decisions live in sans-IO helpers
beside this module; a subclass names its service and adds the conveniences of that service.
What the caller does not set follows botocore's configuration: the endpoint, the credentials,
the CA bundle (``_tls``) and the proxy (``_proxy``).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar
from urllib.parse import urlsplit

import anyio
import botocore.session

from .. import errors
from .._deprecated import renamed
from .._validate import check_type
from ._config import ClientConfig
from ._contact import FirstContact
from ._protocol import EncodedRequest, ProtocolCodec
from ._proxy import Proxy, resolve_proxy
from ._retry import RetrySettings
from ._signing import Credentials, Signer, resolve_credentials
from ._tls import resolve_verify, ssl_contexts
from ._transport import Transport, new_transport

__all__ = ["ClientCounters", "ClientStats", "ServiceClient", "service_now"]

log = logging.getLogger("kinesis_actors.client")

_T = TypeVar("_T")

#: How long closing a connection may take when the caller is being cancelled.
_CLOSE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class ClientStats:
    """A snapshot of the client's counters since it opened (``client.statistics()``).

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


class ClientCounters:
    """The live counters behind :class:`ClientStats`, written only by the client that owns
    them (and the subscriptions it opens), on its event loop; everyone else reads
    :meth:`statistics`."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts = dict.fromkeys(ClientStats.__dataclass_fields__, 0)

    def add(self, name: str, amount: int = 1) -> None:
        self._counts[name] += amount

    def statistics(self) -> ClientStats:
        return ClientStats(**self._counts)


def _resolve_endpoint(service: str, region: str) -> str:
    client = botocore.session.get_session().create_client(service, region_name=region)
    endpoint: str = client.meta.endpoint_url
    return endpoint


@dataclass(frozen=True, slots=True)
class Network:
    """What botocore's configuration decides about the connections (see ``_tls``,
    ``_proxy``): the TLS contexts (None for an ``http://`` endpoint) and the proxy, if any."""

    pool_ssl: ssl.SSLContext | None
    subscription_ssl: ssl.SSLContext | None
    proxy: Proxy | None


def _resolve_network(endpoint_url: str, verify: bool | str) -> Network:
    """Blocking (config files, CA files): run it in a worker thread.

    An ``http://`` endpoint gets no TLS contexts: building the two (and loading the CA
    bundle into each) took about 40 ms of CPU, which every short-lived client paid for
    nothing (a Spark task opening a client to a local server spent a third of its time here).
    """
    proxy = resolve_proxy(endpoint_url)
    if urlsplit(endpoint_url).scheme == "http":
        return Network(None, None, proxy)
    pool_ssl, subscription_ssl = ssl_contexts(resolve_verify(verify))
    return Network(pool_ssl, subscription_ssl, proxy)


class ServiceClient:
    """An async client for every operation of one AWS JSON service, with signing, retries
    and typed errors. Subclasses set :attr:`SERVICE` (botocore's name for the service).

    Use it as an async context manager. Credentials default to botocore's chain; a tuple
    ``(access_key, secret_key)`` or ``(access_key, secret_key, token)`` is accepted (and kept
    as a botocore credentials object, out of any ``repr``). ``verify`` is True (verify, with
    botocore's configured CA bundle: ``AWS_CA_BUNDLE`` or the config file's ``ca_bundle``,
    else certifi's), False (for a local server's self-signed certificate) or the path of a
    CA bundle. The endpoint, unless given, is botocore's for the region. Calls go through the
    proxy botocore would use (``HTTPS_PROXY``, ``NO_PROXY``).
    """

    SERVICE: ClassVar[str] = "kinesis"

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
        self._counters = ClientCounters()
        self._credentials = credentials
        self._codec: ProtocolCodec | None = None
        self._signer: Signer | None = None
        self._http: Transport | None = None
        self._network: Network | None = None
        self._url = ""
        self._contact = FirstContact("", self.SERVICE, config.open_timeout)
        # The last reply's Date header and when (monotonic) it arrived: see service_time().
        self._service_date: str | None = None
        self._service_date_at = 0.0

    def __repr__(self) -> str:
        proxy = self._network.proxy if self._network is not None else None
        through = f", proxy='{proxy}'" if proxy is not None else ""
        name = type(self).__name__
        return f"{name}(region={self.region!r}, endpoint_url={self.endpoint_url!r}{through})"

    def statistics(self) -> ClientStats:
        """The counters now, as a frozen :class:`ClientStats` (calls, attempts, retries,
        throttles, transport errors, subscriptions, malformed replies)."""
        return self._counters.statistics()

    @property
    def stats(self) -> ClientStats:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed(f"{type(self).__name__}.stats", f"{type(self).__name__}.statistics()")
        return self._counters.statistics()

    def service_time(self) -> float | None:
        """The service's wall clock now (epoch seconds) as its replies tell it, never later
        than the truth: the last reply's ``Date`` header (whole seconds, stamped before the
        reply left) plus the time passed on our monotonic clock since it arrived. None before
        the first reply with a ``Date``.

        A position chosen by time (a ``LATEST`` start pinned for a later reader) is compared
        with the service's arrival timestamps, so it is taken from the service's clock, not
        this host's: a host whose clock runs fast would otherwise pin a time the records
        written meanwhile arrived before, and they would be skipped.
        """
        date = self._service_date
        if date is None:
            return None
        try:
            stamped = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return None
        return stamped + (time.monotonic() - self._service_date_at)

    @property
    def proxy(self) -> Proxy | None:
        """The proxy calls go through (known once open), or None."""
        return self._network.proxy if self._network is not None else None

    def _not_open(self) -> RuntimeError:
        name = type(self).__name__
        return RuntimeError(f"{name} is not open: use 'async with {name}(...)'")

    async def __aenter__(self) -> Self:
        # Loading the service model, resolving credentials and reading CA files all block.
        service = self.SERVICE
        self._codec = await anyio.to_thread.run_sync(lambda: ProtocolCodec(service=service))
        if self.endpoint_url is None:
            self.endpoint_url = await anyio.to_thread.run_sync(
                _resolve_endpoint, service, self.region
            )
        self._url = self.endpoint_url.rstrip("/") + "/"
        self._contact = FirstContact(self.endpoint_url, service, self.config.open_timeout)
        credentials = await anyio.to_thread.run_sync(resolve_credentials, self._credentials)
        self._signer = Signer(credentials, self.region, service)
        if self._signer.needs_refresh():
            # Credentials fetched on first use (an assumed role's) are fetched now, so that
            # a role that cannot be assumed fails the ``async with``, naming it.
            await anyio.to_thread.run_sync(self._signer.refresh)
        self._network = await anyio.to_thread.run_sync(
            _resolve_network, self.endpoint_url, self.verify
        )
        self._http = new_transport(
            self._url, self.config, self._network.pool_ssl, self._network.proxy
        )
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

    @property
    def codec(self) -> ProtocolCodec:
        if self._codec is None:
            raise self._not_open()
        return self._codec

    async def call(
        self,
        operation: str,
        params: Mapping[str, Any] | None = None,
        *,
        retry: RetrySettings | None = None,
        epoch_timestamps: bool = False,
    ) -> dict[str, Any]:
        """Run one operation and return its result in boto3's low-level shapes.

        Retryable failures (throttling, 5xx, connection resets, timeouts) are retried with
        capped exponential backoff and full jitter per the operation's
        :class:`RetrySettings` (or ``retry``); the last failure is raised as its typed error.
        ``epoch_timestamps``: GetRecords' records carry ``ApproximateArrivalTimestamp`` as
        float epoch seconds (as the wire does), not a datetime, for readers that want a
        number (it saves 0.37 us a record whose timestamp differs from the one before);
        other operations' replies, and other services', are not changed by it.
        """
        request = self.codec.encode(operation, params or {})
        if epoch_timestamps:
            request = replace(request, epoch_timestamps=True)
        return await self.send(request, retry=retry)

    async def send(
        self, request: EncodedRequest, *, retry: RetrySettings | None = None
    ) -> dict[str, Any]:
        """Run a request already encoded with :attr:`codec` (say by its hand-written
        ``encode_put_records``); retried like :meth:`call`, whose second half it is."""
        self._counters.add("calls")
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
                if retry and isinstance(exc, errors.ConditionalCheckFailedError):
                    # An earlier attempt may have written and lost only its reply: the
                    # condition then fails on our own write.
                    exc.retried = True
                delay = policy.next_delay(
                    operation, exc, retry, settings=settings, service=self.SERVICE
                )
                verdict = self._contact.failed(exc, operation, delay, time.monotonic())
                if verdict.warning is not None:
                    log.warning("%s", verdict.warning, extra={"first_contact": True})
                if verdict.give_up is not None:
                    raise verdict.give_up from exc
                delay = verdict.delay
                if delay is None:
                    raise
                self._counters.add("retries")
                log.debug("%s failed (%s); retry %d in %.3fs", operation, exc, retry + 1, delay)
                await anyio.sleep(delay)
                retry += 1

    async def _signed_headers(self, request: EncodedRequest) -> dict[str, str]:
        signer = self._signer
        if signer is None:
            raise self._not_open()
        if signer.needs_refresh():
            await anyio.to_thread.run_sync(signer.refresh)
        return signer.sign(self._url, request.headers, request.body)

    async def _first_contact(self, attempt: Callable[[], Awaitable[_T]], operation: str) -> _T:
        """``attempt``'s result (an attempt that ends with the reply's head, like opening a
        subscription); until the endpoint has answered once, bounded by the first contact's
        attempt timeout (a silent listener is "no answer" within seconds), and its success
        marks the endpoint reached (see ``_contact``)."""
        contact = self._contact
        limit = contact.attempt_timeout(time.monotonic())
        if limit is None:
            return await attempt()
        with anyio.move_on_after(limit):
            result = await attempt()
            contact.answered()
            return result
        message = f"NoAnswer: no answer within {limit:.3g} s"
        raise errors.TransportError(message, operation=operation)

    async def _send(self, request: EncodedRequest) -> dict[str, Any]:
        http = self._http
        if http is None:
            raise self._not_open()
        headers = await self._signed_headers(request)
        self._counters.add("attempts")
        try:
            contact = self._contact
            patience = None if contact.reached else contact.attempt_timeout(time.monotonic())
            reply = await http.post(headers, request.body, request.operation, patience=patience)
            if patience is not None:
                contact.answered()
        except errors.TransportError:
            self._counters.add("transport_errors")
            raise
        date = reply.headers.get("date")
        if date is not None:  # parsed only when asked for: this runs for every call
            self._service_date, self._service_date_at = date, time.monotonic()
        try:
            return self.codec.decode(
                request.operation,
                reply.status,
                reply.headers,
                reply.body,
                record_count=request.record_count,
                epoch_timestamps=request.epoch_timestamps,
            )
        except errors.ThrottlingError:
            self._counters.add("throttled")
            raise
        except errors.MalformedReplyError:
            self._counters.add("malformed_replies")
            raise


def service_now(client: object) -> datetime:
    """The service's time now by ``client.service_time()`` (a lower bound, see
    :meth:`ServiceClient.service_time`), else this host's for a client that cannot tell."""
    service_time = getattr(client, "service_time", None)
    now = service_time() if callable(service_time) else None
    if isinstance(now, float):
        return datetime.fromtimestamp(now, UTC)
    return datetime.now(UTC)
