"""Shard sync's I/O: list each stream's shards and create the leases :mod:`._sync` plans.

:mod:`._sync` decides, sans-IO, which leases the shards ListShards lists need; this module
lists the shards, remembers each shard's children (a finished lease records them, as the KCL
does) and makes the conditional creates, counting both for the coordinator's statistics. The
coordinator (:mod:`._coordinator`) runs it at start, every ``shard_sync_interval`` and when a
shard is finished.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ._errors import LeaseTableError
from ._items import Lease
from ._streams import LeasedStream, Streams, list_stream_shards
from ._sync import ended_but_open, plan_new_leases
from ._table import Caller, LeaseTable

__all__ = ["ShardSync"]

logger = logging.getLogger("kinesis_actors.leases")


class ShardSync:
    """Creates the leases of new shards in ``table`` and knows every listed shard's children.

    ``syncs`` counts the passes over every stream that ended, ``created`` the leases this
    worker created (another worker's concurrent create wins harmlessly and is not counted).
    """

    def __init__(self, kinesis: Caller, table: LeaseTable, initial_position: str) -> None:
        self._kinesis = kinesis
        self._table = table
        self._initial = initial_position
        self.children: dict[tuple[str, str], tuple[str, ...]] = {}
        self.syncs = 0
        self.created = 0

    async def sync_all(self, streams: Streams, leases: Callable[[], Iterable[Lease]]) -> None:
        """Sync every stream of ``streams``; ``leases()`` are the table's leases known now
        (read after each listing, so that a listing of the table meanwhile counts)."""
        for ref in streams.by_name.values():
            await self._sync(ref, streams, leases)
        self.syncs += 1

    async def _sync(
        self, ref: LeasedStream, streams: Streams, leases: Callable[[], Iterable[Lease]]
    ) -> None:
        finished_before = {
            lease.shard_id
            for lease in leases()
            if lease.finished and lease.stream_identifier in (None, ref.identifier)
        }
        shards = await list_stream_shards(self._kinesis, ref.given)
        bogus = ended_but_open(finished_before, shards)
        if bogus:
            raise LeaseTableError(
                f"the leases of {ref.name} shard(s) {', '.join(bogus)} in table "
                f"{self._table.name!r} say SHARD_END, but the stream lists them as open: "
                "written by hand or by another application, and believed nobody would read "
                "the rest of them. Set their checkpoint to the last sequence number processed "
                "(or TRIM_HORIZON to read them again) and start the group again.",
                table=self._table.name,
                operation="ListShards",
            )
        for shard in shards:
            for parent in shard.parents:
                known = self.children.get((ref.name, parent), ())
                if shard.shard_id not in known:
                    self.children[(ref.name, parent)] = tuple(sorted((*known, shard.shard_id)))
        existing = {
            lease.shard_id
            for lease in leases()
            if lease.stream_identifier in (None, ref.identifier)
        }
        for lease in plan_new_leases(
            shards,
            existing,
            initial_position=self._initial,
            make_lease=lambda shard, checkpoint: streams.new_lease(ref, shard, checkpoint),
        ):
            if await self._table.create(lease):
                self.created += 1
                logger.info("created lease %s at %s", lease.key, lease.checkpoint)
