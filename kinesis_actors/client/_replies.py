"""Replies are checked before they are believed, sans-IO.

A 2xx reply whose body is empty, truncated, not JSON, not an object, or lacks a field the
library reads is not an answer: botocore's parser turns an empty body into ``{}``, and ``{}``
from GetRecords reads as "no next iterator", i.e. the end of an open shard. So every reply
is loaded and checked here first; one that cannot be believed raises
:class:`~kinesis_actors.errors.MalformedReplyError` naming the operation and what is wrong,
which the client retries like a 5xx.

:data:`REPLIES` lists, per operation the library calls, the fields it reads: their presence
and their JSON type. A JSON ``null`` counts as absent, as in botocore's parser (the local
server sends ``"NextToken": null``). Operations not listed get the model's own top-level
required members. GetRecords and SubscribeToShard's events are checked (and decoded) by
``_records``; their end-of-shard rules live there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import errors

__all__ = [
    "INTEGER",
    "REPLIES",
    "STRING",
    "TIMESTAMP",
    "ListOf",
    "Scalar",
    "Spec",
    "Struct",
    "check_put_records",
    "find_problem",
    "load_reply",
    "malformed",
]

#: How much of an unbelievable body an error message quotes.
_QUOTE = 120


@dataclass(frozen=True, slots=True)
class Scalar:
    """A JSON value of one kind; ``check`` says whether a value is one."""

    name: str
    check: Callable[[Any], bool]


@dataclass(frozen=True, slots=True)
class ListOf:
    """A JSON array whose every item matches ``item``."""

    item: Spec


@dataclass(frozen=True, slots=True)
class Struct:
    """A JSON object with ``required`` members (present, not null) and ``optional`` ones
    (checked only when present). Members not named are not looked at."""

    required: Mapping[str, Spec]
    optional: Mapping[str, Spec] = field(default_factory=dict)


Spec = Scalar | ListOf | Struct

STRING = Scalar("a string", lambda value: isinstance(value, str))
# bool is an int in Python but not in JSON: `true` is no shard count.
INTEGER = Scalar("an integer", lambda value: type(value) is int)
# JSON 1.1 sends epoch seconds; botocore's parser also takes ISO 8601 strings.
TIMESTAMP = Scalar(
    "a timestamp", lambda value: type(value) in (int, float) or isinstance(value, str)
)

_HASH_KEY_RANGE = Struct({"StartingHashKey": STRING, "EndingHashKey": STRING})
_SHARD = Struct(
    {
        "ShardId": STRING,
        "HashKeyRange": _HASH_KEY_RANGE,
        "SequenceNumberRange": Struct(
            {"StartingSequenceNumber": STRING}, {"EndingSequenceNumber": STRING}
        ),
    },
    {"ParentShardId": STRING, "AdjacentParentShardId": STRING},
)
_CONSUMER_FIELDS: dict[str, Spec] = {
    "ConsumerName": STRING,
    "ConsumerARN": STRING,
    "ConsumerStatus": STRING,
    "ConsumerCreationTimestamp": TIMESTAMP,
}
_CONSUMER = Struct(_CONSUMER_FIELDS)
#: PutRecords' entries are checked by :func:`check_put_records`, in one tight loop: it is the
#: producer's hot path.
_LIST = Scalar("a list", lambda value: isinstance(value, list))

#: Per operation the library calls, the fields it reads (presence and type).
REPLIES: Mapping[str, Struct] = {
    "ListShards": Struct({"Shards": ListOf(_SHARD)}, {"NextToken": STRING}),
    "GetShardIterator": Struct({"ShardIterator": STRING}),
    "DescribeStreamSummary": Struct(
        {
            "StreamDescriptionSummary": Struct(
                {
                    "StreamName": STRING,
                    "StreamARN": STRING,
                    "StreamStatus": STRING,
                    "StreamCreationTimestamp": TIMESTAMP,
                    "OpenShardCount": INTEGER,
                },
                {"MaxRecordSizeInKiB": INTEGER, "RecordDistributionStrategy": STRING},
            )
        }
    ),
    "DescribeStreamConsumer": Struct(
        {"ConsumerDescription": Struct({**_CONSUMER_FIELDS, "StreamARN": STRING})}
    ),
    "RegisterStreamConsumer": Struct({"Consumer": _CONSUMER}),
    "ListStreamConsumers": Struct({"Consumers": ListOf(_CONSUMER)}, {"NextToken": STRING}),
    "PutRecords": Struct({"Records": _LIST}, {"FailedRecordCount": INTEGER}),
}


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _QUOTE else text[:_QUOTE] + "..."


def find_problem(spec: Spec, value: Any, path: str) -> str | None:
    """The first way ``value`` (at ``path``) breaks ``spec``, in words; None if it does not."""
    if isinstance(spec, Scalar):
        return None if spec.check(value) else f"{path} is not {spec.name}: {_quote(value)}"
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return f"{path} is not a list: {_quote(value)}"
        for index, item in enumerate(value):
            problem = find_problem(spec.item, item, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    if not isinstance(value, dict):
        return f"{path or 'the reply'} is not an object: {_quote(value)}"
    prefix = f"{path}." if path else ""
    for name, member in spec.required.items():
        found = value.get(name)
        if found is None:
            return f"{prefix}{name} is missing"
        problem = find_problem(member, found, prefix + name)
        if problem is not None:
            return problem
    for name, member in spec.optional.items():
        found = value.get(name)
        if found is not None:
            problem = find_problem(member, found, prefix + name)
            if problem is not None:
                return problem
    return None


def malformed(operation: str, status_code: int, problem: str) -> errors.MalformedReplyError:
    """The error for a reply that cannot be believed, naming the operation and the problem."""
    return errors.MalformedReplyError(
        f"HTTP {status_code} with a malformed reply: {problem}",
        operation=operation,
        status_code=status_code,
    )


def load_reply(operation: str, status_code: int, body: bytes, *, empty_ok: bool) -> dict[str, Any]:
    """The reply's JSON object; ``empty_ok`` for operations with no output (an empty body is
    their real answer). Anything else that is not one JSON object is malformed."""
    if not body or body.isspace():  # isspace stops at the first other byte: no copy
        if empty_ok:
            return {}
        raise malformed(operation, status_code, "the body is empty")
    try:
        document = json.loads(body)
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise malformed(
            operation, status_code, f"the body is not a JSON object ({exc}): {body[:_QUOTE]!r}"
        ) from None
    if not isinstance(document, dict):
        raise malformed(operation, status_code, f"the body is not a JSON object: {body[:_QUOTE]!r}")
    return document


def check_put_records(document: Mapping[str, Any], record_count: int | None) -> str | None:
    """What is wrong with a PutRecords reply's entries: one per record sent, each a sequence
    number with its shard, or an error code (strings all)."""
    results = document["Records"]
    if record_count is not None and len(results) != record_count:
        return f"Records has {len(results)} entries for the {record_count} records sent"
    for index, result in enumerate(results):
        if type(result) is not dict:
            return f"Records[{index}] is not an object: {_quote(result)}"
        code = result.get("ErrorCode")
        if code is None:
            if (
                type(result.get("SequenceNumber")) is not str
                or type(result.get("ShardId")) is not str
            ):
                return (
                    f"Records[{index}] has neither a SequenceNumber and ShardId nor an "
                    f"ErrorCode: {_quote(result)}"
                )
        elif type(code) is not str:
            return f"Records[{index}].ErrorCode is not a string: {_quote(code)}"
    return None
