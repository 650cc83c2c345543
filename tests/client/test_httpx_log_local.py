"""httpx's per-request INFO lines ("HTTP Request: POST ...") for our HTTP/2 calls are DEBUG,
shown when the user sets the ``httpx`` logger to DEBUG; other httpx clients are left alone."""

from __future__ import annotations

import logging

import httpx
import pytest

from kinesis_actors import KinesisClient, LocalKinesis
from kinesis_actors.client import ClientConfig

pytestmark = pytest.mark.anyio


async def test_the_transports_request_lines_stay_out_of_info_unless_asked_for(
    local_kinesis: LocalKinesis, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx's "HTTP Request: POST ..." for our HTTP/2 calls is DEBUG, shown only when the
    ``httpx`` logger is set to DEBUG; another httpx client's lines are left alone."""
    caplog.set_level(logging.INFO)
    config = ClientConfig(http2=True)
    async with KinesisClient(
        region=local_kinesis.region,
        endpoint_url=local_kinesis.tls_endpoint_url,
        verify=False,
        credentials=local_kinesis.credentials,
        config=config,
    ) as client:
        await client.call("ListStreams", {})
        assert not [r for r in caplog.records if r.name == "httpx"]
        caplog.set_level(logging.DEBUG, "httpx")  # how a user asks for them
        await client.call("ListStreams", {})
        asked = [r for r in caplog.records if r.name == "httpx"]
        assert asked and all(r.levelno == logging.DEBUG for r in asked)
        assert "HTTP Request: POST" in asked[0].getMessage()
    caplog.clear()
    async with httpx.AsyncClient() as theirs:
        await theirs.post(local_kinesis.endpoint_url, content=b"{}")
    assert [r.levelno for r in caplog.records if r.name == "httpx"] == [logging.INFO]
