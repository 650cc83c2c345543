"""Discovery pages through ListShards; idle shards back off; faults are absorbed or surfaced."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest

from kinesis_actors import ClientConfig, KinesisClient, LocalKinesis, errors
from kinesis_actors.client import RetryPolicy, RetrySettings
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition
from kinesis_actors.runtime import RestartIntensityExceeded
from tests.faults import FaultProxy, Reply, Request

from .helpers import consume, put_plain

pytestmark = pytest.mark.anyio


class RecordingClient(KinesisClient):
    """A real client that notes when each GetRecords starts and signals after ``target`` calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.get_records_started: list[float] = []
        self.target = 0
        self.reached: anyio.Event | None = None

    async def call(
        self,
        operation: str,
        params: Mapping[str, Any] | None = None,
        *,
        retry: RetrySettings | None = None,
        epoch_timestamps: bool = False,
    ) -> dict[str, Any]:
        if operation == "GetRecords":
            self.get_records_started.append(anyio.current_time())
        result = await super().call(
            operation, params, retry=retry, epoch_timestamps=epoch_timestamps
        )
        if (
            operation == "GetRecords"
            and self.reached is not None
            and len(self.get_records_started) >= self.target
        ):
            self.reached.set()
        return result


@pytest.fixture
async def plain_client(local_kinesis: LocalKinesis) -> AsyncIterator[KinesisClient]:
    async with local_kinesis.client(tls=False) as kinesis:
        yield kinesis


async def test_discovery_pages_through_list_shards(
    plain_client: KinesisClient, stream_name: str
) -> None:
    await plain_client.create_stream(stream_name, 5)
    await put_plain(plain_client, stream_name, [(b"%d" % i, f"k{i}") for i in range(100)])
    config = ConsumerConfig(
        start=StartingPosition.trim_horizon(),
        list_shards_page_size=2,
        idle_backoff_initial=0.05,
        idle_backoff_max=0.1,
    )
    async with Consumer(plain_client, stream_name, config) as consumer:
        assert consumer.statistics().list_shards_calls == 3  # pages of 2, 2 and 1
        assert consumer.statistics().discoveries == 1
        with anyio.fail_after(30):
            seen = await consume(consumer, 100)
        assert len(consumer.statistics().shards) == 5
    assert sorted(row.data for row in seen) == sorted(b"%d" % i for i in range(100))


async def test_an_idle_shard_is_polled_with_growing_pauses(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """FLINK-36947: empty reads back off, doubling up to ``idle_backoff_max``.

    Bounded by events (the 6th GetRecords), and only lower bounds on the gaps are asserted:
    a slow machine can make gaps longer, never shorter than the backoff less its spread (an
    idle wait is shortened by up to 20 % so that shards do not poll in step).
    """
    client = RecordingClient(
        region=local_kinesis.region,
        endpoint_url=local_kinesis.endpoint_url,
        verify=False,
        credentials=local_kinesis.credentials,
    )
    async with client:
        await client.create_stream(stream_name, 1)
        client.target = 6
        client.reached = anyio.Event()
        config = ConsumerConfig(idle_backoff_initial=0.2, idle_backoff_max=0.8)
        async with Consumer(client, stream_name, config) as consumer:
            with anyio.fail_after(30):
                await client.reached.wait()
            metrics = consumer.statistics().shards[(stream_name, "shardId-000000000000")]
        started = client.get_records_started[:6]
    gaps = [later - earlier for earlier, later in itertools.pairwise(started)]
    expected = [0.2, 0.4, 0.8, 0.8, 0.8]
    for gap, minimum in zip(gaps, expected, strict=True):
        assert gap >= minimum * 0.8 * 0.95, (gaps, expected)
    assert metrics.empty_reads == metrics.reads >= 5
    # Over the window, far fewer calls than the 5/s the service would allow.
    assert len(started) - 1 <= (started[-1] - started[0]) * 5


def _proxied(proxy: FaultProxy, local_kinesis: LocalKinesis) -> KinesisClient:
    once = RetrySettings(max_retries=0)  # let the consumer see every fault
    return KinesisClient(
        region=local_kinesis.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ClientConfig(retry=RetryPolicy(overrides={"GetRecords": once})),
    )


async def test_throttles_and_expired_iterators_lose_and_repeat_nothing(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """GetRecords number 3 and 4 are throttled, number 6 says the iterator expired."""
    faults = {
        3: Reply.error("ProvisionedThroughputExceededException"),
        4: Reply.error("ProvisionedThroughputExceededException"),
        6: Reply.error("ExpiredIteratorException"),
    }
    calls = 0

    def decide(request: Request) -> Reply | None:
        nonlocal calls
        if request.target != "GetRecords":
            return None
        calls += 1
        return faults.get(calls)

    proxy.decide = decide
    config = ConsumerConfig(
        start=StartingPosition.trim_horizon(),
        max_records_per_call=10,
        idle_backoff_initial=0.05,
        idle_backoff_max=0.1,
        throttle_backoff_initial=0.05,
        throttle_backoff_max=0.1,
    )
    async with _proxied(proxy, local_kinesis) as client:
        await client.create_stream(stream_name, 1)
        await put_plain(client, stream_name, [(b"r%03d" % i, "k") for i in range(100)])
        async with Consumer(client, stream_name, config) as consumer:
            with anyio.fail_after(30):
                seen = await consume(consumer, 100)
            metrics = consumer.statistics().shards[(stream_name, "shardId-000000000000")]
    assert [row.data for row in seen] == [b"r%03d" % i for i in range(100)]
    assert metrics.throttles == 2
    assert metrics.expired_iterators == 1
    assert metrics.iterators == 2  # the first, and the renewal after the expiry


async def test_a_reader_that_keeps_failing_ends_iteration_with_the_reason(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    proxy.decide = lambda request: (
        Reply.error("AccessDeniedException") if request.target == "GetRecords" else None
    )
    config = ConsumerConfig(restart_intensity=(2, 30.0))
    async with _proxied(proxy, local_kinesis) as client:
        await client.create_stream(stream_name, 1)
        async with Consumer(client, stream_name, config) as consumer:
            with anyio.fail_after(30), pytest.raises(RestartIntensityExceeded) as caught:
                await consume(consumer, 1)
    assert isinstance(caught.value.__cause__, errors.AccessDeniedError)
