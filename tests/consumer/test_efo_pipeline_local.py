"""FLINK-34071 reproduced: an EFO consumer feeding a producer whose sink is throttled.

In Flink the EFO source's network thread blocked on a full per-shard queue while the sink
waited on the source; nothing moved again. Here the consumer of stream A and the producer to
stream B share one event loop; B's PutRecords are rejected (a fault proxy) so the producer's
bounded queue fills and every handler waits in ``put``. The loop must stay alive, memory
bounded, and once the throttle lifts every record of A must reach B.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from kinesis_actors import ClientConfig, KinesisClient, LocalKinesis, Producer, ProducerConfig
from kinesis_actors.client import RetryPolicy, RetrySettings
from kinesis_actors.consumer import Consumer, ConsumerConfig, RecordBatch, StartingPosition
from tests.boto import read_back
from tests.faults import Fault, FaultProxy, RejectRecords, Request

from .helpers import put_plain

pytestmark = pytest.mark.anyio


class ThrottleAll:
    """Reject every PutRecords entry until lifted (the proxy runs in its own thread)."""

    def __init__(self) -> None:
        self.lifted = threading.Event()
        self.calls = 0

    def __call__(self, request: Request) -> Fault:
        if request.target != "PutRecords" or self.lifted.is_set():
            return None
        self.calls += 1
        count = len(request.json()["Records"])  # type: ignore[arg-type]
        return RejectRecords(frozenset(range(count)))


async def test_flink_34071_efo_into_a_throttled_sink_never_deadlocks(
    client: KinesisClient, local_kinesis: LocalKinesis, proxy: FaultProxy, stream_name: str
) -> None:
    source, sink = stream_name, f"{stream_name}-sink"
    shards, total, queue_limit, prefetch = 2, 600, 50, 1
    await client.create_stream(source, shards)
    await put_plain(client, source, [(b"r%04d" % i, f"k{i}") for i in range(total)])
    throttle = ThrottleAll()
    proxy.decide = throttle
    sink_client = KinesisClient(
        region=local_kinesis.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ClientConfig(
            retry=RetryPolicy(
                overrides={"PutRecords": RetrySettings(max_retries=2, base=0.01, max=0.05)}
            )
        ),
    )
    producer_config = ProducerConfig(
        queue_limit_records=queue_limit, linger=0.01, aggregation=False, retry_max=0.2
    )
    consumer_config = ConsumerConfig(
        mode="efo", start=StartingPosition.trim_horizon(), prefetch_batches=prefetch
    )
    handled = 0
    everything = anyio.Event()

    async with sink_client:
        await sink_client.create_stream(sink, shards)
        async with (
            Producer(sink_client, sink, producer_config) as producer,
            Consumer(client, source, consumer_config) as consumer,
        ):

            async def handler(batch: RecordBatch) -> None:
                nonlocal handled
                for data in batch.arrow.column("data").to_pylist():
                    await producer.put(data, data.decode())  # waits while the sink is full
                handled += len(batch)
                if handled == total:
                    everything.set()

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(consumer.run, handler)
                    # The sink pushes back: the producer's queue is full, handlers wait in put.
                    while producer.metrics.outstanding_records < queue_limit:
                        await anyio.sleep(0.05)
                    stuck_at, calls_at = handled, throttle.calls
                    ticks = 0
                    for _ in range(20):  # 1 s of a stuck sink: the loop must stay alive
                        await anyio.sleep(0.05)
                        ticks += 1
                        metrics = consumer.statistics()
                        assert metrics.buffered_batches <= shards * prefetch
                        assert producer.metrics.outstanding_records <= queue_limit
                    assert ticks == 20 and handled == stuck_at < total
                    assert throttle.calls > calls_at  # the producer keeps retrying
                    throttle.lifted.set()
                    await everything.wait()
                    await producer.flush()
                    consumer.stop()
            assert producer.metrics.peak_outstanding_records <= queue_limit
            assert producer.metrics.backpressure_cycles > 0
    written = await anyio.to_thread.run_sync(read_back, local_kinesis, sink)
    data = sorted(record["Data"] for records in written.values() for record in records)
    assert data == [b"r%04d" % i for i in range(total)]
