"""Credentials never appear in a ``repr``, a log line or an error message of ours.

One run with explicit credentials does what an application does (calls, a producer, a
subscription, a proxy with a password, a retried failure, an access denied, a bad argument)
with every logger at DEBUG, and then looks for the secrets in everything it could print.
"""

from __future__ import annotations

import base64
import logging

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.client import ClientConfig, RetryPolicy, RetrySettings
from tests.client.conftest import certificate_endpoint
from tests.connect_proxy import ConnectProxy
from tests.faults import FaultProxy, Reply

pytestmark = pytest.mark.anyio

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLESESSIONTOKENdGhpcyBpcyBub3QgcmVhbA"
PROXY_PASSWORD = "pr0xy-pa55word"
SECRETS = (SECRET_KEY, SESSION_TOKEN, PROXY_PASSWORD)

#: One retry of ListStreams, so that a retry is logged, then the error raised.
_ONE_RETRY = ClientConfig(
    retry=RetryPolicy(overrides={"ListStreams": RetrySettings(max_retries=1, base=0.01)})
)


def _printed(record: logging.LogRecord) -> str:
    """Everything a handler would print for ``record``, traceback included."""
    return logging.Formatter("%(name)s %(levelname)s %(message)s").format(record)


async def test_no_secret_in_any_repr_log_line_or_error(
    behind_proxy: ConnectProxy,
    proxy: FaultProxy,
    local_kinesis: LocalKinesis,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # the root: ours (kinesis_actors.*) and httpx's, h2's
    monkeypatch.setenv("HTTPS_PROXY", behind_proxy.url(f"alice:{PROXY_PASSWORD}@"))
    texts: list[str] = []
    async with KinesisClient(
        local_kinesis.region,
        endpoint_url=certificate_endpoint(local_kinesis),
        credentials=(ACCESS_KEY, SECRET_KEY),
        config=_ONE_RETRY,
    ) as client:
        texts += [repr(client), str(client), repr(client.config), repr(client.proxy)]
        texts += [repr(client._signer), str(client.statistics())]
        await client.create_stream(stream_name, 1)
        async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
            await producer.put(b"x", "k")
            await producer.flush()
        texts.append(repr(producer))
        summary = await client.call("DescribeStreamSummary", {"StreamName": stream_name})
        registered = await client.call(
            "RegisterStreamConsumer",
            {"StreamARN": summary["StreamDescriptionSummary"]["StreamARN"], "ConsumerName": "c"},
        )
        consumer_arn = registered["Consumer"]["ConsumerARN"]
        with anyio.fail_after(30):
            await client.wait_for_consumer(consumer_arn)
            async with client.subscribe_to_shard(
                consumer_arn, "shardId-000000000000", {"Type": "TRIM_HORIZON"}
            ) as subscription:
                async for event in subscription:
                    assert [record["Data"] for record in event["Records"]] == [b"x"]
                    break
                texts.append(repr(subscription))
        behind_proxy.stop()
        with pytest.raises(errors.TransportError) as unreachable:
            await client.call("ListStreams")
        texts += [str(unreachable.value), repr(unreachable.value)]

    proxy.decide = lambda request: (
        Reply.error("AccessDeniedException", f"User {ACCESS_KEY} may not list shards")
        if request.target == "ListShards"
        else None
    )
    async with KinesisClient(
        local_kinesis.region,
        endpoint_url=proxy.endpoint_url,
        credentials=(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN),
    ) as plain:
        texts.append(repr(plain))
        with pytest.raises(errors.AccessDeniedError) as denied:
            await plain.call("ListShards", {"StreamName": stream_name})
        texts += [str(denied.value), repr(denied.value)]
    with pytest.raises(errors.ConfigError) as bad:
        KinesisClient(credentials=[ACCESS_KEY, SECRET_KEY])
    texts += [str(bad.value), repr(bad.value)]
    # Every log line, botocore's too: signing is ours (it logs nothing), so botocore's
    # DEBUG lines of a canonical request, which carried the session token, are gone.
    ours = [_printed(r) for r in caplog.records]
    texts += ours

    # What was looked at: the proxy saw the password (so it was in play), the errors and the
    # retry were logged or raised as expected.
    authorization = "Basic " + base64.b64encode(f"alice:{PROXY_PASSWORD}".encode()).decode()
    assert behind_proxy.authorizations
    assert set(behind_proxy.authorizations) == {authorization}
    assert behind_proxy.address in str(unreachable.value)
    assert any(line.startswith("kinesis_actors.client DEBUG ListStreams failed") for line in ours)
    assert ACCESS_KEY in str(denied.value)  # the service's message is kept, as it should be
    assert "list" in str(bad.value)
    leaks = [text for text in texts for secret in SECRETS if secret in text]
    assert leaks == []
    assert authorization not in "\n".join(texts)
