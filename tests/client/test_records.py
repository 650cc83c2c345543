"""GetRecords replies and SubscribeToShard events: our decoder against botocore's, and
poison records, sans-IO and through the fault proxy."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import gc
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from kinesis_actors import ClientConfig, KinesisClient, LocalKinesis, errors
from kinesis_actors.client import ClientStats, RetryPolicy, RetrySettings
from kinesis_actors.client._eventstream import SubscribeToShardDecoder
from kinesis_actors.client._protocol import ProtocolCodec
from kinesis_actors.client._service import ClientCounters
from kinesis_actors.client._subscription import Subscription
from kinesis_actors.records import build_record_batch
from tests.client._samples import EVENT, LAST_EVENT, body
from tests.client.test_protocol import frame
from tests.faults import GARBLED_BODIES, FaultProxy, Request, Rewrite

SEQUENCE = "49590338271490256608559692538361571095921575989136588898"


@pytest.fixture(scope="module")
def codec() -> ProtocolCodec:
    return ProtocolCodec()


def _record(index: int, **changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "SequenceNumber": f"{SEQUENCE[:-3]}{index:03d}",
        "ApproximateArrivalTimestamp": 1_700_000_000.125 + index,
        "Data": base64.b64encode(b"r%d" % index).decode(),
        "PartitionKey": f"key-{index}",
    }
    record.update(changes)
    return {name: value for name, value in record.items() if value is not _GONE}


_GONE = object()


def _reply(records: list[dict[str, object]], **changes: object) -> dict[str, object]:
    return {"Records": records, "NextShardIterator": "next", "MillisBehindLatest": 7} | changes


def _botocore(codec: ProtocolCodec, raw: bytes) -> dict[str, Any]:
    output = codec.operation_model("GetRecords").output_shape
    parsed: dict[str, Any] = codec._parser.parse(
        {"status_code": 200, "headers": {}, "body": raw}, output
    )
    parsed.pop("ResponseMetadata", None)
    return parsed


def test_get_records_decodes_exactly_as_botocore_does(codec: ProtocolCodec) -> None:
    records = [
        _record(0),
        _record(1, Data=base64.b64encode(bytes(range(256))).decode(), EncryptionType="KMS"),
        _record(2, Data="", EncryptionType=None),  # nulls are left out, as botocore does
        _record(3, ApproximateArrivalTimestamp=1_700_000_000, PartitionKey="ключ-é-😀"),
        _record(4, ApproximateArrivalTimestamp="2023-11-14T22:13:20.250Z"),
        _record(5, Unknown="members the model does not know are left out"),
        _record(6, Data=base64.b64encode(b"x" * 1000).decode()),
    ]
    children = [
        {
            "ShardId": "shardId-000000000001",
            "ParentShards": ["shardId-000000000000"],
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "9", "Extra": 1},
            "Extra": None,
        }
    ]
    for document in (
        _reply(records),
        _reply([], ChildShards=None),
        _reply(records, NextShardIterator=None, ChildShards=children),
        _reply(records, Unknown={"x": 1}),
    ):
        raw = body(document)
        assert codec.decode("GetRecords", 200, {}, raw) == _botocore(codec, raw)


#: Every form of timestamp the decoder takes: the wire's float, an int, ISO 8601.
_STAMPS = [
    _record(0),
    _record(1, ApproximateArrivalTimestamp=1_700_000_000),
    _record(2, ApproximateArrivalTimestamp="2023-11-14T22:13:20.250Z"),
    _record(3, ApproximateArrivalTimestamp=-62135596800.0),  # year 1, the first a datetime holds
    _record(4, ApproximateArrivalTimestamp=253402300799.5),  # year 9999, the last
]


def _as_datetimes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        record | {"ApproximateArrivalTimestamp": dt.datetime.fromtimestamp(stamp, dt.UTC)}
        for record in records
        for stamp in [record["ApproximateArrivalTimestamp"]]
    ]


def test_epoch_timestamps_are_the_instants_botocore_gives_as_datetimes(
    codec: ProtocolCodec,
) -> None:
    """With ``epoch_timestamps`` a record's arrival time is a float of epoch seconds, the
    same instant botocore's datetime is, and the rest of the reply is unchanged."""
    raw = body(_reply(_STAMPS))
    plain = codec.decode("GetRecords", 200, {}, raw)
    epoch = codec.decode("GetRecords", 200, {}, raw, epoch_timestamps=True)
    assert {type(r["ApproximateArrivalTimestamp"]) for r in epoch["Records"]} == {float}
    assert {**epoch, "Records": _as_datetimes(epoch["Records"])} == plain
    shape = codec.event_stream_shape("SubscribeToShard")
    headers = {":message-type": "event", ":event-type": "SubscribeToShardEvent"}
    event = body({**EVENT, "Records": _STAMPS})
    plain_event = codec.decode_event("SubscribeToShard", shape, headers, event)
    epoch_event = codec.decode_event(
        "SubscribeToShard", shape, headers, event, epoch_timestamps=True
    )["SubscribeToShardEvent"]
    assert {**epoch_event, "Records": _as_datetimes(epoch_event["Records"])} == plain_event[
        "SubscribeToShardEvent"
    ]
    decoded = SubscribeToShardDecoder(codec, epoch_timestamps=True).feed(_event_frame(event))
    assert decoded == [epoch_event]


def test_a_batch_is_the_same_from_epoch_timestamps_as_from_datetimes(
    codec: ProtocolCodec,
) -> None:
    """The consumer's readers ask for epoch seconds: its Arrow batches must not change."""
    raw = body(_reply(_STAMPS[:3] + [_record(index) for index in range(5, 40)]))
    plain = codec.decode("GetRecords", 200, {}, raw)["Records"]
    epoch = codec.decode("GetRecords", 200, {}, raw, epoch_timestamps=True)["Records"]
    built = [build_record_batch("s", "shardId-0", records).batch for records in (plain, epoch)]
    assert built[0].equals(built[1])
    stamps = built[0].column("approximate_arrival_timestamp").cast(pa.int64()).to_pylist()
    assert stamps[:3] == [1_700_000_000_125, 1_700_000_000_000, 1_700_000_000_250]


def test_subscribe_events_decode_exactly_as_botocore_does(codec: ProtocolCodec) -> None:
    shape = codec.event_stream_shape("SubscribeToShard")
    for document in (EVENT, LAST_EVENT, {**EVENT, "Records": [_record(1), _record(2)]}):
        headers = {
            ":message-type": "event",
            ":event-type": "SubscribeToShardEvent",
            ":content-type": "application/json",
        }
        expected = codec._event_parser.parse(
            {"status_code": 200, "headers": headers, "body": body(document)}, shape
        )
        assert codec.decode_event("SubscribeToShard", shape, headers, body(document)) == expected


def _collections_during(decode: Callable[[], object]) -> list[int]:
    """The generations of the collections that ran while ``decode`` did."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.collect()
    gc.callbacks.append(callback)
    try:
        with contextlib.suppress(errors.MalformedReplyError):
            decode()
    finally:
        gc.callbacks.remove(callback)
    return seen


def test_decoding_a_large_reply_brings_on_no_collection(codec: ProtocolCodec) -> None:
    """A reply of 5,000 records allocates about 10,000 dicts before any is freed: decoded
    with the collector on, that was a young collection every few hundred records, each
    pushing whatever else was young (at a thousand shards, the other readers' calls) a
    generation up. The collector is held off for the reply's decoding, so at most the one
    its allocations bring on as the window closes runs; a poisoned reply and an event are
    decoded the same way, and the collector is on again after each."""
    raw = body(_reply([_record(index % 1000) for index in range(5000)]))
    poisoned = body(_reply([_record(index % 1000) for index in range(4999)] + ["junk"]))
    shape = codec.event_stream_shape("SubscribeToShard")
    headers = {":message-type": "event", ":event-type": "SubscribeToShardEvent"}
    event = body({**EVENT, "Records": [_record(index % 1000) for index in range(5000)]})
    for decode in (
        lambda: codec.decode("GetRecords", 200, {}, raw),
        lambda: codec.decode("GetRecords", 200, {}, poisoned),
        lambda: codec.decode_event("SubscribeToShard", shape, headers, event),
    ):
        assert len(_collections_during(decode)) <= 1
        assert gc.isenabled()


def test_a_collector_turned_off_by_the_application_stays_off(codec: ProtocolCodec) -> None:
    gc.disable()
    try:
        codec.decode("GetRecords", 200, {}, body(_reply([_record(0)])))
        assert not gc.isenabled()
    finally:
        gc.enable()


#: Poison: how one record (index 1 of 3) is broken, and what the error must say.
POISON: list[tuple[dict[str, object], str]] = [
    ({"Data": "@@@@"}, "Data is not valid base64"),
    ({"Data": "aGVsbG8"}, "Data is not valid base64"),  # bad padding
    ({"Data": "aGVs bG8="}, "Data is not valid base64"),  # botocore would drop the space
    ({"Data": "é"}, "Data is not valid base64"),
    ({"Data": 12}, "Data is not a base64 string"),
    ({"Data": _GONE}, "Data is missing"),
    ({"Data": None}, "Data is missing"),
    ({"SequenceNumber": _GONE}, "SequenceNumber is missing"),
    ({"SequenceNumber": 4959}, "SequenceNumber is not a string"),
    ({"SequenceNumber": "49x"}, "SequenceNumber is not a sequence number"),
    ({"SequenceNumber": "4" * 200}, "SequenceNumber is not a sequence number"),
    ({"ApproximateArrivalTimestamp": _GONE}, "ApproximateArrivalTimestamp is missing"),
    ({"ApproximateArrivalTimestamp": "yesterday"}, "ApproximateArrivalTimestamp is not a"),
    ({"ApproximateArrivalTimestamp": True}, "ApproximateArrivalTimestamp is not a"),
    ({"ApproximateArrivalTimestamp": 1e300}, "ApproximateArrivalTimestamp is not a"),
    ({"ApproximateArrivalTimestamp": 253402300800.0}, "ApproximateArrivalTimestamp is not a"),
    ({"ApproximateArrivalTimestamp": -62135596801.0}, "ApproximateArrivalTimestamp is not a"),
    ({"ApproximateArrivalTimestamp": float("nan")}, "ApproximateArrivalTimestamp is not a"),
    ({"ApproximateArrivalTimestamp": 10**400}, "ApproximateArrivalTimestamp is not a"),
    ({"PartitionKey": _GONE}, "PartitionKey is missing"),
    ({"PartitionKey": ["k"]}, "PartitionKey is not a string"),
]


def _expected_sequence(changes: dict[str, object]) -> str | None:
    sequence = changes.get("SequenceNumber", _record(1)["SequenceNumber"])
    return sequence if isinstance(sequence, str) else None


@pytest.mark.parametrize("epoch_timestamps", [False, True])
@pytest.mark.parametrize(("changes", "problem"), POISON)
def test_a_poison_record_is_named_and_the_rest_of_the_reply_kept(
    codec: ProtocolCodec, changes: dict[str, object], problem: str, epoch_timestamps: bool
) -> None:
    raw = body(_reply([_record(0), _record(1, **changes), _record(2)]))
    with pytest.raises(errors.MalformedReplyError) as caught:
        codec.decode("GetRecords", 200, {}, raw, epoch_timestamps=epoch_timestamps)
    error = caught.value
    assert error.operation == "GetRecords"
    [(index, sequence, what)] = error.bad_records
    assert (index, sequence) == (1, _expected_sequence(changes))
    assert what.startswith(problem)
    assert problem in str(error)
    assert error.reply is not None
    kept: Any = error.reply["Records"]
    assert [record["Data"] for record in kept] == [b"r0", b"r2"]
    assert error.reply["NextShardIterator"] == "next"
    assert error.reply["MillisBehindLatest"] == 7


def test_a_record_that_is_not_an_object_is_poison_too(codec: ProtocolCodec) -> None:
    raw = body(_reply(["junk", _record(1), None]))
    with pytest.raises(errors.MalformedReplyError) as caught:
        codec.decode("GetRecords", 200, {}, raw)
    assert [(i, s) for i, s, _ in caught.value.bad_records] == [(0, None), (2, None)]
    assert all("not an object" in what for _, _, what in caught.value.bad_records)


@pytest.mark.parametrize(("changes", "problem"), POISON[:3] + POISON[7:9])
def test_a_poison_record_in_an_event_is_named_too(
    codec: ProtocolCodec, changes: dict[str, object], problem: str
) -> None:
    document = {**EVENT, "Records": [_record(0), _record(1, **changes)]}
    decoder = SubscribeToShardDecoder(codec)
    with pytest.raises(errors.MalformedReplyError, match=problem) as caught:
        decoder.feed(_event_frame(body(document)))
    assert caught.value.operation == "SubscribeToShard"
    assert [index for index, _, _ in caught.value.bad_records] == [1]
    assert caught.value.reply is not None
    assert caught.value.reply["ContinuationSequenceNumber"] == EVENT["ContinuationSequenceNumber"]


def _event_frame(payload: bytes) -> bytes:
    return frame(
        {
            ":message-type": "event",
            ":event-type": "SubscribeToShardEvent",
            ":content-type": "application/json",
        },
        payload,
    )


class _Body:
    """What a Subscription reads: an H2Stream's body, from bytes held in memory."""

    http_version = "HTTP/2"

    def __init__(self, data: bytes) -> None:
        self._chunks = [data[i : i + 100] for i in range(0, len(data), 100)]

    async def receive(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


@pytest.mark.anyio
@pytest.mark.parametrize("kind", sorted(GARBLED_BODIES))
async def test_a_garbled_event_surfaces_typed_after_the_good_ones(
    codec: ProtocolCodec, kind: str
) -> None:
    good = _event_frame(body(EVENT))
    stream = good + good + _event_frame(GARBLED_BODIES[kind]) + good
    counters = ClientCounters()
    subscription = Subscription(_Body(stream), codec, opened_at=0.0, counters=counters)
    received = []
    with pytest.raises(errors.MalformedReplyError) as caught:
        async for event in subscription:
            received.append(event)
    assert len(received) == 2  # the events before the bad one are delivered
    assert caught.value.operation == "SubscribeToShard"
    assert counters.statistics().malformed_replies == 1


def _poison_second_record(body: bytes) -> bytes:
    document = json.loads(body)
    document["Records"][1]["Data"] = "not base64!"
    return json.dumps(document).encode()


@pytest.mark.anyio
async def test_a_poison_record_is_retried_then_surfaces_with_the_good_ones(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    fast = RetrySettings(max_retries=2, base=0.001, max=0.002)
    poisoned = 0
    limit = 0  # how many GetRecords replies to poison (-1: all)

    def decide(request: Request) -> Rewrite | None:
        nonlocal poisoned
        if request.target != "GetRecords" or poisoned == limit:
            return None
        poisoned += 1
        return Rewrite(_poison_second_record)

    proxy.decide = decide
    async with KinesisClient(
        region=local_kinesis.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ClientConfig(retry=RetryPolicy(overrides={"GetRecords": fast})),
    ) as kinesis:
        await kinesis.create_stream(stream_name, 1)
        await kinesis.call(
            "PutRecords",
            {
                "StreamName": stream_name,
                "Records": [{"Data": b"r%d" % i, "PartitionKey": "k"} for i in range(3)],
            },
        )
        iterator = await kinesis.call(
            "GetShardIterator",
            {
                "StreamName": stream_name,
                "ShardId": "shardId-000000000000",
                "ShardIteratorType": "TRIM_HORIZON",
            },
        )
        params = {"ShardIterator": iterator["ShardIterator"]}
        limit = 1  # a record garbled once in transit: the retry reads it whole
        result = await kinesis.call("GetRecords", params)
        assert [record["Data"] for record in result["Records"]] == [b"r0", b"r1", b"r2"]
        poisoned, limit = 0, -1  # poison on the server: every attempt meets it
        with pytest.raises(errors.MalformedReplyError) as caught:
            await kinesis.call("GetRecords", params)
    assert poisoned == fast.max_retries + 1
    [(index, sequence, what)] = caught.value.bad_records
    assert index == 1
    assert sequence == result["Records"][1]["SequenceNumber"]
    assert "Data is not valid base64" in what
    assert caught.value.reply is not None
    kept: Any = caught.value.reply["Records"]
    assert [record["Data"] for record in kept] == [b"r0", b"r2"]
    assert kinesis.statistics().malformed_replies == 1 + fast.max_retries + 1


async def _drain(stream: bytes, codec: ProtocolCodec) -> tuple[int, ClientStats, Exception | None]:
    counters = ClientCounters()
    subscription = Subscription(_Body(stream), codec, opened_at=0.0, counters=counters)
    received = 0
    try:
        async for _ in subscription:
            received += 1
    except errors.KinesisError as exc:
        return received, counters.statistics(), exc
    return received, counters.statistics(), None


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        (GARBLED_BODIES["html"], "cannot be framed"),  # a 200 that is no event stream at all
        (_flip(_event_frame(body(EVENT)), 40), "cannot be framed"),  # a bad checksum
        (_event_frame(body(EVENT))[:30], "ended inside a message"),  # cut mid-event
        (b"{}", "ended inside a message"),  # shorter than a prelude
    ],
)
async def test_an_event_stream_that_cannot_be_framed_is_malformed(
    codec: ProtocolCodec, tail: bytes, problem: str
) -> None:
    good = _event_frame(body(EVENT))
    received, stats, error = await _drain(good + good + tail, codec)
    assert received == 2
    assert isinstance(error, errors.MalformedReplyError)
    assert error.operation == "SubscribeToShard"
    assert problem in str(error)
    assert stats.malformed_replies == 1


@pytest.mark.anyio
async def test_a_well_framed_stream_ends_quietly(codec: ProtocolCodec) -> None:
    good = _event_frame(body(EVENT))
    received, stats, error = await _drain(good * 3 + _event_frame(body(LAST_EVENT)), codec)
    assert (received, error, stats.malformed_replies) == (4, None, 0)
