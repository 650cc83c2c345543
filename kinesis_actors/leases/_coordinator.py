"""The lease coordinator: one actor per worker that holds, renews, takes and hands over leases.

(Skeleton: the API is final, the implementation follows.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from ._config import LeaseConfig
from ._events import LeaseEvent, LeaseStats
from ._items import TRIM_HORIZON

__all__ = ["Caller", "LeaseCoordinator"]


class Caller(Protocol):
    """A client with ``await call(operation, params) -> dict`` (boto3's low-level shapes):
    :class:`~kinesis_actors.client.DynamoDBClient` for the table,
    :class:`~kinesis_actors.KinesisClient` for the streams."""

    def call(self, operation: str, params: Mapping[str, Any]) -> Awaitable[dict[str, Any]]: ...


class LeaseCoordinator:
    """Shares the shards of ``streams`` with the other workers of one lease table.

    An async context manager: entering checks (or creates) the table, reads the streams'
    identities and runs a first shard sync; then one task group renews held leases every
    ``renew_interval``, takes leases every ``take_interval`` and syncs shards every
    ``shard_sync_interval``. Leaving stops those tasks; leases not released with
    :meth:`release_all` first are left to expire (the others take them after
    ``failover_time``).

    What happens to leases is told through :meth:`next_event` (or ``async for event in
    coordinator``): :class:`LeaseAcquired` when a shard may be read, :class:`LeaseLost` when it
    must not be read any more. Pending events are bounded by the number of leases (at most one
    per shard: a loss cancels an acquisition not yet received).

    One stream uses the KCL's single-stream lease keys (the shard id), so a KCL application's
    table is resumed as it is; several streams (or ``multi_stream=True``) use the multi-stream
    form ``account:stream:creationEpoch:shardId``.

    ``initial_position`` is the checkpoint of leases created for shards that have no lease
    yet and no leased parent: ``"TRIM_HORIZON"``, ``"LATEST"`` or ``"AT_TIMESTAMP"``.
    ``clock`` (monotonic seconds) is injectable for tests.
    """

    def __init__(
        self,
        dynamodb: Caller,
        kinesis: Caller,
        table: str,
        streams: str | Sequence[str],
        *,
        worker_id: str,
        initial_position: str = TRIM_HORIZON,
        config: LeaseConfig | None = None,
        multi_stream: bool | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        raise NotImplementedError

    @property
    def worker_id(self) -> str:
        """This worker's id, the ``leaseOwner`` of its leases."""
        raise NotImplementedError

    async def __aenter__(self) -> LeaseCoordinator:
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        raise NotImplementedError

    async def next_event(self) -> LeaseEvent:
        """The next :class:`LeaseAcquired` or :class:`LeaseLost`, awaiting one.

        Raises the coordinator's failure (for example
        :class:`~kinesis_actors.leases.WorkerIdConflictError`) once it has stopped on one.
        """
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[LeaseEvent]:
        raise NotImplementedError

    def held(self) -> frozenset[tuple[str, str]]:
        """``(stream, shard_id)`` of every lease handed to the reader and still held."""
        raise NotImplementedError

    def note_checkpoint(
        self, stream: str, shard_id: str, sequence: str, sub_sequence: int = 0
    ) -> None:
        """Remember a checkpoint, written with the lease's next renewal (or within
        ``checkpoint_interval``): the batched form of :meth:`checkpoint`, for every commit.

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if the lease is not held.
        """
        raise NotImplementedError

    async def checkpoint(
        self, stream: str, shard_id: str, sequence: str, sub_sequence: int = 0
    ) -> None:
        """Write the lease's checkpoint now: a conditional update on this worker's ownership
        and the counter it holds (the KCL's condition), which also renews the lease.

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if another worker holds the lease
        (nothing is written; :class:`LeaseLost` is sent too).
        """
        raise NotImplementedError

    async def finish(self, stream: str, shard_id: str) -> None:
        """The shard was read to its end: checkpoint ``SHARD_END`` (with the shard's children,
        as the KCL does) and release the lease, so its children may be read by any worker.

        Raises :class:`~kinesis_actors.leases.LeaseLostError` if the lease was lost first.
        """
        raise NotImplementedError

    async def release_all(
        self, final_checkpoints: Mapping[tuple[str, str], tuple[str, int]] | None = None
    ) -> None:
        """Hand every held lease over for a clean stop: write the final checkpoint of each
        (``(stream, shard_id) -> (sequence, sub_sequence)``, else the last noted one) and
        remove this worker as owner, in one conditional write per lease, so another worker
        takes it at its next scan, without waiting for ``failover_time`` and with no
        duplicate. A lease lost meanwhile is skipped (and reported as :class:`LeaseLost`).
        The coordinator takes nothing more afterwards.
        """
        raise NotImplementedError

    def snapshot(self) -> LeaseStats:
        """The protocol's statistics now, a frozen :class:`LeaseStats`."""
        raise NotImplementedError
