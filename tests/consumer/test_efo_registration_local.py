"""EFO consumer registration against the local server: lazy, eager, none, cleanup."""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors import KinesisClient, errors
from kinesis_actors.consumer import (
    Consumer,
    ConsumerConfig,
    StartingPosition,
    default_consumer_name,
    deregister_consumer,
    list_consumers,
    register_consumers,
)

from .helpers import consume, put_plain

pytestmark = pytest.mark.anyio


def efo(**options: object) -> ConsumerConfig:
    return ConsumerConfig(mode="efo", start=StartingPosition.trim_horizon(), **options)  # type: ignore[arg-type]


async def names(client: KinesisClient, stream: str) -> list[str]:
    return sorted(consumer["ConsumerName"] for consumer in await list_consumers(client, stream))


async def test_lazy_registers_reads_and_deregisters_on_close(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    await put_plain(client, stream_name, [(b"r%d" % i, "k") for i in range(10)])
    with anyio.fail_after(30):
        async with Consumer(client, stream_name, efo()) as consumer:
            assert await names(client, stream_name) == [default_consumer_name([stream_name])]
            seen = await consume(consumer, 10)
        assert sorted(row.data for row in seen) == sorted(b"r%d" % i for i in range(10))
        assert await names(client, stream_name) == []  # deregistered on a clean close


async def test_two_lazy_consumers_racing_share_one_registration(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 2)
    arns: list[dict[str, str]] = []
    both_open = anyio.Event()
    # Two workers of one application: each reads its own shards with the same consumer.
    configs = [
        efo(consumer_name="racer", worker_index=i, worker_count=2, deregister_on_close=False)
        for i in range(2)
    ]

    async def worker(config: ConsumerConfig) -> None:
        async with Consumer(client, stream_name, config) as consumer:
            arns.append(consumer.consumer_arns)
            if len(arns) == 2:
                both_open.set()
            await both_open.wait()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for config in configs:
                tg.start_soon(worker, config)
    assert arns[0] == arns[1]
    assert await names(client, stream_name) == ["racer"]


async def test_lazy_reuses_an_existing_consumer(client: KinesisClient, stream_name: str) -> None:
    await client.create_stream(stream_name, 1)
    with anyio.fail_after(30):
        registered = await register_consumers(client, stream_name, "shared")
        config = efo(consumer_name="shared", deregister_on_close=False)
        async with Consumer(client, stream_name, config) as consumer:
            assert consumer.consumer_arns == registered
    assert await names(client, stream_name) == ["shared"]


async def test_eager_registration_is_passed_to_workers(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    await put_plain(client, stream_name, [(b"e%d" % i, "k") for i in range(5)])
    with anyio.fail_after(30):
        arns = await register_consumers(client, [stream_name])  # the driver's step
        assert set(arns) == {stream_name}
        config = efo(registration="eager", consumer_arns=arns)
        async with Consumer(client, stream_name, config) as consumer:
            seen = await consume(consumer, 5)
        assert len(seen) == 5
        # Eager: the driver owns the registration, a worker's close leaves it.
        assert await names(client, stream_name) == [default_consumer_name([stream_name])]
        closing = efo(registration="eager", consumer_arns=arns, deregister_on_close=True)
        async with Consumer(client, stream_name, closing):
            pass
        assert await names(client, stream_name) == []


async def test_none_validates_the_arns_and_fails_fast(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    other = f"{stream_name}-other"
    await client.create_stream(other, 1)
    with anyio.fail_after(30):
        arns = await register_consumers(client, [stream_name, other], "given")
        wrong = {stream_name: arns[stream_name].replace("given", "missing")}
        with pytest.raises(errors.ConfigError, match="consumer_arns"):
            async with Consumer(client, stream_name, efo(registration="none", consumer_arns=wrong)):
                pass
        swapped = {stream_name: arns[other]}
        with pytest.raises(errors.ConfigError, match="not of"):
            async with Consumer(
                client, stream_name, efo(registration="none", consumer_arns=swapped)
            ):
                pass
        absent = {other: arns[other]}
        with pytest.raises(errors.ConfigError, match="no ARN"):
            async with Consumer(
                client, stream_name, efo(registration="none", consumer_arns=absent)
            ):
                pass
        mine = {stream_name: arns[stream_name]}
        async with Consumer(client, stream_name, efo(registration="none", consumer_arns=mine)):
            pass
    assert await names(client, stream_name) == ["given"]  # never deregistered by "none"


async def test_a_killed_consumer_leaves_a_registration_the_cleanup_removes(
    client: KinesisClient, stream_name: str
) -> None:
    await client.create_stream(stream_name, 1)
    name = default_consumer_name([stream_name])
    with anyio.fail_after(30):
        with anyio.CancelScope() as killed:
            async with Consumer(client, stream_name, efo()):
                killed.cancel()  # not a clean close: no deregistration
                await anyio.sleep_forever()
        assert await names(client, stream_name) == [name]
        assert await deregister_consumer(client, stream_name, name) is True
        assert await names(client, stream_name) == []
        assert await deregister_consumer(client, stream_name, name) is False


async def test_deregistering_a_consumer_still_being_created_waits_for_it_then_removes_it(
    client: KinesisClient, stream_name: str
) -> None:
    """The service refuses DeregisterStreamConsumer while a consumer is CREATING (the local
    server keeps it so for half a second): deregistering right after registering waits for
    ACTIVE instead of failing with ResourceInUse (seen from the CLI in CI)."""
    await client.create_stream(stream_name, 1)
    summary = await client.call("DescribeStreamSummary", {"StreamName": stream_name})
    arn = summary["StreamDescriptionSummary"]["StreamARN"]
    await client.call("RegisterStreamConsumer", {"StreamARN": arn, "ConsumerName": "young"})
    with anyio.fail_after(30):
        assert await deregister_consumer(client, stream_name, "young") is True
    assert await list_consumers(client, stream_name) == []
    # Without waiting, the refusal is raised. The window is the server's half second: on a
    # loaded machine the calls between registering and deregistering can outlast it (then
    # the consumer is ACTIVE and goes), so a few tries, of which one must be refused.
    refused = 0
    for attempt in range(5):
        name = f"two-{attempt}"
        await client.call("RegisterStreamConsumer", {"StreamARN": arn, "ConsumerName": name})
        try:
            await deregister_consumer(client, stream_name, name, wait=False)
        except errors.ResourceInUseError:
            refused += 1
            break
    assert refused == 1
