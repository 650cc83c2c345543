"""EfoReader without a server: scripted subscriptions for what the local server cannot do.

kinesis-mock never ends a closed shard's subscription with a null continuation, so lesson 5
(a null continuation is terminal) is tested here with a scripted event, as are lesson 15 (empty
events advance the position), LATEST pinning and the generation token (lesson 4).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from kinesis_actors import errors
from kinesis_actors.consumer import EfoReader, EfoSettings, StartingPosition
from kinesis_actors.consumer._metrics import ShardMetrics

pytestmark = pytest.mark.anyio

FAST = EfoSettings(
    watchdog_timeout=5.0,
    min_subscribe_interval=0.001,
    backoff_initial=0.001,
    backoff_max=0.002,
    max_consecutive_failures=2,
)


def record(sequence: str) -> dict[str, Any]:
    return {"SequenceNumber": sequence, "Data": b"x", "PartitionKey": "k"}


class ScriptedClient:
    """``subscribe_to_shard`` yields scripted subscriptions: each a list of events, where an
    exception instance is raised instead of yielded; the iteration then ends."""

    def __init__(self, *scripts: list[Any]) -> None:
        self.scripts = list(scripts)
        self.positions: list[Mapping[str, Any]] = []
        self.open = 0

    @asynccontextmanager
    async def subscribe_to_shard(
        self, arn: str, shard_id: str, position: Mapping[str, Any]
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        self.positions.append(dict(position))
        script = self.scripts.pop(0) if self.scripts else []
        self.open += 1
        try:
            yield self._events(script)
        finally:
            self.open -= 1

    async def _events(self, script: list[Any]) -> AsyncIterator[dict[str, Any]]:
        for item in script:
            await anyio.lowlevel.checkpoint()
            if isinstance(item, BaseException):
                raise item
            yield item

    async def call(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"unexpected {operation}")


def reader(client: ScriptedClient, start: StartingPosition | None = None) -> EfoReader:
    return EfoReader(
        client,  # type: ignore[arg-type]
        "s",
        "shardId-000000000000",
        "arn:consumer",
        start or StartingPosition.trim_horizon(),
        metrics=ShardMetrics(),
        settings=FAST,
    )


async def test_a_null_continuation_is_terminal_and_never_resubscribed() -> None:
    client = ScriptedClient(
        [
            {"Records": [record("5")], "ContinuationSequenceNumber": "5", "MillisBehindLatest": 0},
            {
                "Records": [record("7")],
                "ContinuationSequenceNumber": None,
                "ChildShards": [{"ShardId": "shardId-000000000001"}],
            },
        ]
    )
    efo = reader(client)
    first = await efo.read()
    assert [r["SequenceNumber"] for r in first.records] == ["5"] and not first.finished
    last = await efo.read()
    assert last.finished and last.child_shards == ("shardId-000000000001",)
    assert [r["SequenceNumber"] for r in last.records] == ["7"]
    assert client.open == 0  # disposed at once
    with pytest.raises(RuntimeError, match="finished"):
        await efo.read()
    assert len(client.positions) == 1


async def test_empty_events_advance_the_position_and_resubscribe_after_it() -> None:
    client = ScriptedClient(
        [
            {"Records": [], "ContinuationSequenceNumber": "10"},
            {"Records": [], "ContinuationSequenceNumber": "11"},
        ],
        [{"Records": [record("12")], "ContinuationSequenceNumber": "12"}],
    )
    efo = reader(client, StartingPosition.latest())
    await efo.read()
    assert efo.start.type == "AT_TIMESTAMP"  # LATEST pinned when the subscription opened
    await efo.read()
    assert efo.position == StartingPosition.after_sequence_number("11")
    read = await efo.read()  # the first subscription ended: a new one from the continuation
    assert [r["SequenceNumber"] for r in read.records] == ["12"]
    assert client.positions[0]["Type"] == "LATEST"
    assert client.positions[1] == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "11"}
    assert efo._metrics.resubscriptions == {"end": 1}
    await efo.aclose()
    assert client.open == 0


async def test_errors_resubscribe_then_give_up_after_too_many_in_a_row() -> None:
    failure = errors.ServiceError("boom", code="InternalFailureException")
    client = ScriptedClient(
        [{"Records": [record("1")], "ContinuationSequenceNumber": "1"}, failure],
        [failure],
        [failure],
        [failure],
    )
    efo = reader(client)
    await efo.read()
    with pytest.raises(errors.ServiceError):
        await efo.read()
    assert efo._metrics.resubscriptions == {"error": 3}
    assert all(
        p == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "1"} for p in client.positions[1:]
    )
    assert client.open == 0


async def test_a_stale_generation_cannot_dispose_the_current_subscription() -> None:
    client = ScriptedClient(
        [{"Records": [], "ContinuationSequenceNumber": "1"}],
        [
            {"Records": [], "ContinuationSequenceNumber": "2"},
            {"Records": [], "ContinuationSequenceNumber": "3"},
        ],
    )
    efo = reader(client)
    await efo.read()
    stale = efo.generation
    await efo.read()  # the first subscription ended; the second one is current
    assert efo.generation == stale + 1 and client.open == 1
    await efo._dispose(stale, "error")  # a late callback of the old subscription
    assert client.open == 1 and efo.generation == stale + 1
    await efo.read()
    await efo.aclose()
    assert client.open == 0
