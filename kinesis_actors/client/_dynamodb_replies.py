"""What the library reads from DynamoDB's replies, checked before it is believed.

The same rules as ``_replies`` for Kinesis: per operation, the fields read, their presence and
their JSON type; a reply that breaks them raises
:class:`~kinesis_actors.errors.MalformedReplyError` (retried like a 5xx). An item is an object
whose every attribute is an object of exactly one type tag (``{"S": "..."}``): a Scan page
whose ``Items`` is missing would otherwise read as an empty lease table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._replies import STRING, ListOf, Scalar, Struct

__all__ = ["DYNAMODB_REPLIES"]


def _is_item(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(attribute, dict) and len(attribute) == 1 for attribute in value.values()
    )


_ITEM = Scalar("an item (an object of typed attribute values)", _is_item)
_KEY_SCHEMA = ListOf(Struct({"AttributeName": STRING, "KeyType": STRING}))
_TABLE = Struct(
    {"TableName": STRING, "TableStatus": STRING},
    {"KeySchema": _KEY_SCHEMA, "TableArn": STRING},
)
_PAGE = Struct({"Items": ListOf(_ITEM)}, {"LastEvaluatedKey": _ITEM})
_WRITE = Struct({}, {"Attributes": _ITEM})

DYNAMODB_REPLIES: Mapping[str, Struct] = {
    "ListTables": Struct({"TableNames": ListOf(STRING)}, {"LastEvaluatedTableName": STRING}),
    "DescribeTable": Struct({"Table": _TABLE}),
    "CreateTable": Struct({"TableDescription": _TABLE}),
    "DeleteTable": Struct({"TableDescription": _TABLE}),
    "GetItem": Struct({}, {"Item": _ITEM}),
    "PutItem": _WRITE,
    "UpdateItem": _WRITE,
    "DeleteItem": _WRITE,
    "Scan": _PAGE,
    "Query": _PAGE,
}
