"""GetRecords replies and SubscribeToShard events, checked and decoded, sans-IO.

The consumer's hot path. botocore's parser walks the output shape for every member of every
record (and base64-decodes without checking the alphabet); here a reply is ``json.loads``ed
once, each record is built in one pass, and anything unexpected sends that record down a slow
path that says exactly what is wrong. The output is botocore's, member for member (``Data``
as bytes, ``ApproximateArrivalTimestamp`` as a UTC datetime, nulls and unknown members left
out); a test compares the two. Measured on 1,000 records of 100 B: see ``docs/architecture.md``.
With ``epoch_timestamps`` a record's ``ApproximateArrivalTimestamp`` is instead the float of
epoch seconds the wire carries: a reader that turns it straight into a number (the consumer's
Arrow batches, the Spark source) then pays for no ``datetime`` made and taken apart again,
0.37 us a record whose timestamp differs from the one before it (measured: a ``datetime``
made 0.19 us, turned into milliseconds 0.27, a float's milliseconds 0.08).

Two rules guard the end of a shard, which only these replies can prove:

- a GetRecords reply without ``NextShardIterator`` ends the shard only if it is otherwise
  well-formed (``Records`` a list, ``MillisBehindLatest`` an integer) and names the children
  (``ChildShards`` non-empty, as the service sends at a closed shard's end, and as KCL
  requires); otherwise it is malformed;
- likewise a SubscribeToShard event whose ``ContinuationSequenceNumber`` is null.

A reply that is well-formed but carries malformed *records* (poison: bad base64, a missing
field, a sequence number that is not one) raises
:class:`~kinesis_actors.errors.MalformedReplyError` with ``bad_records`` and ``reply``, the
decoded reply without those records, so that the consumer can name them or skip them.
"""

from __future__ import annotations

import binascii
import datetime as dt
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.utils import parse_timestamp

from .. import errors
from .._validate import SEQUENCE_NUMBER_MAX_DIGITS
from ._replies import INTEGER, STRING, ListOf, Struct, find_problem, malformed

__all__ = [
    "collector_held",
    "decode_get_records",
    "decode_subscribe_event",
    "epoch_seconds",
    "utc_timestamp",
]

BadRecord = tuple[int, str | None, str]

_CHILD_SHARD = Struct(
    {
        "ShardId": STRING,
        "ParentShards": ListOf(STRING),
        "HashKeyRange": Struct({"StartingHashKey": STRING, "EndingHashKey": STRING}),
    }
)
_CHILD_SHARDS = ListOf(_CHILD_SHARD)
_UTC = dt.UTC
_from_epoch = dt.datetime.fromtimestamp
# The epoch seconds a UTC datetime can hold (years 1 to 9999): what ``fromtimestamp`` refuses
# is refused as epoch seconds too, so both forms find the same records bad.
_FIRST_EPOCH = -62135596800.0
_END_EPOCH = 253402300800.0
_a2b_base64 = binascii.a2b_base64
_MAX_DIGITS = SEQUENCE_NUMBER_MAX_DIGITS


def utc_timestamp(value: Any) -> dt.datetime:
    """A timestamp as botocore gives it here: epoch seconds or ISO 8601, as a UTC datetime."""
    if type(value) is float or type(value) is int:
        return _from_epoch(value, _UTC)
    if isinstance(value, str):  # rare: JSON 1.1 sends epoch seconds
        parsed: dt.datetime = parse_timestamp(value)
        return parsed.astimezone(_UTC)
    raise TypeError(f"not a timestamp: {value!r:.80}")


def _is_sequence_number(value: Any) -> bool:
    return type(value) is str and value.isdigit() and value.isascii() and len(value) <= _MAX_DIGITS


def _what_is_wrong(item: Any) -> str:
    """The slow path: why a record failed the fast one, in words."""
    if not isinstance(item, dict):
        return f"the record is not an object: {item!r:.80}"
    for name in ("SequenceNumber", "Data", "ApproximateArrivalTimestamp", "PartitionKey"):
        if item.get(name) is None:
            return f"{name} is missing"
    sequence = item["SequenceNumber"]
    if not isinstance(sequence, str):
        return f"SequenceNumber is not a string: {sequence!r:.80}"
    if not _is_sequence_number(sequence):
        return f"SequenceNumber is not a sequence number (decimal digits): {sequence!r:.80}"
    if not isinstance(item["PartitionKey"], str):
        return f"PartitionKey is not a string: {item['PartitionKey']!r:.80}"
    data = item["Data"]
    if not isinstance(data, str):
        return f"Data is not a base64 string: {data!r:.80}"
    try:
        _a2b_base64(data, strict_mode=True)
    except ValueError as exc:
        return f"Data is not valid base64 ({exc})"
    try:
        epoch_seconds(item["ApproximateArrivalTimestamp"])
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        return f"ApproximateArrivalTimestamp is not a timestamp ({exc})"
    return "the record is malformed"  # pragma: no cover - the fast path took it


def epoch_seconds(value: Any) -> float:
    """A timestamp as botocore gives it here, as float epoch seconds; raises like
    :func:`utc_timestamp` for what is not one (NaN and years past 9999 included)."""
    if type(value) is float or type(value) is int:
        seconds = float(value)
        if _FIRST_EPOCH <= seconds < _END_EPOCH:  # NaN fails both
            return seconds
        raise ValueError(f"epoch seconds out of range: {value!r:.80}")
    return utc_timestamp(value).timestamp()


def decode_records(
    items: list[Any], *, epoch_timestamps: bool = False
) -> tuple[list[dict[str, Any]], tuple[BadRecord, ...]]:
    """The records in boto3's shape, and the ones that could not be decoded; with
    ``epoch_timestamps``, each ``ApproximateArrivalTimestamp`` as float epoch seconds."""
    records: list[dict[str, Any]] = []
    bad: list[BadRecord] = []
    append = records.append
    for index, item in enumerate(items):
        # The checks are inlined (no helper calls): this loop runs for every record read.
        try:
            sequence = item["SequenceNumber"]
            stamp = item["ApproximateArrivalTimestamp"]
            key = item["PartitionKey"]
            if epoch_timestamps:
                if type(stamp) is not float or not _FIRST_EPOCH <= stamp < _END_EPOCH:
                    stamp = epoch_seconds(stamp)
            elif type(stamp) is float:
                stamp = _from_epoch(stamp, _UTC)
            else:
                stamp = utc_timestamp(stamp)
            record = {
                "SequenceNumber": sequence,
                "ApproximateArrivalTimestamp": stamp,
                "Data": _a2b_base64(item["Data"], strict_mode=True),
                "PartitionKey": key,
            }
            good = (
                type(key) is str
                and type(sequence) is str
                and sequence.isdigit()
                and sequence.isascii()
                and len(sequence) <= _MAX_DIGITS
            )
        except (KeyError, TypeError, ValueError, OverflowError, OSError):
            # binascii.Error is a ValueError; OverflowError and OSError are fromtimestamp's.
            good = False
        if not good:
            sequence = item.get("SequenceNumber") if isinstance(item, dict) else None
            number = sequence if isinstance(sequence, str) else None
            bad.append((index, number, _what_is_wrong(item)))
            continue
        encryption = item.get("EncryptionType")
        if encryption is not None:
            record["EncryptionType"] = encryption
        append(record)
    return records, tuple(bad)


def _child_shards(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ChildShards as botocore gives them: the model's members only."""
    return [
        {
            "ShardId": child["ShardId"],
            "ParentShards": list(child["ParentShards"]),
            "HashKeyRange": {
                "StartingHashKey": child["HashKeyRange"]["StartingHashKey"],
                "EndingHashKey": child["HashKeyRange"]["EndingHashKey"],
            },
        }
        for child in value
    ]


def _decode(
    operation: str,
    status_code: int,
    document: dict[str, Any],
    follow_on: str,
    epoch_timestamps: bool,
) -> dict[str, Any]:
    """Shared by both replies: ``follow_on`` is the member whose absence ends the shard."""
    items = document.get("Records")
    problem = None
    if not isinstance(items, list):
        problem = "Records is missing" if items is None else "Records is not a list"
    elif document.get("MillisBehindLatest") is None:
        problem = "MillisBehindLatest is missing"
    else:
        problem = find_problem(INTEGER, document["MillisBehindLatest"], "MillisBehindLatest")
    following = document.get(follow_on)
    if problem is None and following is not None:
        problem = find_problem(STRING, following, follow_on)
    children = document.get("ChildShards")
    if problem is None and children is not None:
        problem = find_problem(_CHILD_SHARDS, children, "ChildShards")
    if problem is None and following is None and not children:
        problem = f"{follow_on} is missing and ChildShards is empty: no proof the shard ended"
    if problem is not None:
        raise malformed(operation, status_code, problem)
    assert isinstance(items, list)
    records, bad = decode_records(items, epoch_timestamps=epoch_timestamps)
    result: dict[str, Any] = {"Records": records}
    if following is not None:
        result[follow_on] = following
    result["MillisBehindLatest"] = document["MillisBehindLatest"]
    if children is not None:
        result["ChildShards"] = _child_shards(children)
    if bad:
        raise errors.MalformedReplyError(
            f"HTTP {status_code} with {len(bad)} malformed record(s) of {len(items)}: "
            + "; ".join(
                f"record {i} ({seq or 'no sequence number'}): {why}" for i, seq, why in bad[:3]
            )
            + ("; ..." if len(bad) > 3 else ""),
            operation=operation,
            status_code=status_code,
            bad_records=bad,
            reply=result,
        )
    return result


@contextmanager
def collector_held() -> Iterator[None]:
    """CPython's cyclic collector held off while one reply is loaded and decoded.

    A reply of N records allocates about 2N dicts (``json.loads``'s and the decoded ones)
    before the first of them is freed, so its decoding alone triggered a young collection
    every few hundred records. Each one moved whatever else was young at that moment (at a
    thousand shards, the other readers' calls in flight) a generation up, and enough of
    those bring on a full collection, which walks every live object. Held off, a reply's
    allocations that die with it never trigger one. The window is one reply's synchronous
    decoding (no await inside); the collector is process-wide, so another thread's
    collections wait that long too, and a thread that turns it off meanwhile finds it on
    again. A collector that was already off is left as it is."""
    if not gc.isenabled():
        yield
        return
    try:
        gc.disable()  # inside: an interruption right after it still re-enables
        yield
    finally:
        gc.enable()


def decode_get_records(
    document: dict[str, Any], status_code: int = 200, *, epoch_timestamps: bool = False
) -> dict[str, Any]:
    """A GetRecords reply (already ``json.loads``ed) in boto3's shape, or raise
    :class:`~kinesis_actors.errors.MalformedReplyError`; ``epoch_timestamps`` as for
    :func:`decode_records`."""
    return _decode("GetRecords", status_code, document, "NextShardIterator", epoch_timestamps)


def decode_subscribe_event(
    document: dict[str, Any], *, epoch_timestamps: bool = False
) -> dict[str, Any]:
    """A ``SubscribeToShardEvent`` payload (already ``json.loads``ed) in boto3's shape, or
    raise :class:`~kinesis_actors.errors.MalformedReplyError`; ``epoch_timestamps`` as for
    :func:`decode_records`."""
    return _decode(
        "SubscribeToShard", 200, document, "ContinuationSequenceNumber", epoch_timestamps
    )
