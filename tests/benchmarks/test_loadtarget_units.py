"""The load target's sans-IO parts: event-stream framing, buckets, routing, configs."""

from __future__ import annotations

import json
from hashlib import md5

import pytest
from botocore.eventstream import EventStreamBuffer

from benchmarks.loadtarget import Faults, Limits, Synthetic, TargetConfig
from benchmarks.loadtarget._eventstream import encode_event, encode_exception, initial_response
from benchmarks.loadtarget._limits import Clock, SecondSeries, TokenBucket
from benchmarks.loadtarget._stream import HASH_SPACE, Stream
from kinesis_actors import errors
from kinesis_actors.client._eventstream import SubscribeToShardDecoder
from kinesis_actors.client._protocol import ProtocolCodec


def test_event_frames_decode_with_botocore() -> None:
    payload = json.dumps(
        {
            "Records": [
                {
                    "SequenceNumber": "1" * 56,
                    "ApproximateArrivalTimestamp": 1700000000.5,
                    "Data": "aGVsbG8=",
                    "PartitionKey": "k",
                }
            ],
            "ContinuationSequenceNumber": "1" * 56,
            "MillisBehindLatest": 7,
        }
    ).encode()
    buffer = EventStreamBuffer()
    stream = initial_response() + encode_event(payload)
    # Fed in odd pieces, as a socket would deliver them.
    for start in range(0, len(stream), 7):
        buffer.add_data(stream[start : start + 7])
    messages = list(buffer)
    assert [m.headers[":event-type"] for m in messages] == [
        "initial-response",
        "SubscribeToShardEvent",
    ]
    assert messages[1].headers[":message-type"] == "event"
    assert messages[1].headers[":content-type"] == "application/json"
    assert messages[1].payload == payload

    decoder = SubscribeToShardDecoder(ProtocolCodec())
    events = decoder.feed(stream)
    assert decoder.initial_response_seen
    assert len(events) == 1
    record = events[0]["Records"][0]
    assert record["Data"] == b"hello"
    assert record["ApproximateArrivalTimestamp"].timestamp() == 1700000000.5
    assert events[0]["MillisBehindLatest"] == 7


def test_exception_event_raises_the_typed_error() -> None:
    decoder = SubscribeToShardDecoder(ProtocolCodec())
    with pytest.raises(errors.ResourceInUseError):
        decoder.feed(encode_exception("ResourceInUseException", "busy"))


def test_token_bucket_on_a_manual_clock() -> None:
    clock = Clock(manual=True)
    bucket = TokenBucket(rate=10, capacity=10, clock=clock)
    assert bucket.take(10)
    assert not bucket.take(1)
    clock.advance(0.5)
    assert bucket.take(5)
    assert not bucket.take(1)
    clock.advance(100)
    assert bucket.tokens == 10  # capped at the capacity
    bucket.charge(25)  # debt
    assert not bucket.positive()
    assert bucket.seconds_until_positive() == pytest.approx(1.5, abs=0.01)
    clock.advance(1.6)
    assert bucket.positive()
    with pytest.raises(RuntimeError):
        Clock().advance(1)


def test_second_series_rows() -> None:
    clock = Clock(manual=True)
    series = SecondSeries(clock, 2, max_seconds=2)
    series.add(1, 10)
    series.add(2, 20)
    clock.advance(1)
    series.add(5, 50)
    clock.advance(1)
    series.add(1, 1)
    assert series.rows() == [[1, 5, 50], [2, 1, 1]]  # bounded to the last two seconds


def test_routing_matches_the_md5_rule_and_ranges_cover_the_space() -> None:
    stream = Stream("s", 5, "us-east-1", "1", None, Clock(), 60)
    assert stream.shards[0].start_key == 0
    assert stream.shards[-1].end_key == HASH_SPACE - 1
    for left, right in zip(stream.shards, stream.shards[1:], strict=False):
        assert right.start_key == left.end_key + 1
    for index in range(200):
        key = f"key-{index}"
        value = int.from_bytes(md5(key.encode()).digest(), "big")
        shard = stream.for_partition_key(key)
        assert shard.start_key <= value <= shard.end_key
    assert stream.for_hash_key(str(HASH_SPACE - 1)) is stream.shards[-1]
    with pytest.raises(ValueError):
        stream.for_hash_key(str(HASH_SPACE))


def test_configs_round_trip_through_json() -> None:
    config = TargetConfig(
        shards=3,
        limits=Limits(write_records_per_s=10, read_calls_per_s=None),
        faults=Faults(throttle_share=0.25, paused_shards=("shardId-000000000001",), seed=3),
        synthetic=Synthetic(record_size=10, payloads=(b"\x00\x01",)),
        tls=False,
    )
    assert TargetConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError):
        Faults(throttle_share=1.5)
    with pytest.raises(ValueError):
        Limits(write_bytes_per_s=0)
