"""A user's exception is the user's: what is raised inside ``async with Consumer``
leaves it as itself, never in an ExceptionGroup, and so do the library's own typed errors.

On asyncio and trio (the ``anyio_backend`` fixture), polling and EFO.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, errors
from kinesis_actors.consumer import Consumer, ConsumerConfig, RecordBatch, StartingPosition

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["polling", "efo"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def kinesis(local_kinesis: LocalKinesis, mode: str) -> AsyncIterator[KinesisClient]:
    """EFO needs the TLS port (HTTP/2); polling uses the plain one."""
    async with local_kinesis.client(tls=mode == "efo") as client:
        yield client


def config(mode: str) -> ConsumerConfig:
    return ConsumerConfig(mode=mode, start=StartingPosition.trim_horizon())  # type: ignore[arg-type]


async def _stream_with_a_record(client: KinesisClient, name: str) -> None:
    await client.create_stream(name, 2)
    record = {"Data": b"one", "PartitionKey": "k"}
    result = await client.call("PutRecords", {"StreamName": name, "Records": [record]})
    assert result["FailedRecordCount"] == 0


async def test_a_key_error_in_the_block_is_caught_as_itself(
    kinesis: KinesisClient, stream_name: str, mode: str
) -> None:
    await _stream_with_a_record(kinesis, stream_name)
    raised = KeyError("the user's")
    with anyio.fail_after(60):
        try:
            async with Consumer(kinesis, stream_name, config(mode)):
                raise raised
        except KeyError as caught:
            assert caught is raised
        else:  # pragma: no cover - the assertion's message
            pytest.fail("the KeyError did not reach the caller")


async def test_a_key_error_while_iterating_is_caught_as_itself(
    kinesis: KinesisClient, stream_name: str, mode: str
) -> None:
    await _stream_with_a_record(kinesis, stream_name)
    with anyio.fail_after(60), pytest.raises(KeyError) as caught:
        async with Consumer(kinesis, stream_name, config(mode)) as consumer:
            async for batch in consumer:
                raise KeyError(batch.shard_id)
    assert type(caught.value) is KeyError
    assert caught.value.args[0].startswith("shardId-")


async def test_system_exit_and_keyboard_interrupt_leave_the_block_as_themselves(
    kinesis: KinesisClient, stream_name: str, mode: str
) -> None:
    await _stream_with_a_record(kinesis, stream_name)
    with anyio.fail_after(60):
        with pytest.raises(SystemExit) as exited:
            async with Consumer(kinesis, stream_name, config(mode)):
                raise SystemExit(3)
        assert exited.value.code == 3
        interrupt = KeyboardInterrupt()
        with pytest.raises(KeyboardInterrupt) as interrupted:
            async with Consumer(kinesis, stream_name, config(mode)):
                raise interrupt
        assert interrupted.value is interrupt


async def test_a_failure_while_opening_is_the_typed_error_not_a_group(
    kinesis: KinesisClient, stream_name: str, mode: str
) -> None:
    """The first shards are started inside the consumer's task group; a failure there used
    to leave ``__aenter__`` as ``ExceptionGroup([ServiceError])`` (measured, both backends)."""
    await _stream_with_a_record(kinesis, stream_name)
    consumer = Consumer(kinesis, stream_name, config(mode))
    injected = errors.ServiceError("injected while starting the shards")

    async def fail_to_schedule() -> None:
        raise injected

    consumer._scheduler._schedule = fail_to_schedule  # type: ignore[method-assign]
    with anyio.fail_after(60), pytest.raises(errors.ServiceError) as caught:
        async with consumer:
            pytest.fail("the consumer opened")  # pragma: no cover
    assert caught.value is injected


async def test_an_unknown_stream_is_the_typed_error(kinesis: KinesisClient, mode: str) -> None:
    with anyio.fail_after(60), pytest.raises(errors.ResourceNotFoundError):
        async with Consumer(kinesis, "no-such-stream-here", config(mode)):
            pytest.fail("the consumer opened")  # pragma: no cover


async def test_a_handlers_key_error_past_the_restart_intensity_is_caught_as_itself(
    kinesis: KinesisClient, stream_name: str, mode: str
) -> None:
    await _stream_with_a_record(kinesis, stream_name)
    raised: list[KeyError] = []

    async def handler(batch: RecordBatch) -> None:
        raised.append(KeyError(f"attempt {len(raised)}"))
        raise raised[-1]

    settings = replace(config(mode), restart_intensity=(2, 30.0))
    with anyio.fail_after(60):
        async with Consumer(kinesis, stream_name, settings) as consumer:
            try:
                await consumer.run(handler)
            except KeyError as caught:
                assert caught is raised[-1]
                assert any("run() gave up" in note for note in caught.__notes__)
            else:  # pragma: no cover - the assertion's message
                pytest.fail("run() returned")
    assert len(raised) == 3  # the first try and two restarts
