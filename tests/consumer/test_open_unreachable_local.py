"""A consumer whose endpoint was never reached fails its open within ``open_timeout``, after a
warning naming the endpoint: a port that refuses connections, and a blackhole; for the Kinesis
endpoint, and for a lease group's DynamoDB endpoint."""

from __future__ import annotations

import logging

import pytest

from kinesis_actors import Consumer, ConsumerConfig, KinesisClient, LocalKinesis, errors
from kinesis_actors.client import ClientConfig
from tests.unreachable import Unreachable, warnings_naming

pytestmark = pytest.mark.anyio

#: Small, so that the tests are quick; the default is 30 s.
OPEN_TIMEOUT = 2.0


async def test_an_unreachable_endpoint_fails_the_consumer_open_after_a_warning(
    unreachable_endpoint: Unreachable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors")
    config = ClientConfig(open_timeout=OPEN_TIMEOUT)
    async with KinesisClient(
        endpoint_url=unreachable_endpoint.url, credentials=("a", "b"), config=config
    ) as client:
        with pytest.raises(errors.EndpointUnreachableError) as caught:
            async with Consumer(client, "orders"):
                pass  # pragma: no cover - the open fails
    assert caught.value.endpoint == unreachable_endpoint.url
    assert f"cannot reach Kinesis at {unreachable_endpoint.url}" in str(caught.value)
    warned = warnings_naming(caplog.records, unreachable_endpoint.url)
    assert len(warned) == 1 and unreachable_endpoint.cause in warned[0]


async def test_an_unreachable_lease_table_endpoint_fails_the_group_open_after_a_warning(
    unreachable_endpoint: Unreachable,
    local_kinesis: LocalKinesis,
    stream_name: str,
    lease_table_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors")
    config = ConsumerConfig(
        lease_table=lease_table_name, dynamodb_endpoint_url=unreachable_endpoint.url
    )
    async with KinesisClient(
        region=local_kinesis.region,
        endpoint_url=local_kinesis.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ClientConfig(open_timeout=OPEN_TIMEOUT),  # the lease table's client takes it too
    ) as client:
        await client.create_stream(stream_name, 1)
        with pytest.raises(errors.EndpointUnreachableError) as caught:
            async with Consumer(client, stream_name, config):
                pass  # pragma: no cover - the open fails
    assert caught.value.endpoint == unreachable_endpoint.url
    assert f"cannot reach DynamoDB at {unreachable_endpoint.url}" in str(caught.value)
    warned = warnings_naming(caplog.records, unreachable_endpoint.url)
    assert len(warned) == 1 and unreachable_endpoint.cause in warned[0]
