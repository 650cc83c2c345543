"""A user's exception is the user's: what is raised inside ``async with Producer``
leaves it as itself, never in an ExceptionGroup, and so do the library's own typed errors.
Leaving because of an exception is bounded by ``exit_grace``, whatever the stream does.

On asyncio and trio (the ``anyio_backend`` fixture), against the local server; the fault
proxy throttles every PutRecords call where a flush must not be able to finish.
"""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from tests.faults import FaultProxy, Reply, Request
from tests.producer.test_producer_faults import proxied

pytestmark = pytest.mark.anyio


def throttle_every_put(request: Request) -> Reply | None:
    if request.target == "PutRecords":
        return Reply.error("ProvisionedThroughputExceededException")
    return None


async def test_a_key_error_in_the_block_is_caught_as_itself_and_what_was_put_is_delivered(
    client: KinesisClient, stream_name: str
) -> None:
    """A healthy stream settles within the grace: the block's failure loses nothing it put."""
    await client.create_stream(stream_name, 2)
    raised = KeyError("the user's")
    with anyio.fail_after(30):
        try:
            async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
                handles = [await producer.put(b"x", f"k{i}") for i in range(20)]
                raise raised
        except KeyError as caught:
            assert caught is raised
        else:  # pragma: no cover - the assertion's message
            pytest.fail("the KeyError did not reach the caller")
    assert all(handle.result().shard_id.startswith("shardId-") for handle in handles)
    assert producer.metrics.records_sent == 20


async def test_system_exit_and_keyboard_interrupt_leave_the_block_as_themselves(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    with anyio.fail_after(30):
        with pytest.raises(SystemExit) as exited:
            async with Producer(client, stream_name) as producer:
                await producer.put(b"x", "k")
                raise SystemExit(3)
        assert exited.value.code == 3
        interrupt = KeyboardInterrupt()
        with pytest.raises(KeyboardInterrupt) as interrupted:
            async with Producer(client, stream_name) as producer:
                handle = await producer.put(b"x", "k")
                raise interrupt
        assert interrupted.value is interrupt
    # No grace for either: what was not acknowledged yet (linger) failed, typed.
    assert isinstance(handle.exception(), errors.ProducerClosedError)
    assert producer.metrics.outstanding_records == 0


async def test_a_record_expiring_with_fail_on_error_is_producer_failed_not_a_group(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """flush raises ProducerFailedError inside the block; it left the block as
    ExceptionGroup([ProducerFailedError]) before (both backends)."""
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = throttle_every_put
        config = ProducerConfig(linger=0.01, record_ttl=0.3, retry_base=0.05, retry_max=0.1)
        with anyio.fail_after(30), pytest.raises(errors.ProducerFailedError) as failed:
            async with Producer(kinesis, stream_name, config) as producer:
                handle = await producer.put(b"x", "k")
                await producer.flush()
    assert type(failed.value) is errors.ProducerFailedError
    assert isinstance(failed.value.__cause__, errors.RecordExpiredError)
    assert isinstance(handle.exception(), errors.RecordExpiredError)


async def test_leaving_on_a_key_error_under_permanent_throttling_takes_the_grace_not_forever(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """Measured before: still waiting after 60 s. Now ``exit_grace`` (0.5 s here), then every
    unsettled handle and a put waiting for room in another task fail with
    ProducerClosedError, and the KeyError leaves as itself."""
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = throttle_every_put
        config = ProducerConfig(queue_limit_records=4, linger=0.01, exit_grace=0.5)
        blocked: list[BaseException] = []

        async def blocked_put(producer: Producer, waiting: anyio.Event) -> None:
            waiting.set()
            try:
                await producer.put(b"x", "waits")
            except errors.KinesisError as exc:
                blocked.append(exc)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as task_group:
                with pytest.raises(KeyError):
                    async with Producer(kinesis, stream_name, config) as producer:
                        handles = [await producer.put(b"x", f"k{i}") for i in range(4)]
                        waiting = anyio.Event()
                        task_group.start_soon(blocked_put, producer, waiting)
                        await waiting.wait()
                        await anyio.lowlevel.checkpoint()  # it now waits for room
                        assert producer.metrics.backpressure_cycles == 1
                        started = anyio.current_time()
                        raise KeyError("the user's")
                elapsed = anyio.current_time() - started
    assert 0.5 <= elapsed < 3.0, elapsed
    assert len(blocked) == 1 and isinstance(blocked[0], errors.ProducerClosedError)
    # Each handle's outcome in full, so a failure says which record settled how.
    outcomes = [repr(h.exception()) for h in handles]
    assert all(isinstance(h.exception(), errors.ProducerClosedError) for h in handles), outcomes
    # Waiting ones name the exit, in-flight ones say they may or may not have been written.
    assert all(
        "left its block on KeyError" in str(h.exception()) or "in flight" in str(h.exception())
        for h in handles
    ), outcomes
    assert producer.metrics.records_sent == 0
    assert producer.metrics.outstanding_records == 0


async def test_an_exit_grace_of_zero_fails_what_is_left_at_once(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    async with proxied(proxy, local_kinesis) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        proxy.decide = throttle_every_put
        config = ProducerConfig(linger=0.01, exit_grace=0.0)
        with anyio.fail_after(30), pytest.raises(KeyError):
            async with Producer(kinesis, stream_name, config) as producer:
                handle = await producer.put(b"x", "k")
                started = anyio.current_time()
                raise KeyError("the user's")
        elapsed = anyio.current_time() - started
    assert elapsed < 0.9, elapsed  # not the default grace of 1 s, nor forever
    assert isinstance(handle.exception(), errors.ProducerClosedError)
    with pytest.raises(errors.ConfigError, match="exit_grace"):
        ProducerConfig(exit_grace=-1)
