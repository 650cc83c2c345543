"""A producer whose endpoint was never reached fails its open within ``open_timeout``, after a
warning naming the endpoint: a port that refuses connections, and a blackhole."""

from __future__ import annotations

import logging

import pytest

from kinesis_actors import KinesisClient, Producer, errors
from kinesis_actors.client import ClientConfig
from kinesis_actors.sync import SyncProducer
from tests.unreachable import Unreachable, warnings_naming

pytestmark = pytest.mark.anyio

#: Small, so that the tests are quick; the default is 30 s.
OPEN_TIMEOUT = 2.0


def _check(error: errors.EndpointUnreachableError, endpoint: Unreachable, log: list[str]) -> None:
    assert error.endpoint == endpoint.url and endpoint.cause in error.cause
    assert f"cannot reach Kinesis at {endpoint.url}" in str(error)
    assert len(log) == 1 and endpoint.cause in log[0]  # the warning, once, before the error


async def test_an_unreachable_endpoint_fails_the_producer_open_after_a_warning(
    unreachable_endpoint: Unreachable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors")
    config = ClientConfig(open_timeout=OPEN_TIMEOUT)
    async with KinesisClient(
        endpoint_url=unreachable_endpoint.url, credentials=("a", "b"), config=config
    ) as client:
        with pytest.raises(errors.EndpointUnreachableError) as caught:
            async with Producer(client, "orders"):
                pass  # pragma: no cover - the open fails
    _check(
        caught.value,
        unreachable_endpoint,
        warnings_naming(caplog.records, unreachable_endpoint.url),
    )


def test_an_unreachable_endpoint_fails_the_sync_producer_at_construction(
    unreachable_endpoint: Unreachable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors")
    with pytest.raises(errors.EndpointUnreachableError) as caught:
        SyncProducer(
            "orders",
            endpoint_url=unreachable_endpoint.url,
            credentials=("a", "b"),
            client_config=ClientConfig(open_timeout=OPEN_TIMEOUT),
        )
    _check(
        caught.value,
        unreachable_endpoint,
        warnings_naming(caplog.records, unreachable_endpoint.url),
    )
