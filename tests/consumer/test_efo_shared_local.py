"""EFO readers whose subscriptions share HTTP/2 connections: a connection reset fails only
the shards on that connection, which resubscribe; nothing is lost or repeated."""

from __future__ import annotations

import socket

import anyio
import pytest
from anyio.abc import SocketAttribute

from kinesis_actors import ClientConfig, LocalKinesis
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition

from .helpers import Row, assert_in_shard_order, by_data, consume, put_plain

pytestmark = pytest.mark.anyio


async def test_a_connection_reset_resubscribes_only_the_shards_on_it(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    shards = 4
    config = ClientConfig(subscriptions_per_connection=2)
    async with local_kinesis.client(config=config) as client:
        await client.create_stream(stream_name, shards)
        first = [(b"a%03d" % i, f"k{i}") for i in range(64)]  # every shard gets some
        then = [(b"b%03d" % i, f"k{i}") for i in range(64)]
        await put_plain(client, stream_name, first)
        efo = ConsumerConfig(mode="efo", start=StartingPosition.trim_horizon())
        seen: list[Row] = []
        async with Consumer(client, stream_name, efo) as consumer:
            with anyio.fail_after(60):
                seen += await consume(consumer, len(first))
                pool = client._subscriptions
                assert pool is not None and pool.statistics().connections == 2
                cut = pool._connections[0]
                cut_streams = set(cut._streams)
                raw = cut._socket.extra(SocketAttribute.raw_socket)  # type: ignore[union-attr]
                raw.shutdown(socket.SHUT_RDWR)
                await put_plain(client, stream_name, then)
                seen += await consume(consumer, len(then))
            metrics = consumer.statistics().shards
    assert len(cut_streams) == 2
    assert sorted(by_data(seen)) == sorted(data for data, _ in first + then)
    assert set(by_data(seen).values()) == {1}
    assert_in_shard_order(seen)
    errors = {key: m.resubscriptions.get("error", 0) for key, m in metrics.items()}
    assert sorted(errors.values()) == [0, 0, 1, 1], errors
