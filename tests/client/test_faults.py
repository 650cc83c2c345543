"""Faults the local server cannot produce, injected by a proxy in front of it."""

from __future__ import annotations

import pytest

from kinesis_actors import ClientConfig, KinesisClient, LocalKinesis, errors
from kinesis_actors.client import RetryPolicy, RetrySettings
from tests.faults import Cut, FaultProxy, Reply, Request

pytestmark = pytest.mark.anyio

FAST = RetrySettings(max_retries=3, base=0.001, max=0.005)


def _client(proxy: FaultProxy, local_kinesis: LocalKinesis) -> KinesisClient:
    return KinesisClient(
        region=local_kinesis.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ClientConfig(retry=RetryPolicy(default=FAST, overrides={"ListStreams": FAST})),
    )


def _first(n: int, fault: Cut | Reply) -> object:
    seen = 0

    def decide(request: Request) -> Cut | Reply | None:
        nonlocal seen
        seen += 1
        return fault if seen <= n else None

    return decide


async def test_a_connection_dropped_mid_request_is_retried(
    proxy: FaultProxy, local_kinesis: LocalKinesis
) -> None:
    proxy.decide = _first(2, Cut())  # type: ignore[assignment]
    async with _client(proxy, local_kinesis) as kinesis:
        result = await kinesis.call("ListStreams", {})
    assert "StreamNames" in result
    assert proxy.stats.faults == {"cut": 2}
    assert proxy.stats.forwarded == 1
    assert kinesis.statistics().retries == 2
    assert kinesis.statistics().transport_errors == 2


async def test_throttling_is_retried_then_surfaces_as_throttling_error(
    proxy: FaultProxy, local_kinesis: LocalKinesis
) -> None:
    proxy.decide = lambda request: Reply.error("ProvisionedThroughputExceededException")
    async with _client(proxy, local_kinesis) as kinesis:
        with pytest.raises(errors.ThrottlingError) as caught:
            await kinesis.call("ListStreams", {})
    assert caught.value.code == "ProvisionedThroughputExceededException"
    assert proxy.stats.requests == FAST.max_retries + 1
    assert kinesis.statistics().throttled == FAST.max_retries + 1


async def test_throttling_that_clears_succeeds(
    proxy: FaultProxy, local_kinesis: LocalKinesis
) -> None:
    proxy.decide = _first(2, Reply.error("LimitExceededException"))  # type: ignore[assignment]
    async with _client(proxy, local_kinesis) as kinesis:
        await kinesis.call("ListStreams", {})
    assert kinesis.statistics().retries == 2


async def test_a_server_error_is_retried(proxy: FaultProxy, local_kinesis: LocalKinesis) -> None:
    proxy.decide = _first(1, Reply(503, b"unavailable", "text/plain"))  # type: ignore[assignment]
    async with _client(proxy, local_kinesis) as kinesis:
        await kinesis.call("ListStreams", {})
    assert kinesis.statistics().retries == 1


async def test_a_fatal_error_is_not_retried(proxy: FaultProxy, local_kinesis: LocalKinesis) -> None:
    proxy.decide = lambda request: Reply.error("AccessDeniedException", "no", 400)
    async with _client(proxy, local_kinesis) as kinesis:
        with pytest.raises(errors.AccessDeniedError):
            await kinesis.call("ListStreams", {})
    assert proxy.stats.requests == 1
    assert kinesis.statistics().retries == 0


async def test_a_refused_connection_is_a_transport_error_after_retries(
    local_kinesis: LocalKinesis,
) -> None:
    with FaultProxy(local_kinesis.plain_port) as gone:
        endpoint = gone.endpoint_url
    # The proxy is stopped: nothing listens on its port any more.
    async with KinesisClient(
        endpoint_url=endpoint,
        credentials=local_kinesis.credentials,
        config=ClientConfig(retry=RetryPolicy(overrides={"ListStreams": FAST})),
    ) as kinesis:
        # Never reached: the retries end in EndpointUnreachableError, a TransportError.
        with pytest.raises(errors.EndpointUnreachableError, match="connection refused"):
            await kinesis.call("ListStreams", {})
    assert kinesis.statistics().attempts == FAST.max_retries + 1
