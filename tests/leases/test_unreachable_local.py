"""A worker cut off from its table drops its leases before any other worker may take them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from kinesis_actors import DynamoDBClient, KinesisClient, LocalDynamoDB
from kinesis_actors.leases import LeaseAcquired, LeaseEvent, LeaseLost
from tests.faults import Cut, FaultProxy, Request

from .helpers import PATIENCE, coordinator, events_until

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stream(client: KinesisClient, stream_name: str) -> AsyncIterator[str]:
    with anyio.fail_after(PATIENCE):
        await client.create_stream(stream_name, 2)
    yield stream_name


async def test_leases_not_renewed_for_the_failover_time_are_dropped_before_others_take_them(
    local_dynamodb: LocalDynamoDB,
    dynamodb: DynamoDBClient,
    client: KinesisClient,
    stream: str,
    lease_table_name: str,
) -> None:
    cut = False

    def decide(request: Request) -> Cut | None:
        return Cut() if cut else None

    timeline: list[tuple[str, LeaseEvent]] = []

    async def follow(name: str, source: object, count: int) -> None:
        for _ in range(count):
            timeline.append((name, await source.next_event()))  # type: ignore[attr-defined]

    with FaultProxy(local_dynamodb.port, decide) as proxy:
        async with (
            DynamoDBClient(
                region=local_dynamodb.region,
                endpoint_url=proxy.endpoint_url,
                verify=False,
                credentials=local_dynamodb.credentials,
            ) as cut_off_client,
            coordinator(cut_off_client, client, lease_table_name, stream, "cut") as isolated,
        ):
            seen = await events_until(isolated, lambda seen: len(seen) == 2)
            async with coordinator(dynamodb, client, lease_table_name, stream, "heir") as heir:
                # The heir steals one of the two; then each holds one and nobody steals.
                await events_until(heir, lambda seen: len(seen) == 1)
                await events_until(isolated, lambda seen: len(seen) == 3, seen)
                assert [seen[-1]] == [LeaseLost(stream, shard, "taken") for _, shard in heir.held()]
                cut = True
                with anyio.fail_after(PATIENCE):
                    async with anyio.create_task_group() as group:
                        group.start_soon(follow, "cut", isolated, 1)
                        group.start_soon(follow, "heir", heir, 1)
    lost = {e.shard_id: i for i, (who, e) in enumerate(timeline) if isinstance(e, LeaseLost)}
    taken = {e.shard_id: i for i, (who, e) in enumerate(timeline) if isinstance(e, LeaseAcquired)}
    assert {who for who, e in timeline if isinstance(e, LeaseLost)} == {"cut"}
    assert {e.reason for _, e in timeline if isinstance(e, LeaseLost)} == {"expired"}
    assert set(lost) == set(taken) and len(lost) == 1
    assert all(lost[shard] < taken[shard] for shard in lost)  # never read by two at once
