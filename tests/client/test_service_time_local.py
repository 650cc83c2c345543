"""The service's clock as the replies tell it: what a position chosen by time is pinned to,
whatever this host's clock says."""

from __future__ import annotations

import time

import pytest

from kinesis_actors import KinesisClient, LocalKinesis
from kinesis_actors.client import service_now

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("skew", [30.0, -30.0], ids=["fast", "slow"])
async def test_the_service_time_follows_the_replies_date_not_this_hosts_clock(
    local_kinesis: LocalKinesis, monkeypatch: pytest.MonkeyPatch, skew: float
) -> None:
    real = time.time
    async with local_kinesis.client(tls=False) as client:
        assert client.service_time() is None  # nothing answered yet
        monkeypatch.setattr(time, "time", lambda: real() + skew)
        await client.call("ListStreams", {})
        told = client.service_time()
        now = real()
    assert told is not None
    # The local server shares the true clock; the Date has whole seconds: up to 1 s behind.
    assert now - 1.5 <= told <= now + 0.1
    assert abs(service_now(client).timestamp() - now) < 2.0


def test_a_client_that_cannot_tell_gives_this_hosts_time() -> None:
    before = time.time()
    assert before - 1 <= service_now(object()).timestamp() <= time.time() + 1


async def test_a_client_before_its_first_reply_gives_this_hosts_time(
    local_kinesis: LocalKinesis,
) -> None:
    async with KinesisClient(
        endpoint_url=local_kinesis.endpoint_url, credentials=local_kinesis.credentials
    ) as client:
        before = time.time()
        assert before - 1 <= service_now(client).timestamp() <= time.time() + 1
