"""The client behind a corporate proxy with TLS inspection, for real.

``HTTPS_PROXY`` names a loopback CONNECT proxy and ``AWS_CA_BUNDLE`` the local server's
certificate; ``verify`` stays at its default. Unary calls (httpx), a producer and a
SubscribeToShard stream (our own HTTP/2 transport) all go through the proxy's tunnels and
verify the server's certificate, chain and name (see ``conftest.py`` for the name).
"""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import certifi
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.client import ClientConfig, RetryPolicy, RetrySettings
from kinesis_actors.records import deaggregate
from tests.client.conftest import certificate_endpoint
from tests.connect_proxy import ConnectProxy

pytestmark = pytest.mark.anyio

#: One attempt per operation: the failures below are then raised at once.
_ONCE = ClientConfig(
    retry=RetryPolicy(
        overrides={op: RetrySettings(max_retries=0) for op in ("ListStreams", "SubscribeToShard")}
    )
)


def _client(local: LocalKinesis, endpoint_url: str, **kwargs: object) -> KinesisClient:
    return KinesisClient(
        region=local.region,
        endpoint_url=endpoint_url,
        credentials=local.credentials,
        **kwargs,  # type: ignore[arg-type]
    )


async def _consumer(client: KinesisClient, stream: str) -> str:
    summary = await client.call("DescribeStreamSummary", {"StreamName": stream})
    registered = await client.call(
        "RegisterStreamConsumer",
        {"StreamARN": summary["StreamDescriptionSummary"]["StreamARN"], "ConsumerName": "efo"},
    )
    consumer_arn: str = registered["Consumer"]["ConsumerARN"]
    with anyio.fail_after(10):
        await client.wait_for_consumer(consumer_arn)
    return consumer_arn


async def test_calls_and_a_producer_go_through_the_proxy_verified_by_aws_ca_bundle(
    behind_proxy: ConnectProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    endpoint = certificate_endpoint(local_kinesis)
    async with _client(local_kinesis, endpoint) as client:
        assert client.verify is True
        assert str(client.proxy) == behind_proxy.address
        await client.create_stream(stream_name, 1)
        async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
            handles = [await producer.put(b"record-%d" % i, f"k{i}") for i in range(20)]
            await producer.flush()
        assert all(handle.result().shard_id == "shardId-000000000000" for handle in handles)
        iterator = await client.call(
            "GetShardIterator",
            {
                "StreamName": stream_name,
                "ShardId": "shardId-000000000000",
                "ShardIteratorType": "TRIM_HORIZON",
            },
        )
        got = await client.call("GetRecords", {"ShardIterator": iterator["ShardIterator"]})
    user_records = [
        user.data
        for record in got["Records"]
        for user in deaggregate(record["Data"], record["PartitionKey"])
    ]
    assert sorted(user_records) == sorted(b"record-%d" % i for i in range(20))
    assert behind_proxy.tunnels >= 1
    assert {target.lower() for target in behind_proxy.targets} == {
        f"unknown:{local_kinesis.tls_port}"
    }


async def test_a_subscription_is_a_tunnel_of_its_own_with_tls_and_http2_inside(
    behind_proxy: ConnectProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with _client(local_kinesis, certificate_endpoint(local_kinesis)) as client:
        await client.create_stream(stream_name, 1)
        consumer_arn = await _consumer(client, stream_name)
        await client.call(
            "PutRecords",
            {
                "StreamName": stream_name,
                "Records": [{"Data": b"efo-%d" % i, "PartitionKey": "k"} for i in range(3)],
            },
        )
        before = behind_proxy.tunnels
        received: list[bytes] = []
        with anyio.fail_after(30):
            async with client.subscribe_to_shard(
                consumer_arn, "shardId-000000000000", {"Type": "TRIM_HORIZON"}
            ) as subscription:
                assert behind_proxy.tunnels == before + 1
                assert subscription.http_version == "HTTP/2"
                async for event in subscription:
                    received.extend(record["Data"] for record in event["Records"])
                    if len(received) >= 3:
                        break
    assert received == [b"efo-0", b"efo-1", b"efo-2"]
    assert client.statistics().subscriptions == 1


async def test_a_stopped_proxy_is_named_in_a_typed_error(
    behind_proxy: ConnectProxy, local_kinesis: LocalKinesis
) -> None:
    async with _client(local_kinesis, certificate_endpoint(local_kinesis), config=_ONCE) as client:
        behind_proxy.stop()
        with pytest.raises(errors.TransportError) as unary:
            await client.call("ListStreams")
        with pytest.raises(errors.TransportError) as stream:
            async with client.subscribe_to_shard("arn", "shardId-000000000000", {"Type": "LATEST"}):
                pass  # pragma: no cover - the connection fails first
    for caught in (unary, stream):
        assert not isinstance(caught.value, errors.CertificateError)
        assert behind_proxy.address in str(caught.value)
    assert "cannot be reached" in str(stream.value)
    assert client.statistics().transport_errors == 2


async def test_no_proxy_for_the_endpoint_host_goes_direct(
    behind_proxy: ConnectProxy,
    local_kinesis: LocalKinesis,
    monkeypatch: pytest.MonkeyPatch,
    stream_name: str,
) -> None:
    """Direct, so the name is 127.0.0.1: the bundle (still in force) refuses the certificate
    for that name, and an explicit ``verify=False`` wins over the bundle."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with _client(local_kinesis, local_kinesis.tls_endpoint_url, config=_ONCE) as client:
        assert client.proxy is None
        with pytest.raises(errors.CertificateError, match=r"127\.0\.0\.1"):
            await client.call("ListStreams")
    async with _client(local_kinesis, local_kinesis.tls_endpoint_url, verify=False) as client:
        await client.create_stream(stream_name, 1)
        consumer_arn = await _consumer(client, stream_name)
        with anyio.fail_after(30):
            async with client.subscribe_to_shard(
                consumer_arn, "shardId-000000000000", {"Type": "TRIM_HORIZON"}
            ) as subscription:
                assert subscription.http_version == "HTTP/2"
                async for event in subscription:
                    assert event["Records"] == []
                    break
        assert subscription.events_received == 1
    assert behind_proxy.tunnels == 0
    assert behind_proxy.targets == []


async def test_an_explicit_ca_bundle_wins_over_aws_ca_bundle(
    behind_proxy: ConnectProxy, local_kinesis: LocalKinesis
) -> None:
    endpoint = certificate_endpoint(local_kinesis)
    async with _client(local_kinesis, endpoint, verify=certifi.where(), config=_ONCE) as client:
        with pytest.raises(errors.CertificateError, match=behind_proxy.address):
            await client.call("ListStreams")
        with pytest.raises(errors.CertificateError):
            async with client.subscribe_to_shard("arn", "shardId-000000000000", {"Type": "LATEST"}):
                pass  # pragma: no cover - the handshake fails first
    assert behind_proxy.tunnels == 2


async def test_the_config_file_ca_bundle_is_used_without_aws_ca_bundle(
    behind_proxy: ConnectProxy,
    local_kinesis: LocalKinesis,
    server_certificate: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.delenv("AWS_CA_BUNDLE")
    config = tmp_path / "config"
    config.write_text(f"[default]\nca_bundle = {server_certificate}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    async with _client(local_kinesis, certificate_endpoint(local_kinesis)) as client:
        listed = await client.call("ListStreams")
    assert isinstance(listed["StreamNames"], list)
    assert behind_proxy.tunnels == 1


async def test_a_tunnel_the_proxy_refuses_is_a_typed_error_with_its_status(
    behind_proxy: ConnectProxy, local_kinesis: LocalKinesis
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    async with _client(local_kinesis, f"https://Unknown:{closed_port}", config=_ONCE) as client:
        with pytest.raises(errors.TransportError) as unary:
            await client.call("ListStreams")
        with pytest.raises(errors.TransportError) as stream:
            async with client.subscribe_to_shard("arn", "shardId-000000000000", {"Type": "LATEST"}):
                pass  # pragma: no cover - the tunnel is refused first
    assert behind_proxy.address in str(unary.value)
    assert f"refused the tunnel to unknown:{closed_port}: 502 Bad Gateway" in str(stream.value)
    # The proxy's reason phrase reaches the error: here, why it could not reach the target.
    assert "ConnectionRefusedError" in str(stream.value)
    assert len(behind_proxy.failures) == 2
    assert behind_proxy.tunnels == 0
    assert len(behind_proxy.targets) == 2
