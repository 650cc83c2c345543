"""The I/O around the lease coordinator, for a consumer with ``lease_table`` (see ``_group``).

:class:`LeaseMembership` opens the DynamoDB client and the coordinator, turns the
coordinator's events into calls on the consumer, notes commits as checkpoints (the
coordinator writes them with its renewals, at most every ``checkpoint_interval``), finishes
ended shards (SHARD_END), hands over a lease another worker asked for once what was taken
is committed, and, on a clean close, writes the final checkpoints and releases every lease
in one conditional write each: graceful handovers, with no duplicate.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio

from ..client import ClientConfig, DynamoDBClient, KinesisClient
from ..errors import AccessDeniedError, KinesisError
from ..leases import (
    LeaseAcquired,
    LeaseConfig,
    LeaseCoordinator,
    LeaseHandoff,
    LeaseLost,
    LeaseLostError,
    LeaseStats,
    LeaseTableError,
)
from ..records import Position
from ._config import ConsumerConfig
from ._group import LeaseAssignment, lease_event, saved_from_lease
from ._positions import SavedShard, ShardKey

__all__ = ["LeaseMembership"]

log = logging.getLogger("kinesis_actors.consumer")


Acquired = Callable[[ShardKey, SavedShard, tuple[str, ...]], None]
Lost = Callable[[ShardKey, str], Awaitable[None]]
HandOff = Callable[[ShardKey], Coroutine[Any, Any, None]]


class LeaseMembership:
    """This worker's membership of a lease table: the coordinator and what it holds.

    Owned by the consumer: :meth:`open` enters the DynamoDB client and the coordinator into
    the consumer's exit stack (so a bad table or a worker id in use fails the ``async with``
    as itself), :meth:`run_events` is one task of the consumer's task group. The client is
    DynamoDB's twin of the consumer's ``KinesisClient``: same region, credentials and
    certificate verification, ``dynamodb_endpoint_url`` as its endpoint.
    """

    def __init__(
        self, client: KinesisClient, streams: Sequence[str], config: ConsumerConfig, worker_id: str
    ) -> None:
        table = config.lease_table
        if table is None:
            raise ValueError("a LeaseMembership needs ConsumerConfig.lease_table")
        self.worker_id = worker_id
        self.assignment = LeaseAssignment()
        self._client = client
        self._streams = list(streams)
        self._table = table
        self._endpoint = config.dynamodb_endpoint_url
        self._leases = config.leases if config.leases is not None else LeaseConfig()
        self._initial = config.start.type
        self._coordinator: LeaseCoordinator | None = None
        self._finished: set[ShardKey] = set()
        # Acquisitions per key, and the count when a handoff of it began: an answer that
        # comes after the lease was taken back (a newer acquisition) must not drop it.
        # Bounded by the shards of the streams.
        self._acquisitions: dict[ShardKey, int] = {}
        self._handoff_began: dict[ShardKey, int] = {}

    @property
    def config(self) -> LeaseConfig:
        return self._leases

    async def open(self, stack: AsyncExitStack) -> None:
        dynamodb = DynamoDBClient(
            region=self._client.region,
            endpoint_url=self._endpoint,
            verify=self._client.verify,
            # The Kinesis client's own credentials (resolved or given): one identity for both.
            credentials=self._client._credentials,
            # The same bound on an endpoint never reached: a table that cannot be reached
            # fails the open like a stream that cannot.
            config=ClientConfig(open_timeout=self._client.config.open_timeout),
        )
        await stack.enter_async_context(dynamodb)
        coordinator = LeaseCoordinator(
            dynamodb,
            self._client,
            self._table,
            self._streams,
            worker_id=self.worker_id,
            initial_position=self._initial,
            config=self._leases,
        )
        self._coordinator = await stack.enter_async_context(coordinator)

    def _running(self) -> LeaseCoordinator:
        if self._coordinator is None:
            raise RuntimeError("the lease coordinator is not running")
        return self._coordinator

    async def run_events(self, acquired: Acquired, lost: Lost, handoff: HandOff) -> None:
        """Apply the coordinator's events, in order, until cancelled (or it fails: raised).

        A :class:`LeaseHandoff` runs beside the events (``handoff(key)``: stop reading, wait
        for the commits, then :meth:`hand_over`); at most one task per held lease."""
        coordinator = self._running()
        async with anyio.create_task_group() as handoffs:
            while True:
                event = await coordinator.next_event()
                if isinstance(event, LeaseHandoff):
                    key = (event.stream, event.shard_id)
                    self._handoff_began[key] = self._acquisitions.get(key, 0)
                    handoffs.start_soon(handoff, key)
                else:
                    await self._apply(event, acquired, lost)

    async def hand_over(self, key: ShardKey, final: Position | None) -> None:
        """Hand ``key``'s lease to the worker that asked for it, at ``final`` (the committed
        position; None: the last noted checkpoint). Its reading has stopped."""
        checkpoint = None if final is None else (final.sequence_number, final.sub_sequence_number)
        began = self._handoff_began.pop(key, None)
        try:
            await self._running().hand_over(*key, checkpoint)
        except LeaseLostError:
            log.info("%s/%s: lost before it was handed over", *key)
        except (LeaseTableError, AccessDeniedError):
            raise  # the table is gone or denied: the consumer fails, as at a renewal
        except KinesisError as error:  # the coordinator answers by itself after the timeout
            log.warning("%s/%s: handing over failed (%s); left to the coordinator", *key, error)
        else:
            log.info("%s/%s handed over at %s", *key, final)
        finally:
            # Acquired again since the handoff began (a withdrawn ask the coordinator answered
            # by itself, then taken back before this late answer): read anew, it is kept.
            if began is None or self._acquisitions.get(key, 0) == began:
                self.assignment.discard(key)

    async def _apply(
        self, event: LeaseAcquired | LeaseLost, acquired: Acquired, lost: Lost
    ) -> None:
        key = (event.stream, event.shard_id)
        if isinstance(event, LeaseAcquired):
            # A pin is a LATEST start of ours: a consumer started elsewhere keeps its own.
            pin = event.latest_pinned_at if self._initial == "LATEST" else None
            saved = saved_from_lease(event.checkpoint, event.sub_sequence, event.parents, pin)
            log.info(
                "lease of %s/%s acquired at %s:%d (from %s)",
                *key,
                event.checkpoint,
                event.sub_sequence,
                event.previous_owner or "nobody",
            )
            self._finished.discard(key)
            self._acquisitions[key] = self._acquisitions.get(key, 0) + 1
            self.assignment.add(key)
            acquired(key, saved, event.parents)
        else:
            self.assignment.discard(key)
            await lost(key, event.reason)

    def note(self, key: ShardKey, position: Position) -> bool:
        """Note a commit as the lease's checkpoint (written with the next renewal).

        False when the lease is no longer held: nothing is written, and what the batch held
        is delivered again to the lease's new owner (at-least-once).
        """
        if not self.assignment.owns(key):
            return False
        try:
            self._running().note_checkpoint(
                key[0], key[1], position.sequence_number, position.sub_sequence_number
            )
        except LeaseLostError:
            return False
        return True

    def fenced(self, key: ShardKey) -> bool:
        """Whether ``key``'s batches must not be delivered: its lease is not validly held any
        more (lapsed, dropped, lost; see :meth:`LeaseCoordinator.deliverable`)."""
        return self._coordinator is not None and not self._coordinator.deliverable(*key)

    def finishing(self, key: ShardKey) -> bool:
        """Whether ``key`` is held and not yet finished (see :meth:`finish`)."""
        return self.assignment.owns(key) and key not in self._finished

    async def finish(self, key: ShardKey) -> bool:
        """The shard is finished (read to its end, everything committed): SHARD_END, so its
        children may be read by any worker. False if the lease was lost first."""
        self._finished.add(key)
        try:
            await self._running().finish(*key)
        except LeaseLostError:
            self.assignment.discard(key)
            return False
        self.assignment.discard(key)
        log.info("%s/%s finished: SHARD_END", *key, extra=lease_event("finish", key))
        return True

    async def release(self, final: Mapping[ShardKey, Position]) -> None:
        """Clean stop: write each held lease's final checkpoint and release it."""
        coordinator = self._coordinator
        if coordinator is None:
            return
        checkpoints = {
            key: (position.sequence_number, position.sub_sequence_number)
            for key, position in final.items()
            if self.assignment.owns(key)
        }
        held = list(self.assignment)
        await coordinator.release_all(checkpoints)
        for key in held:
            self.assignment.discard(key)
            log.info("%s/%s released", *key, extra=lease_event("release", key))

    def statistics(self) -> LeaseStats | None:
        return None if self._coordinator is None else self._coordinator.statistics()
