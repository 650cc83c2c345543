"""The planner's calls for one shard (``_shard_reads``) on a scripted shard: which cut each
trigger makes and how many calls it costs. No server, no Spark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spark_bridge._offsets import AFTER, BEFORE, Bound, ShardEntry
from spark_bridge._policy import PlannerSettings
from spark_bridge._shard_reads import ShardReads

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
KEY = ("s", "shard-0")


class ScriptedShard:
    """Records ``1..n`` that arrived at second ``n`` each; honours Limit and AT_TIMESTAMP."""

    def __init__(self, count: int) -> None:
        self.records = [
            {
                "SequenceNumber": str(number),
                "ApproximateArrivalTimestamp": EPOCH + timedelta(seconds=number),
                "Data": b"d%d" % number,
                "PartitionKey": "k",
            }
            for number in range(1, count + 1)
        ]
        self.calls: list[str] = []

    def _index(self, params: dict[str, Any]) -> int:
        kind = params["ShardIteratorType"]
        if kind == "TRIM_HORIZON":
            return 0
        for index, record in enumerate(self.records):
            number = int(record["SequenceNumber"])
            if kind == "AT_TIMESTAMP":
                if record["ApproximateArrivalTimestamp"] >= params["Timestamp"]:
                    return index
            elif kind == "AT_SEQUENCE_NUMBER":
                if number >= int(params["StartingSequenceNumber"]):
                    return index
            elif number > int(params["StartingSequenceNumber"]):
                return index
        return len(self.records)

    async def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(operation)
        if operation == "GetShardIterator":
            return {"ShardIterator": str(self._index(params))}
        index = int(params["ShardIterator"])
        chunk = self.records[index : index + params["Limit"]]
        end = index + len(chunk)
        return {
            "Records": chunk,
            "NextShardIterator": str(end),
            "MillisBehindLatest": 0 if end >= len(self.records) else 1000,
        }


def reads(shard: ScriptedShard) -> ShardReads:
    return ShardReads(shard.call, PlannerSettings(window_ms=10_000, settle_ms=0), lambda: 0.0)


def ms(second: int) -> int:
    return second * 1000


@pytest.mark.anyio
async def test_a_quiet_shard_is_cut_after_its_last_record_in_two_calls_then_one() -> None:
    shard = ScriptedShard(3)
    planner = reads(shard)
    outcome = await planner.anchor_mode(KEY, ShardEntry(), ms(100), target_ms=ms(5))
    assert outcome.entry == ShardEntry(bound=Bound(3, AFTER), arrival_ms=ms(3))
    assert outcome.final
    assert shard.calls == ["GetShardIterator", "GetRecords"]
    shard.calls.clear()
    again = await planner.anchor_mode(KEY, outcome.entry, ms(100), target_ms=ms(5))
    assert again.entry is None and again.idle and again.final
    assert shard.calls == ["GetRecords"]  # the kept iterator


@pytest.mark.anyio
async def test_a_record_at_or_after_the_cut_time_in_the_probe_is_left_for_later() -> None:
    shard = ScriptedShard(4)
    outcome = await reads(shard).anchor_mode(KEY, ShardEntry(), ms(100), target_ms=ms(3))
    assert outcome.entry == ShardEntry(bound=Bound(3, BEFORE), arrival_ms=ms(3))


@pytest.mark.anyio
async def test_a_cut_before_an_anchored_record_needs_no_probe() -> None:
    shard = ScriptedShard(40)
    entry = ShardEntry(bound=Bound(5, BEFORE), arrival_ms=ms(5))
    outcome = await reads(shard).anchor_mode(KEY, entry, ms(100), target_ms=None)
    # One window (10 s) past record 5: the anchor is record 15.
    assert outcome.entry == ShardEntry(bound=Bound(15, BEFORE), arrival_ms=ms(15))
    assert not outcome.final
    assert shard.calls == ["GetShardIterator", "GetRecords"]


@pytest.mark.anyio
async def test_a_backlog_longer_than_the_probe_is_cut_at_an_anchor() -> None:
    shard = ScriptedShard(40)
    outcome = await reads(shard).anchor_mode(KEY, ShardEntry(), ms(100), target_ms=ms(30))
    assert outcome.entry == ShardEntry(bound=Bound(11, BEFORE), arrival_ms=ms(11))
    assert not outcome.final


@pytest.mark.anyio
async def test_a_shard_gone_quiet_after_an_anchor_is_read_to_its_last_record() -> None:
    shard = ScriptedShard(8)
    entry = ShardEntry(bound=Bound(5, BEFORE), arrival_ms=ms(5))
    outcome = await reads(shard).anchor_mode(KEY, entry, ms(100), target_ms=ms(100))
    assert outcome.entry == ShardEntry(bound=Bound(8, AFTER), arrival_ms=ms(8))
