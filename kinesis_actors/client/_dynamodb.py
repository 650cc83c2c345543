"""The async DynamoDB client: the lease table's I/O, on the Kinesis client's foundations.

Same stack as :class:`~kinesis_actors.client.KinesisClient` (``_service``): botocore's
credentials, SigV4 signing, endpoint and service model (JSON 1.0 here), one pooled httpx
client, the same retry policy and typed errors. What this module adds are the conveniences of
tables: create one and wait until it is ACTIVE, delete one, and read every item of a Scan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import anyio

from .. import errors
from ._service import ServiceClient

__all__ = ["DynamoDBClient"]

#: The longest pause between two polls of a table's status.
_MAX_POLL = 1.0


class DynamoDBClient(ServiceClient):
    """An async client for every DynamoDB operation, with signing, retries and typed errors.

    ``await ddb.call("UpdateItem", {...})`` takes and returns boto3's low-level client
    shapes (attribute values as ``{"S": "..."}``, ``{"N": "1"}``). A failed condition raises
    :class:`~kinesis_actors.errors.ConditionalCheckFailedError` and is never retried;
    throttling (``ProvisionedThroughputExceededException``, ``ThrottlingException``,
    ``RequestLimitExceeded``) raises :class:`~kinesis_actors.errors.ThrottlingError` once
    the retries (``DYNAMODB_RETRY_SETTINGS`` for item operations) are used up.

    The arguments are :class:`~kinesis_actors.client.KinesisClient`'s: credentials default
    to botocore's chain, ``verify`` to botocore's CA bundle, the endpoint to botocore's
    DynamoDB endpoint for the region. ``statistics()`` counts calls, attempts and retries.
    """

    SERVICE: ClassVar[str] = "dynamodb"

    async def create_table(self, params: Mapping[str, Any], *, wait: bool = True) -> dict[str, Any]:
        """CreateTable with ``params`` (boto3's shapes); with ``wait``, return the table's
        description once it is ACTIVE, else CreateTable's ``TableDescription``.

        A table of that name that exists already raises
        :class:`~kinesis_actors.errors.ResourceInUseError`, whatever its key schema: compare
        :meth:`describe_table`'s ``KeySchema`` when that matters. Like every wait here, it has
        no timeout of its own: bound it with ``anyio.fail_after``.
        """
        created = await self.call("CreateTable", params)
        if not wait:
            description: dict[str, Any] = created["TableDescription"]
            return description
        return await self.wait_for_table(str(params["TableName"]))

    async def describe_table(self, name: str) -> dict[str, Any]:
        """DescribeTable's ``Table``; :class:`~kinesis_actors.errors.ResourceNotFoundError`
        when there is no such table."""
        table: dict[str, Any] = (await self.call("DescribeTable", {"TableName": name}))["Table"]
        return table

    async def wait_for_table(self, name: str) -> dict[str, Any]:
        """Poll DescribeTable until the table is ACTIVE; return its description.

        A table being created may be unknown to DescribeTable for a moment (the service is
        eventually consistent there), so ResourceNotFound is polled through too.
        """
        delay = 0.02
        while True:
            try:
                table = await self.describe_table(name)
            except errors.ResourceNotFoundError:
                table = {}
            if table.get("TableStatus") == "ACTIVE":
                return table
            await anyio.sleep(delay)
            delay = min(delay * 2, _MAX_POLL)

    async def delete_table(self, name: str, *, wait: bool = True) -> None:
        """Delete a table; with ``wait``, return once DescribeTable no longer finds it."""
        await self.call("DeleteTable", {"TableName": name})
        delay = 0.02
        while wait:
            try:
                await self.describe_table(name)
            except errors.ResourceNotFoundError:
                return
            await anyio.sleep(delay)
            delay = min(delay * 2, _MAX_POLL)

    async def scan(self, params: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Every item a Scan with ``params`` returns, page after page (``LastEvaluatedKey``
        fed back as ``ExclusiveStartKey``); ``Limit`` bounds each page, not the total.

        One page is held at a time (a page is at most 1 MB), so the memory is bounded
        whatever the size of the table.
        """
        request = dict(params)
        while True:
            page = await self.call("Scan", request)
            for item in page["Items"]:
                yield item
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            request["ExclusiveStartKey"] = last
