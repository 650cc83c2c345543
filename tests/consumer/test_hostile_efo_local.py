"""Enhanced Fan-Out: never lose an open shard, and starvation is said.

The EFO data path (SubscribeToShard over its own HTTP/2 transport) cannot pass the HTTP/1.1
fault proxy, so faults on it are injected by wrapping ``client.subscribe_to_shard``, as
``test_efo_local.py`` does; the foreign sequence number and the re-created stream need no
injection at all: the real local server answers them, and so is a ResourceInUse: the server
answers it to a second subscription of one consumer to one shard (a test below holds one).
A TCP reset of the stream itself goes through a CONNECT tunnel (``tests/connect_proxy.py``),
the way the client reaches a server behind ``HTTPS_PROXY``: after it the local server holds
the shard from that consumer for 300 s.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, errors
from kinesis_actors.client import Subscription
from kinesis_actors.consumer import (
    Consumer,
    ConsumerConfig,
    ShardStatistics,
    StartingPosition,
    register_consumers,
)
from tests.connect_proxy import ConnectProxy

from .helpers import (
    aggregate_per_shard,
    assert_in_shard_order,
    by_data,
    consume,
    put_aggregated,
    put_plain,
    shard_map,
)
from .test_hostile_server_local import RECORDS, check_positions, setup

pytestmark = pytest.mark.anyio


def efo(**options: Any) -> ConsumerConfig:
    return ConsumerConfig(
        mode="efo", start=StartingPosition.trim_horizon(), shard_discovery_interval=0.5, **options
    )


class Refusing:
    """Wraps ``client.subscribe_to_shard``: the first ``times`` subscriptions fail with
    ``error`` (``times=None``: until ``release()``)."""

    def __init__(
        self, client: KinesisClient, error: errors.KinesisError, times: int | None = None
    ) -> None:
        self._real = client.subscribe_to_shard
        self.error, self.times = error, times
        self.refused = 0
        self.released = False

    def release(self) -> None:
        self.released = True

    @asynccontextmanager
    async def __call__(
        self, arn: str, shard_id: str, position: Mapping[str, Any], **options: Any
    ) -> AsyncIterator[Subscription]:
        if not self.released and (self.times is None or self.refused < self.times):
            self.refused += 1
            raise self.error
        async with self._real(arn, shard_id, position, **options) as subscription:
            yield subscription


async def test_efo_one_resource_not_found_on_subscribe_does_not_end_the_shard(
    client: KinesisClient, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = await setup(client, stream_name)
    refusing = Refusing(client, errors.ResourceNotFoundError("injected"), times=1)
    monkeypatch.setattr(client, "subscribe_to_shard", refusing)
    async with Consumer(client, stream_name, efo()) as consumer:
        with anyio.fail_after(60):
            seen = await consume(consumer, len(expected))
        positions, metrics = consumer.positions(), consumer.statistics()
    assert sorted(row.data for row in seen) == expected
    check_positions(positions, stream_name, seen)
    assert refusing.refused == 1
    assert sum(shard.not_found for shard in metrics.shards.values()) == 1


async def test_efo_a_foreign_sequence_number_is_a_typed_error_naming_both(
    client: KinesisClient, stream_name: str
) -> None:
    await setup(client, stream_name)
    async with Consumer(client, stream_name, efo()) as consumer:
        with anyio.fail_after(60):
            await consume(consumer, RECORDS)
        saved = consumer.positions()
    shards = saved["streams"][stream_name]
    first, second = sorted(shards)
    foreign = shards[second]["sequence_number"]
    shards[first] = dict(shards[second])
    async with Consumer(client, stream_name, efo(positions=saved)) as consumer:
        with anyio.fail_after(60), pytest.raises(errors.ShardUnreadableError) as caught:
            await consume(consumer, 1)
        after = consumer.positions()["streams"][stream_name]
    assert (caught.value.stream, caught.value.shard_id) == (stream_name, first)
    assert foreign in str(caught.value)
    assert after[first] == {"sequence_number": foreign, "sub_sequence_number": 0}


async def test_efo_positions_of_a_re_created_stream_are_refused(
    client: KinesisClient, stream_name: str
) -> None:
    await setup(client, stream_name, count=2)
    async with Consumer(client, stream_name, efo()) as consumer:
        with anyio.fail_after(60):
            await consume(consumer, 2)
        saved = consumer.positions()
    await client.delete_stream(stream_name)
    await setup(client, stream_name, count=2)
    with pytest.raises(errors.PositionsMismatchError, match="created again"):
        async with Consumer(client, stream_name, efo(positions=saved)):
            pass


async def test_a_shard_that_only_meets_resource_in_use_is_said_to_be_starved(
    client: KinesisClient,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """before, such a consumer delivered nothing, logged nothing, and its
    state stayed "reading". Now, after ``efo_starvation_warning``: a warning naming the shard
    and the consumer, state ``starved``; once the shard is free, every record arrives."""
    await client.create_stream(stream_name, 1)
    expected = [b"r%02d" % i for i in range(5)]
    records = [{"Data": item, "PartitionKey": "k"} for item in expected]
    await client.call("PutRecords", {"StreamName": stream_name, "Records": records})
    refusing = Refusing(client, errors.ResourceInUseError("injected"))
    monkeypatch.setattr(client, "subscribe_to_shard", refusing)
    key = (stream_name, "shardId-000000000000")
    with caplog.at_level(logging.WARNING, "kinesis_actors.consumer"):
        async with Consumer(client, stream_name, efo(efo_starvation_warning=1.0)) as consumer:
            with anyio.fail_after(30):
                while consumer.statistics().shards[key].state != "starved":
                    await anyio.sleep(0.05)
            starved = consumer.statistics().shards[key]
            refusing.release()
            with anyio.fail_after(60):
                seen = await consume(consumer, len(expected))
            after = consumer.statistics().shards[key]
    assert starved.starvations == 1 and starved.events == 0
    assert starved.resubscriptions["resource_in_use"] >= 2
    warning = next(r.getMessage() for r in caplog.records if "another reader" in r.getMessage())
    assert "shardId-000000000000" in warning
    assert consumer.consumer_arns[stream_name] in warning
    assert [row.data for row in seen] == expected
    assert after.state == "reading" and after.starvations == 1


class ResetAfterWaits:
    """Wraps ``client.subscribe_to_shard``: counts the server's ResourceInUse answers (``waited``
    is set after ``waits`` of them), then, once ``released``, resets the next subscription
    before it reaches the server, as a dropped connection does."""

    def __init__(self, client: KinesisClient, waits: int) -> None:
        self._real = client.subscribe_to_shard
        self.waits = waits
        self.in_use = 0
        self.waited = anyio.Event()
        self.released = False
        self.resets = 0

    @asynccontextmanager
    async def __call__(
        self, arn: str, shard_id: str, position: Mapping[str, Any], **options: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        if self.released and not self.resets:
            self.resets += 1
            raise errors.TransportError("injected: connection reset")
        async with self._real(arn, shard_id, position, **options) as subscription:
            yield self._events(subscription)

    async def _events(self, subscription: Subscription) -> AsyncIterator[dict[str, Any]]:
        try:
            async for event in subscription:
                yield event
        except errors.ResourceInUseError:  # the server's answer, as the stream's first event
            self.in_use += 1
            if self.in_use >= self.waits:
                self.waited.set()
            raise


async def test_a_reader_that_waited_on_resource_in_use_survives_the_next_reset(
    client: KinesisClient,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fault: the waits counted as consecutive failures, so the first reset
    after a long ResourceInUse took the reader past ``max_consecutive_failures``: it crashed
    with an ERROR and a traceback. Here another subscription of the same consumer really
    holds the shard (the server answers ResourceInUse) for more waits than that limit; then
    it lets go, and the reader's next subscription is reset. The reader reads on: no crash,
    no ERROR, every record.

    The service's pacing (1 s between subscriptions, waits backed off up to 10 s) is
    shortened to hundredths, so the waits take a second, not a minute; the limit is not."""
    await client.create_stream(stream_name, 1)
    expected = [b"w%02d" % i for i in range(5)]
    records = [{"Data": item, "PartitionKey": "k"} for item in expected]
    await client.call("PutRecords", {"StreamName": stream_name, "Records": records})
    with anyio.fail_after(30):
        arns = await register_consumers(client, stream_name, "held")
    shard = "shardId-000000000000"
    async with AsyncExitStack() as holding:
        rival = await holding.enter_async_context(
            client.subscribe_to_shard(arns[stream_name], shard, {"Type": "LATEST"})
        )
        with anyio.fail_after(10):
            await aiter(rival).__anext__()  # the server holds the shard for it now
        config = efo(registration="none", consumer_arns=arns)
        consumer = Consumer(client, stream_name, config)
        reader_maker = consumer._scheduler._reader_maker
        limit = reader_maker._efo.max_consecutive_failures
        reader_maker._efo = replace(  # the pacing only, see the docstring
            reader_maker._efo,
            min_subscribe_interval=0.02,
            backoff_initial=0.02,
            backoff_max=0.1,
        )
        faults = ResetAfterWaits(client, waits=limit + 2)
        monkeypatch.setattr(client, "subscribe_to_shard", faults)
        with caplog.at_level(logging.WARNING, "kinesis_actors"):
            async with consumer:
                with anyio.fail_after(30):
                    await faults.waited.wait()
                faults.released = True  # the next subscription is reset...
                await holding.aclose()  # ...and the shard is let go
                with anyio.fail_after(60):
                    seen = await consume(consumer, len(expected))
                metrics = consumer.statistics().shards[(stream_name, shard)]
                [readers] = consumer.supervision
    assert [row.data for row in seen] == expected
    assert faults.in_use > limit and faults.resets == 1
    assert metrics.resubscriptions["resource_in_use"] >= faults.in_use
    assert metrics.resubscriptions["error"] == 1 and metrics.transient_errors == 1
    assert readers.child(f"{stream_name}:{shard}").restarts == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


#: What decides whether the client goes through a proxy (``client/_proxy``).
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy")


async def reset_until_held(
    proxy: ConnectProxy, consumer: Consumer, key: tuple[str, str], attempts: int = 5
) -> ShardStatistics:
    """Resets the subscription's tunnel until the server holds the shard; returns the
    statistics of the first refusal. The server lets go of a reset subscription only when it
    notices the connection is gone, which it sometimes does at once: then the reader's next
    subscription is accepted, and the reset is tried again."""
    for _ in range(attempts):
        before = consumer.statistics().shards[key]
        refused = before.resubscriptions.get("resource_in_use", 0)
        assert proxy.reset() >= 1
        with anyio.fail_after(30):
            while True:
                now = consumer.statistics().shards[key]
                if now.resubscriptions.get("resource_in_use", 0) > refused:
                    return now
                if now.subscriptions > before.subscriptions:
                    break  # the server let go: a new subscription was accepted
                await anyio.sleep(0.05)  # statistics are a snapshot: nothing to await
    pytest.fail(f"the server let go of the shard after each of {attempts} resets")


async def test_a_shard_held_after_a_reset_is_read_by_get_records_meanwhile(
    local_kinesis: LocalKinesis,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a connection is reset mid subscription, the local server
    refuses that consumer's subscriptions of the shard for 300 s, and the shard delivered
    nothing meanwhile (998-2,311 records left unread). Here the subscription's own TCP
    connection is reset (a RST both ways, in the CONNECT tunnel it runs through) until the
    server holds the shard, and records are written after it: every one arrives within the
    test's bound, by GetRecords, while the server still holds it (no event since its first
    refusal); in order, none twice, and the position is the last record's."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    shard = "shardId-000000000000"
    key = (stream_name, shard)
    with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url())
        async with KinesisClient(
            region=local_kinesis.region,
            endpoint_url=local_kinesis.tls_endpoint_url,
            verify=False,
            credentials=local_kinesis.credentials,
        ) as client:
            await client.create_stream(stream_name, 1)
            before = [b"b%02d" % i for i in range(5)]
            after = [b"a%02d" % i for i in range(20)]
            await put_plain(client, stream_name, [(item, "k") for item in before])
            config = efo(efo_starvation_warning=1.0, efo_fallback_after=2.0)
            with caplog.at_level(logging.WARNING, "kinesis_actors.consumer"):
                async with Consumer(client, stream_name, config) as consumer:
                    with anyio.fail_after(30):
                        seen = await consume(consumer, len(before))  # by its subscription
                    subscribed = consumer.statistics().shards[key]
                    reset_at = anyio.current_time()
                    held = await reset_until_held(proxy, consumer, key)
                    await put_plain(client, stream_name, [(item, "k") for item in after])
                    with anyio.fail_after(30):
                        seen += await consume(consumer, len(after))
                    print(
                        f"\nreset to every record read by GetRecords: "
                        f"{anyio.current_time() - reset_at:.1f}s"
                    )
                    metrics = consumer.statistics().shards[key]
                    positions = consumer.positions()
    assert [row.data for row in seen] == before + after
    assert set(by_data(seen).values()) == {1}
    assert_in_shard_order(seen)
    assert positions["streams"][stream_name][shard] == {
        "sequence_number": seen[-1].sequence_number,
        "sub_sequence_number": 0,
    }
    assert subscribed.events >= 1 and subscribed.fallbacks == 0
    # Held all along: no event since the server refused, every record after it by GetRecords.
    assert metrics.events == held.events
    assert metrics.state == "polling" and metrics.fallbacks == 1
    assert metrics.fallback_reads >= 1 and metrics.fallback_seconds > 0
    assert metrics.resubscriptions["error"] >= 1
    assert metrics.resubscriptions["resource_in_use"] >= 1
    warnings = [r.getMessage() for r in caplog.records if "reading by GetRecords" in r.getMessage()]
    assert len(warnings) == 1 and shard in warnings[0], warnings


async def test_a_held_shard_goes_back_to_its_subscription_once_one_is_accepted(
    client: KinesisClient, stream_name: str
) -> None:
    """The way back: another subscription of the same consumer holds the
    shard while a consumer resumes inside a KPL aggregate; it reads by GetRecords from exactly
    there (the aggregate's delivered user records skipped). The holder then closes cleanly,
    the server accepts a subscription again within seconds, and the reader is back on it, from
    where GetRecords reached: what is written next arrives by events. Every record once, in
    order, across both ways."""
    await client.create_stream(stream_name, 1)
    shard = "shardId-000000000000"
    key = (stream_name, shard)
    users = [(b"u%02d" % i, f"k{i}") for i in range(30)]
    aggregates = aggregate_per_shard(users, await shard_map(client, stream_name), 10)
    await put_aggregated(client, stream_name, aggregates)
    # A first reader commits inside the second aggregate: 15 of the 30 user records.
    polling = ConsumerConfig(start=StartingPosition.trim_horizon())
    async with Consumer(client, stream_name, polling) as first:
        with anyio.fail_after(30):
            batch = await first.__anext__()
        assert len(batch) == len(users)
        first.commit(batch.slice(0, 15))
        saved = first.positions()
    assert saved["streams"][stream_name][shard]["sub_sequence_number"] == 4
    with anyio.fail_after(30):
        arns = await register_consumers(client, stream_name, "held")
    plain = [b"p%02d" % i for i in range(10)]
    async with AsyncExitStack() as holding:
        rival = await holding.enter_async_context(
            client.subscribe_to_shard(arns[stream_name], shard, {"Type": "LATEST"})
        )
        with anyio.fail_after(10):
            await aiter(rival).__anext__()  # the server holds the shard for it now
        config = efo(
            registration="none", consumer_arns=arns, positions=saved, efo_fallback_after=1.0
        )
        async with Consumer(client, stream_name, config) as consumer:
            with anyio.fail_after(30):
                resumed = await consume(consumer, len(users) - 15)
            polled = consumer.statistics().shards[key]
            await holding.aclose()  # a clean close: the server lets go within seconds
            with anyio.fail_after(30):
                while consumer.statistics().shards[key].state != "reading":
                    await anyio.sleep(0.05)  # metrics are a snapshot: nothing to await
            switched = consumer.statistics().shards[key]
            await put_plain(client, stream_name, [(item, "k") for item in plain])
            with anyio.fail_after(30):
                tail = await consume(consumer, len(plain))
            metrics = consumer.statistics().shards[key]
            positions = consumer.positions()
    assert [row.data for row in resumed] == [data for data, _ in users[15:]]
    assert (resumed[0].sequence_number, resumed[0].sub_sequence_number) == (
        saved["streams"][stream_name][shard]["sequence_number"],
        5,
    )
    assert [row.data for row in tail] == plain
    assert_in_shard_order(resumed + tail)
    assert positions["streams"][stream_name][shard] == {
        "sequence_number": tail[-1].sequence_number,
        "sub_sequence_number": 0,
    }
    assert polled.state == "polling" and polled.events == 0
    assert polled.fallbacks == 1 and polled.fallback_reads >= 1
    assert switched.events >= 1 and switched.fallbacks == 1
    # After the switch, everything arrived by the subscription.
    assert metrics.fallback_reads == switched.fallback_reads
    assert metrics.events > switched.events
    assert metrics.fallback_seconds == switched.fallback_seconds > 0
