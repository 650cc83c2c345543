"""Subscriptions multiplexed on shared HTTP/2 connections, against the local server.

Real HTTP/2 end to end: several subscriptions on one connection, the number of connections
for a given ``subscriptions_per_connection``, a stalled subscription beside a busy one on one
connection (FLINK-34071's isolation), and a connection reset that fails only its own streams.
"""

from __future__ import annotations

import socket
import ssl
from contextlib import AsyncExitStack

import anyio
import pytest
from anyio.abc import SocketAttribute

from benchmarks.loadtarget import LoadTarget
from kinesis_actors import ClientConfig, KinesisClient, LocalKinesis, errors
from kinesis_actors.client import H2Stream, Subscription
from kinesis_actors.client._h2pool import H2Pool
from tests.unreachable import Blackhole

from .test_client_local import _active_consumer

pytestmark = pytest.mark.anyio


def shard(i: int) -> str:
    return f"shardId-{i:012d}"


async def put_to_every_shard(client: KinesisClient, stream: str, shards: int, size: int) -> None:
    """One record of ``size`` bytes per shard (hash keys pin the shards)."""
    listed = await client.call("ListShards", {"StreamName": stream})
    records = [
        {
            "Data": bytes([i]) * size,
            "PartitionKey": "k",
            "ExplicitHashKey": s["HashKeyRange"]["StartingHashKey"],
        }
        for i, s in enumerate(listed["Shards"][:shards])
    ]
    result = await client.call("PutRecords", {"StreamName": stream, "Records": records})
    assert result["FailedRecordCount"] == 0


async def open_all(
    stack: AsyncExitStack, client: KinesisClient, arn: str, shards: int
) -> list[Subscription]:
    """Subscribe to every shard at once (as a consumer's readers do)."""
    subscriptions: list[Subscription | None] = [None] * shards

    async def one(i: int) -> None:
        subscriptions[i] = await stack.enter_async_context(
            client.subscribe_to_shard(arn, shard(i), {"Type": "TRIM_HORIZON"})
        )

    async with anyio.create_task_group() as tg:
        for i in range(shards):
            tg.start_soon(one, i)
    return [s for s in subscriptions if s is not None]


async def first_records(subscription: Subscription, count: int) -> list[bytes]:
    got: list[bytes] = []
    async for event in subscription:
        got.extend(record["Data"] for record in event["Records"])
        if len(got) >= count:
            return got
    return got


async def test_several_subscriptions_on_one_connection_deliver_in_parallel(
    client: KinesisClient, stream_name: str
) -> None:
    shards = 4
    await client.create_stream(stream_name, shards)
    arn = await _active_consumer(client, stream_name, "mux")
    got: dict[int, list[bytes]] = {}
    with anyio.fail_after(30):
        async with AsyncExitStack() as stack:
            subscriptions = await open_all(stack, client, arn, shards)
            assert client.subscription_statistics().connections == 1
            assert client.subscription_statistics().streams == shards
            await put_to_every_shard(client, stream_name, shards, 100)

            async def read(i: int) -> None:
                got[i] = await first_records(subscriptions[i], 1)

            async with anyio.create_task_group() as tg:
                for i in range(shards):
                    tg.start_soon(read, i)
    assert got == {i: [bytes([i]) * 100] for i in range(shards)}
    assert client.subscription_statistics().connections == 0  # closed with its last stream


async def test_two_subscriptions_per_connection_and_five_shards_make_three_connections(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    config = ClientConfig(subscriptions_per_connection=2)
    async with local_kinesis.client(config=config) as client:
        await client.create_stream(stream_name, 5)
        arn = await _active_consumer(client, stream_name, "three")
        await put_to_every_shard(client, stream_name, 5, 10)
        with anyio.fail_after(30):
            async with AsyncExitStack() as stack:
                subscriptions = await open_all(stack, client, arn, 5)
                assert client.subscription_statistics().connections == 3
                for i, subscription in enumerate(subscriptions):
                    assert await first_records(subscription, 1) == [bytes([i]) * 10]


async def test_a_stalled_subscription_does_not_slow_its_sibling_on_the_same_connection(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """FLINK-34071 on one connection: shard 0's subscription is never read while shard 1's
    reads 20 windows' worth. The stalled one holds at most its window, unread."""
    window = 65535
    config = ClientConfig(subscribe_window=window)
    async with local_kinesis.client(config=config) as client:
        await client.create_stream(stream_name, 2)
        arn = await _active_consumer(client, stream_name, "stall")
        for _ in range(20):
            await put_to_every_shard(client, stream_name, 2, 100_000)
        with anyio.fail_after(60):
            async with AsyncExitStack() as stack:
                stalled, busy = await open_all(stack, client, arn, 2)
                assert client.subscription_statistics().connections == 1
                got = await first_records(busy, 20)
                assert got == [b"\x01" * 100_000] * 20
                [connection] = client._subscriptions._connections  # type: ignore[union-attr]
                stream_id = stalled._response._stream_id  # type: ignore[attr-defined]
                held = sum(len(data) for data, _ in connection._streams[stream_id].chunks)
                assert 0 < held <= window
        assert stalled.bytes_received == 0


async def test_a_frame_for_one_stream_wakes_no_sibling_waiting_on_the_same_connection() -> None:
    """Seven subscriptions wait on one connection while an eighth reads 5 MB in many socket
    reads. Each read round wakes the streams it brought something, not every waiter: woken
    all at once, 50 streams a connection woke 50 times a frame, and 2,048 shards took 20 s
    to open. The load target sends no heartbeats here, so the waiters are brought nothing."""
    records, size = 100, 50_000
    with LoadTarget(shards=8, retain_records=records, tls=True, heartbeat_seconds=300) as target:
        async with target.client(tls=True) as client:
            stream = target.stream_name
            arn = await _active_consumer(client, stream, "wakes")
            batch = [{"Data": b"x" * size, "PartitionKey": "k", "ExplicitHashKey": "0"}] * 10
            for _ in range(records // 10):
                await client.call("PutRecords", {"StreamName": stream, "Records": batch})
            with anyio.fail_after(60):
                async with AsyncExitStack() as stack:
                    busy, *idle = await open_all(stack, client, arn, 8)
                    [connection] = client._subscriptions._connections  # type: ignore[union-attr]
                    busy_id = busy._response._stream_id  # type: ignore[attr-defined]
                    woken: dict[int, int] = {}
                    wake = connection._wake

                    def counted(stream_id: int) -> None:
                        woken[stream_id] = woken.get(stream_id, 0) + 1
                        wake(stream_id)

                    connection._wake = counted  # type: ignore[method-assign]
                    async with anyio.create_task_group() as waiting:
                        for subscription in idle:
                            waiting.start_soon(first_records, subscription, 1)
                        await anyio.wait_all_tasks_blocked()
                        assert len(await first_records(busy, records)) == records
                        waiting.cancel_scope.cancel()
    rounds = busy.bytes_received // 65536
    assert rounds >= 40  # many socket reads for the busy stream alone
    # A waiter is woken to read next when the reader leaves (a handful in all), not per
    # round; the busy stream, waiting while a sibling reads for it, is woken per round.
    woken.pop(busy_id, None)
    assert sum(woken.values()) <= len(idle)


async def test_a_connection_reset_fails_only_its_own_streams(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """Two connections of two subscriptions; one connection is cut under its streams (as a
    network reset would): both of its streams fail, the other connection's read on, and a
    new subscription to a failed shard gets a healthy connection."""
    config = ClientConfig(subscriptions_per_connection=2)
    async with local_kinesis.client(config=config) as client:
        await client.create_stream(stream_name, 4)
        arn = await _active_consumer(client, stream_name, "reset")
        with anyio.fail_after(60):
            async with AsyncExitStack() as stack:
                subscriptions = await open_all(stack, client, arn, 4)
                pool = client._subscriptions
                assert pool is not None and pool.statistics().connections == 2
                cut, kept = pool._connections
                raw = cut._socket.extra(SocketAttribute.raw_socket)  # type: ignore[union-attr]
                raw.shutdown(socket.SHUT_RDWR)
                await put_to_every_shard(client, stream_name, 4, 10)
                on_cut = [s for s in subscriptions if s._response._connection is cut]  # type: ignore[attr-defined]
                on_kept = [s for s in subscriptions if s._response._connection is kept]  # type: ignore[attr-defined]
                assert len(on_cut) == len(on_kept) == 2
                for subscription in on_cut:
                    with pytest.raises(errors.TransportError):
                        await first_records(subscription, 1)
                for subscription in on_kept:
                    assert len(await first_records(subscription, 1)) == 1
                assert pool.statistics().connections == 1  # the cut one takes no new stream
                again = next(i for i, s in enumerate(subscriptions) if s in on_cut)
                # The cut stream may hold its shard for a moment: ResourceInUse is retried by
                # the caller (the EFO reader does), as here.
                while True:
                    try:
                        resubscribed = await stack.enter_async_context(
                            client.subscribe_to_shard(arn, shard(again), {"Type": "LATEST"})
                        )
                        break
                    except errors.ResourceInUseError:
                        await anyio.sleep(0.5)
                assert resubscribed._response._connection is not cut  # type: ignore[attr-defined]


async def test_a_subscriber_waiting_on_a_connect_cancelled_elsewhere_tries_again_not_fails() -> (
    None
):
    """The subscriber connecting a shared connection is cancelled (its shard stopped): the
    one waiting on that connect is not failed with "the connection was not established" but
    connects anew (here to a listener that never answers, so it waits until cancelled too)."""
    with Blackhole() as hole:
        pool = H2Pool(
            hole.url.replace("http://", "https://"),
            ssl_context=ssl.create_default_context(),
            proxy=None,
            connect_timeout=60.0,
            read_timeout=60.0,
            window=65_535,
            subscriptions_per_connection=2,
        )
        outcomes: list[str] = []

        async def subscribe(scope: anyio.CancelScope) -> None:
            with scope:
                try:
                    await H2Stream.on(pool, {}, b"")
                except BaseException as exc:
                    outcomes.append(type(exc).__name__)
                    raise

        first, second = anyio.CancelScope(), anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            tg.start_soon(subscribe, first)
            while pool.statistics().streams < 1:
                await anyio.sleep(0.01)
            tg.start_soon(subscribe, second)
            while pool.statistics().streams < 2:
                await anyio.sleep(0.01)
            assert pool.statistics().connections == 1  # both on the one being connected
            first.cancel()
            # The second gives the abandoned slot back and connects a connection of its own.
            while pool.statistics().streams != 1 or pool.statistics().connections != 1:
                await anyio.sleep(0.01)
            second.cancel()
        await pool.aclose()
    assert "TransportError" not in outcomes, outcomes
