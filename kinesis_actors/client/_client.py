"""The async Kinesis client: one signed, retried HTTP call per operation.

``KinesisClient.call`` runs any operation of the service model (the machinery is
``_service.ServiceClient``'s, shared with the DynamoDB client). SubscribeToShard has its own
HTTP/2 transport (``_h2pool``: streams multiplexed over a few connections). What the caller
does not set follows botocore's configuration: the endpoint, the credentials, the CA bundle
(``_tls``) and the proxy (``_proxy``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import anyio

from .. import errors
from ._h2pool import H2Pool, H2PoolStatistics
from ._h2stream import H2Stream
from ._protocol import EncodedRequest
from ._service import ClientStats, ServiceClient
from ._subscription import Subscription

__all__ = ["ClientStats", "KinesisClient"]


class KinesisClient(ServiceClient):
    """An async client for every Kinesis operation, with signing, retries and typed errors.

    Use it as an async context manager. Credentials default to botocore's chain; a tuple
    ``(access_key, secret_key)`` or ``(access_key, secret_key, token)`` is accepted (and kept
    as a botocore credentials object, out of any ``repr``). ``verify`` is True (verify, with
    botocore's configured CA bundle: ``AWS_CA_BUNDLE`` or the config file's ``ca_bundle``,
    else certifi's), False (for the local server's self-signed certificate) or the path of a
    CA bundle. The endpoint, unless given, is botocore's for the region. Calls and
    subscriptions go through the proxy botocore would use (``HTTPS_PROXY``, ``NO_PROXY``).
    """

    SERVICE: ClassVar[str] = "kinesis"

    _subscriptions: H2Pool | None = None

    def subscription_statistics(self) -> H2PoolStatistics:
        """The SubscribeToShard connections open now and the streams they carry."""
        pool = self._subscriptions
        return pool.statistics() if pool is not None else H2PoolStatistics(0, 0)

    async def aclose(self) -> None:
        """Close the subscriptions' connections and the connection pool; bounded in time
        even when cancelled."""
        pool, self._subscriptions = self._subscriptions, None
        if pool is not None:
            await pool.aclose()
        await super().aclose()

    @asynccontextmanager
    async def subscribe_to_shard(
        self,
        consumer_arn: str,
        shard_id: str,
        starting_position: Mapping[str, Any],
        *,
        epoch_timestamps: bool = False,
    ) -> AsyncIterator[Subscription]:
        """Open a SubscribeToShard stream; yields a :class:`Subscription` of decoded events
        (with ``epoch_timestamps``, records' arrival times as float epoch seconds, as for
        :meth:`call`).

        Subscriptions share HTTP/2 connections, up to
        ``config.subscriptions_per_connection`` on one (see ``_h2pool``). A subscription
        left unread holds at most its stream window (``config.subscribe_window``); each
        connection's window covers all its streams' windows, so backpressure on one shard
        stays on that shard, and closing a stream early hands its credit back (``_h2flow``).
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
        self._counters.add("subscriptions")
        async with response:
            yield Subscription(
                response,
                self.codec,
                opened_at=time.monotonic(),
                counters=self._counters,
                epoch_timestamps=epoch_timestamps,
            )

    async def _open_stream(self, request: EncodedRequest) -> H2Stream:
        headers = await self._signed_headers(request)
        network = self._network
        if network is None:
            raise self._not_open()
        self._counters.add("attempts")
        pool = self._subscriptions
        if pool is None:
            pool = self._subscriptions = H2Pool(
                self._url,
                ssl_context=network.subscription_ssl,
                proxy=network.proxy,
                connect_timeout=self.config.connect_timeout,
                read_timeout=self.config.subscribe_read_timeout,
                window=self.config.subscribe_window,
                subscriptions_per_connection=self.config.subscriptions_per_connection,
                operation=request.operation,
            )
        try:
            response = await self._first_contact(
                lambda: H2Stream.on(pool, headers, request.body), request.operation
            )
        except errors.TransportError:
            self._counters.add("transport_errors")
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
