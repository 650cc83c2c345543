"""The ways out of an async Producer are typed: after close, put and flush say it is closed."""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from tests.faults import Delay, FaultProxy, Reply
from tests.producer.test_producer_faults import proxied

pytestmark = pytest.mark.anyio


async def test_put_and_flush_after_close_raise_producer_closed(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
        handle = await producer.put(b"x", "k")
    assert handle.result().shard_id
    with pytest.raises(errors.ProducerClosedError, match=r"is closed; put and flush need"):
        await producer.put(b"late", "k")
    with pytest.raises(errors.ProducerClosedError, match=r"is closed; put and flush need"):
        await producer.flush()


async def test_put_before_open_says_the_producer_is_new(client: KinesisClient) -> None:
    """The lifecycle's states are named in the messages as they always were ("new")."""
    producer = Producer(client, "never-opened")
    with pytest.raises(errors.ProducerClosedError, match=r"'never-opened' is new; put and"):
        await producer.put(b"x", "k")
    with pytest.raises(errors.ProducerClosedError, match=r"is new; put and flush need"):
        await producer.flush()


async def test_closed_wins_over_failed_after_close(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """A producer that failed (fail_on_error) and then closed says it is closed."""
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = lambda r: (
            Reply.error("AccessDeniedException") if r.target == "PutRecords" else None
        )
        with pytest.raises(errors.ProducerFailedError):
            async with Producer(kinesis, stream_name, ProducerConfig(linger=0.01)) as producer:
                await producer.put(b"x", "k")
        with pytest.raises(errors.ProducerClosedError):
            await producer.put(b"late", "k")


async def test_two_flushes_at_once_both_return(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """Each flush replaced the shared "settled" event, stranding the one already waiting."""
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = lambda r: Delay(0.2) if r.target == "PutRecords" else None
        async with Producer(kinesis, stream_name, ProducerConfig(linger=0.01)) as producer:
            handles = [await producer.put(b"x", f"k{i}") for i in range(10)]
            with anyio.fail_after(10):
                async with anyio.create_task_group() as task_group:
                    task_group.start_soon(producer.flush)
                    task_group.start_soon(producer.flush)
            assert all(handle.done() for handle in handles)


async def test_cancelling_the_block_fails_a_put_waiting_for_room_in_another_task(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """The async way out (a cancel scope) is typed for every waiter, not just the handles."""
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = lambda r: (
            Reply.error("ProvisionedThroughputExceededException")
            if r.target == "PutRecords"
            else None
        )
        config = ProducerConfig(queue_limit_records=2, linger=0.01)
        outcome: list[BaseException] = []

        async def blocked_put(producer: Producer) -> None:
            try:
                await producer.put(b"x", "waits")
            except errors.KinesisError as exc:
                outcome.append(exc)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as task_group:
                with anyio.move_on_after(0.5):
                    async with Producer(kinesis, stream_name, config) as producer:
                        handles = [await producer.put(b"x", f"k{i}") for i in range(2)]
                        task_group.start_soon(blocked_put, producer)
                        await producer.flush()  # throttled forever: until the scope ends
    assert len(outcome) == 1 and isinstance(outcome[0], errors.ProducerClosedError)
    assert all(isinstance(h.exception(), errors.ProducerClosedError) for h in handles)
    assert producer.metrics.outstanding_records == 0
