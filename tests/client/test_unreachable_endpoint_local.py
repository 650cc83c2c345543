"""An endpoint never reached is said at once and given up on after ``open_timeout``: a port
that refuses connections, and a blackhole (accepts, never answers), for both clients.

The warning comes before the error and names the endpoint and the cause; the error is an
EndpointUnreachableError (a TransportError) naming the endpoint, the operation and the cause.
"""

from __future__ import annotations

import logging

import pytest

from kinesis_actors import DynamoDBClient, KinesisClient, LocalKinesis, errors
from kinesis_actors.client import ClientConfig, RetrySettings
from tests.unreachable import Blackhole, Unreachable, warnings_naming

pytestmark = pytest.mark.anyio

#: Small, so that the tests are quick; the default is 30 s.
OPEN_TIMEOUT = 2.0


async def test_an_unreachable_kinesis_endpoint_is_warned_then_raised_as_unreachable(
    unreachable_endpoint: Unreachable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors")
    url = unreachable_endpoint.url
    async with KinesisClient(
        endpoint_url=url, credentials=("a", "b"), config=ClientConfig(open_timeout=OPEN_TIMEOUT)
    ) as client:
        with pytest.raises(errors.EndpointUnreachableError) as caught:
            await client.call("DescribeStreamSummary", {"StreamName": "s"})
    error = caught.value
    assert isinstance(error, errors.TransportError)
    assert error.endpoint == url and error.operation == "DescribeStreamSummary"
    assert unreachable_endpoint.cause in error.cause
    assert f"cannot reach Kinesis at {url} ({unreachable_endpoint.cause}" in str(error)
    assert str(error).startswith("DescribeStreamSummary: ")
    warned = warnings_naming(caplog.records, url)
    assert len(warned) == 1 and unreachable_endpoint.cause in warned[0]
    assert "open_timeout" in warned[0]


async def test_an_unreachable_dynamodb_endpoint_is_warned_then_raised_as_unreachable(
    unreachable_endpoint: Unreachable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors")
    url = unreachable_endpoint.url
    async with DynamoDBClient(
        endpoint_url=url, credentials=("a", "b"), config=ClientConfig(open_timeout=OPEN_TIMEOUT)
    ) as client:
        with pytest.raises(errors.EndpointUnreachableError) as caught:
            await client.call("DescribeTable", {"TableName": "t"})
    assert f"cannot reach DynamoDB at {url} ({unreachable_endpoint.cause}" in str(caught.value)
    assert warnings_naming(caplog.records, url)


async def test_a_blackhole_over_http2_is_unreachable_too(caplog: pytest.LogCaptureFixture) -> None:
    """httpx's path (``http2=True``) has the same bound before first contact."""
    caplog.set_level(logging.WARNING, "kinesis_actors")
    with Blackhole() as hole:
        config = ClientConfig(open_timeout=OPEN_TIMEOUT, http2=True)
        async with KinesisClient(endpoint_url=hole.url, credentials=("a", "b"), config=config) as c:
            with pytest.raises(errors.EndpointUnreachableError) as caught:
                await c.call("ListStreams", {})
    assert "no answer within" in caught.value.cause
    assert warnings_naming(caplog.records, hole.url)


async def test_after_first_contact_a_stopped_server_is_retried_as_before() -> None:
    """Once the endpoint has answered, the client's patience is the retry policy's again:
    the failure is a plain TransportError after the operation's retries, not an
    EndpointUnreachableError, however small ``open_timeout`` is."""
    with LocalKinesis() as server:
        async with KinesisClient(
            region=server.region,
            endpoint_url=server.endpoint_url,
            credentials=server.credentials,
            config=ClientConfig(open_timeout=5.0),
        ) as client:
            await client.call("ListStreams", {})
            server.stop()
            with pytest.raises(errors.TransportError) as caught:
                await client.call("ListStreams", {}, retry=RetrySettings(3, 0.01, 0.05))
    assert not isinstance(caught.value, errors.EndpointUnreachableError)


async def test_a_blackhole_fails_a_subscription_before_first_contact_as_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SubscribeToShard's own transport has the same bound: the TLS handshake with a silent
    listener is "no answer" within the first contact's attempt bound."""
    caplog.set_level(logging.WARNING, "kinesis_actors")
    with Blackhole() as hole:
        url = hole.url.replace("http://", "https://")
        config = ClientConfig(open_timeout=OPEN_TIMEOUT)
        async with KinesisClient(
            endpoint_url=url, verify=False, credentials=("a", "b"), config=config
        ) as client:
            with pytest.raises(errors.EndpointUnreachableError) as caught:
                async with client.subscribe_to_shard(
                    "arn", "shardId-000000000000", {"Type": "LATEST"}
                ):
                    pass  # pragma: no cover - the connection fails first
    assert caught.value.operation == "SubscribeToShard"
    assert "no answer within" in caught.value.cause
    assert warnings_naming(caplog.records, url)
