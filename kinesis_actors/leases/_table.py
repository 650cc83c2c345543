"""The lease table's I/O: one DynamoDB request per method, every write conditional.

:class:`LeaseTable` never overwrites: a create is conditional on the item's absence, a take on
the counter the taker saw, and every write of the holder (renewal, checkpoint, release) on
its ownership *and* the counter it holds, as the KCL's ``updateLease`` does. A failed
condition is an answer (None), never retried and never forced.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

import anyio

from ..errors import AccessDeniedError, KinesisError, ResourceNotFoundError, ValidationError
from ._errors import LeaseTableError
from ._items import (
    CHECKPOINT,
    CHECKPOINT_OWNER,
    CHILDREN,
    COUNTER,
    ENTITY_TYPE,
    KEY,
    LATEST_PINNED,
    OWNER,
    OWNER_SWITCHES,
    PENDING,
    PENDING_SUB_SEQUENCE,
    SUB_SEQUENCE,
    Lease,
    decode_lease,
    encode_lease,
)

__all__ = ["PERMANENT_FAULTS", "Caller", "LeaseTable"]

logger = logging.getLogger("kinesis_actors.leases")

_CONDITION_FAILED = "ConditionalCheckFailedException"
_NOT_FOUND = "ResourceNotFoundException"
_IN_USE = "ResourceInUseException"
_KEY_SCHEMA = [{"AttributeName": KEY, "KeyType": "HASH"}]
#: How long ensure() waits for a table being created to become ACTIVE.
_ACTIVE_TIMEOUT = 120.0
#: Faults that no retry mends: the coordinator stops on them and its user gets them as they
#: are. Everything else a table call raises (throttles, 5xx, resets, garbled replies) passes.
PERMANENT_FAULTS: tuple[type[KinesisError], ...] = (LeaseTableError, AccessDeniedError)


class Caller(Protocol):
    """A client with ``await call(operation, params) -> dict`` (boto3's low-level shapes):
    :class:`~kinesis_actors.client.DynamoDBClient` for the table,
    :class:`~kinesis_actors.KinesisClient` for the streams."""

    def call(self, operation: str, params: Mapping[str, Any]) -> Awaitable[dict[str, Any]]: ...


def _not_a_lease(item: Mapping[str, Any]) -> bool:
    """A row of another kind that the KCL 3.5 keeps in the lease table (its leader's row, a
    worker's metrics, migration state): an ``entityType`` that is not ``LEASE``. Left alone,
    as the KCL's own serializer leaves it."""
    kind = item.get(ENTITY_TYPE)
    return isinstance(kind, Mapping) and kind.get("S") not in (None, "LEASE")


def _condition_failed(error: KinesisError) -> bool:
    return error.code == _CONDITION_FAILED


class LeaseTable:
    """One lease table over a DynamoDB client; ``calls`` counts the requests made."""

    def __init__(self, client: Caller, name: str) -> None:
        self.client = client
        self.name = name
        self.calls = 0

    async def _call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return await self.client.call(operation, {"TableName": self.name, **params})

    async def _item_call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request on the table's items. Its permanent faults are said in the table's terms:
        the table gone is a :class:`LeaseTableError`, so is a lease's key refused as invalid
        (the table was re-created with another key schema), and AccessDenied names the table
        and the operation."""
        try:
            return await self._call(operation, params)
        except ResourceNotFoundError as error:
            raise LeaseTableError(
                f"lease table {self.name!r} does not exist any more: {operation} found no "
                "such table (deleted while the group ran?)",
                table=self.name,
                operation=operation,
                code=error.code,
            ) from error
        except ValidationError as error:
            raise LeaseTableError(
                f"{operation} on lease table {self.name!r} was refused as invalid: "
                f"{error.message} (a table re-created with another key schema answers so)",
                table=self.name,
                operation=operation,
                code=error.code,
            ) from error
        except AccessDeniedError as error:
            raise AccessDeniedError(
                f"{operation} on lease table {self.name!r} was denied: {error.message}",
                operation=operation,
                code=error.code,
                status_code=error.status_code,
            ) from error

    # -- the table ---------------------------------------------------------------------------

    async def ensure(self, *, create: bool) -> None:
        """Check that the table exists with the KCL's key schema (a string hash key
        ``leaseKey``), creating it on demand billing when it is missing and ``create``.

        :class:`LeaseTableError` (nothing written) for a table with another key schema, or a
        missing table when not ``create``.
        """
        try:
            description = await self._describe()
        except KinesisError as error:
            if error.code != _NOT_FOUND:
                raise
            if not create:
                raise LeaseTableError(
                    f"lease table {self.name!r} does not exist (LeaseConfig.create_table is False)",
                    table=self.name,
                ) from None
            await self._create()
            description = await self._describe()
        self._check_schema(description)
        with anyio.fail_after(_ACTIVE_TIMEOUT):
            delay = 0.05
            while description.get("TableStatus") not in (None, "ACTIVE"):
                await anyio.sleep(delay)
                delay = min(delay * 2, 1.0)
                description = await self._describe()

    async def _describe(self) -> dict[str, Any]:
        reply = await self._call("DescribeTable", {})
        table = reply.get("Table")
        if not isinstance(table, dict):
            raise LeaseTableError(f"DescribeTable of {self.name!r}: no 'Table'", table=self.name)
        return table

    async def _create(self) -> None:
        try:
            await self._call(
                "CreateTable",
                {
                    "KeySchema": _KEY_SCHEMA,
                    "AttributeDefinitions": [{"AttributeName": KEY, "AttributeType": "S"}],
                    "BillingMode": "PAY_PER_REQUEST",
                },
            )
            logger.info("created lease table %s", self.name)
        except KinesisError as error:
            if error.code != _IN_USE:  # another worker created it first
                raise

    def _check_schema(self, description: Mapping[str, Any]) -> None:
        schema = description.get("KeySchema")
        types = {
            d.get("AttributeName"): d.get("AttributeType")
            for d in description.get("AttributeDefinitions") or []
            if isinstance(d, Mapping)
        }
        if schema != _KEY_SCHEMA or types.get(KEY) != "S":
            found = ", ".join(
                f"{d.get('AttributeName')} {d.get('KeyType')} {types.get(d.get('AttributeName'))}"
                for d in schema or []
                if isinstance(d, Mapping)
            )
            raise LeaseTableError(
                f"table {self.name!r} is not a lease table: its key schema is [{found}], a "
                "lease table has one string hash key 'leaseKey' (the KCL's); nothing was "
                "written. Use another table name.",
                table=self.name,
            )

    # -- reading -----------------------------------------------------------------------------

    async def list(self) -> list[Lease]:
        """Every lease in the table: a consistent Scan, every page followed (rows that are not
        leases, see ``_not_a_lease``, are skipped)."""
        leases: list[Lease] = []
        params: dict[str, Any] = {"ConsistentRead": True}
        while True:
            reply = await self._item_call("Scan", params)
            for item in reply.get("Items") or []:
                if _not_a_lease(item):
                    continue
                leases.append(self._decode(item))
            start = reply.get("LastEvaluatedKey")
            if not start:
                return leases
            params = {"ConsistentRead": True, "ExclusiveStartKey": start}

    async def get(self, key: str) -> Lease | None:
        """One lease, read consistently; None if there is no such item."""
        reply = await self._item_call("GetItem", {"Key": {KEY: {"S": key}}, "ConsistentRead": True})
        item = reply.get("Item")
        return self._decode(item) if item else None

    def _decode(self, item: Mapping[str, Any]) -> Lease:
        try:
            return decode_lease(item)
        except ValueError as error:
            raise LeaseTableError(
                f"table {self.name!r} holds an item that is not a lease: {error}",
                table=self.name,
            ) from None

    # -- writing -----------------------------------------------------------------------------

    async def create(self, lease: Lease) -> bool:
        """Put ``lease`` if no item has its key; False if one exists (nothing written)."""
        try:
            await self._item_call(
                "PutItem",
                {
                    "Item": encode_lease(lease),
                    "ConditionExpression": "attribute_not_exists(#key)",
                    "ExpressionAttributeNames": {"#key": KEY},
                },
            )
        except KinesisError as error:
            if _condition_failed(error):
                return False
            raise
        return True

    async def _update(
        self,
        lease: Lease,
        *,
        expect: Mapping[str, str | None],
        set_values: Mapping[str, Any],
        remove: tuple[str, ...] = (),
        add_owner_switch: bool = False,
        bump: bool = True,
    ) -> Lease | None:
        """One conditional UpdateItem: on the counter seen and on ``expect`` (attribute ->
        the string it must hold, or None: must be absent); the counter + 1 if ``bump``."""
        names: dict[str, str] = {"#counter": COUNTER}
        values: dict[str, Any] = {":counter": {"N": str(lease.counter)}}
        conditions = ["#counter = :counter"]
        for index, (name, expected) in enumerate(expect.items()):
            names[f"#e{index}"] = name
            if expected is None:
                conditions.append(f"attribute_not_exists(#e{index})")
            else:
                values[f":e{index}"] = {"S": expected}
                conditions.append(f"#e{index} = :e{index}")
        sets = []
        if bump:
            values[":next"] = {"N": str(lease.counter + 1)}
            sets.append("#counter = :next")
        for index, (name, value) in enumerate(set_values.items()):
            names[f"#s{index}"] = name
            values[f":s{index}"] = value
            sets.append(f"#s{index} = :s{index}")
        expression = "SET " + ", ".join(sets)
        if remove:
            for index, name in enumerate(remove):
                names[f"#r{index}"] = name
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(remove)))
        if add_owner_switch:
            names["#switches"] = OWNER_SWITCHES
            values[":one"] = {"N": "1"}
            expression += " ADD #switches :one"
        try:
            reply = await self._item_call(
                "UpdateItem",
                {
                    "Key": {KEY: {"S": lease.key}},
                    "UpdateExpression": expression,
                    "ConditionExpression": " AND ".join(conditions),
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                    "ReturnValues": "ALL_NEW",
                },
            )
        except KinesisError as error:
            if _condition_failed(error):
                return None
            raise
        return self._decode(reply.get("Attributes") or {})

    async def take(self, lease: Lease, owner: str) -> Lease | None:
        """Make ``owner`` the holder of ``lease`` as it was seen (condition: its counter),
        counting an owner switch if it had another owner, and ending a handoff in progress.
        The new lease, or None if it changed since it was seen."""
        switch = lease.owner is not None and lease.owner != owner
        return await self._update(
            lease,
            expect={},
            set_values={OWNER: {"S": owner}},
            remove=(CHECKPOINT_OWNER,),  # a take ends any handoff (as every KCL 3.x take does)
            add_owner_switch=switch,
        )

    async def renew(
        self,
        lease: Lease,
        owner: str,
        checkpoint: tuple[str, int] | None = None,
        *,
        pin: int | None = None,
        handing_over: bool = False,
    ) -> Lease | None:
        """Renew a held lease (condition: ``owner`` and the counter held, and no handoff
        asked for), writing ``checkpoint`` ``(sequence, sub_sequence)`` with it if given, and
        ``pin`` as the lease's ``latestPinnedAt`` (epoch millis) if given. While
        ``handing_over``, the condition is ``owner`` as the ``checkpointOwner`` instead (the
        ``leaseOwner`` is already the taker's, as the KCL 3.x's renewer does). The new
        lease, or None if it was lost."""
        values = self._checkpoint_values(checkpoint)
        if pin is not None:
            values[LATEST_PINNED] = {"N": str(pin)}
        expect: dict[str, str | None] = (
            {CHECKPOINT_OWNER: owner} if handing_over else {OWNER: owner, CHECKPOINT_OWNER: None}
        )
        return await self._update(
            lease,
            expect=expect,
            set_values=values,
            remove=(PENDING, PENDING_SUB_SEQUENCE) if checkpoint else (),
        )

    async def ask_handoff(self, lease: Lease, taker: str) -> Lease | None:
        """Ask ``lease``'s owner to hand it to ``taker`` (the KCL 3.x's graceful handoff):
        ``leaseOwner`` becomes the taker and ``checkpointOwner`` the owner, who keeps reading
        and renewing until it has checkpointed and handed over. Condition: the counter seen,
        that owner, no handoff already asked for; the counter is left as it is (as the KCL's
        ``initiateGracefulLeaseHandoff`` leaves it). The new lease, or None."""
        if lease.owner is None:
            raise ValueError("a lease without an owner is taken, not handed over")
        return await self._update(
            lease,
            expect={OWNER: lease.owner, CHECKPOINT_OWNER: None},
            set_values={OWNER: {"S": taker}, CHECKPOINT_OWNER: {"S": lease.owner}},
            bump=False,
        )

    async def withdraw_handoff(self, lease: Lease, taker: str, owner: str) -> Lease | None:
        """Take back an ask of ``taker`` not answered yet: ``leaseOwner`` is ``owner`` again
        and ``checkpointOwner`` goes, as before the ask. Condition: the counter seen, the
        taker as the ``leaseOwner`` and ``owner`` as the ``checkpointOwner`` (not handed
        over yet); the counter is left as it is, like the ask's, so that an owner that never
        saw the ask renews on as if it had not been made. The new lease, or None."""
        return await self._update(
            lease,
            expect={OWNER: taker, CHECKPOINT_OWNER: owner},
            set_values={OWNER: {"S": owner}},
            remove=(CHECKPOINT_OWNER,),
            bump=False,
        )

    async def hand_over(
        self,
        lease: Lease,
        owner: str,
        checkpoint: tuple[str, int] | None = None,
        children: tuple[str, ...] = (),
    ) -> Lease | None:
        """Complete a handoff asked of ``owner``: write ``checkpoint`` (and ``children``, for
        ``SHARD_END``) and remove ``checkpointOwner``, so that ``leaseOwner``, the taker,
        reads from there. Condition: the counter held, ``owner`` as the ``checkpointOwner``
        and the taker still the ``leaseOwner``. The new lease, or None if it was lost."""
        if lease.owner is None:
            raise ValueError("a handoff needs the taker as the lease's owner")
        values = self._checkpoint_values(checkpoint)
        if children:
            values[CHILDREN] = {"SS": sorted(children)}
        remove = (
            (CHECKPOINT_OWNER, PENDING, PENDING_SUB_SEQUENCE) if checkpoint else (CHECKPOINT_OWNER,)
        )
        return await self._update(
            lease,
            expect={OWNER: lease.owner, CHECKPOINT_OWNER: owner},
            set_values=values,
            remove=remove,
        )

    async def release(
        self,
        lease: Lease,
        owner: str,
        checkpoint: tuple[str, int] | None = None,
        children: tuple[str, ...] = (),
    ) -> Lease | None:
        """Hand a held lease back (condition: ``owner`` and the counter held): remove the
        owner, bump the counter, and write ``checkpoint`` (and the shard's ``children``, for
        ``SHARD_END``) in the same request. The new lease, or None if it was lost."""
        values = self._checkpoint_values(checkpoint)
        if children:
            values[CHILDREN] = {"SS": sorted(children)}
        remove = (OWNER, PENDING, PENDING_SUB_SEQUENCE) if checkpoint else (OWNER,)
        return await self._update(
            lease, expect={OWNER: owner, CHECKPOINT_OWNER: None}, set_values=values, remove=remove
        )

    @staticmethod
    def _checkpoint_values(checkpoint: tuple[str, int] | None) -> dict[str, Any]:
        if checkpoint is None:
            return {}
        sequence, sub_sequence = checkpoint
        return {
            CHECKPOINT: {"S": sequence},
            SUB_SEQUENCE: {"N": str(sub_sequence)},
            OWNER_SWITCHES: {"N": "0"},
        }
