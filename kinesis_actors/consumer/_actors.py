"""The per-shard actors: a reader that fills a shard's buffer, a processor that runs a handler.

Both are supervised (``_supervision``), and both keep their state in the shard's
:class:`~kinesis_actors.consumer._pipeline.ShardPipeline`, which owns it (they change it only
through its methods) and outlives them: a restarted
reader resumes after the last batch it delivered, a restarted processor rewinds the shard to
its last committed position.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

from .. import errors
from ..records import Position
from ..runtime import Actor, ActorContext
from ._batch import RecordBatch
from ._config import StartingPosition
from ._pipeline import ShardPipeline
from ._positions import ShardKey
from ._reader import ShardReader

__all__ = ["Handler", "ProcessorActor", "ReaderActor", "ReaderFactory"]

log = logging.getLogger("kinesis_actors.consumer")

Handler = Callable[[RecordBatch], Awaitable[None]]
ReaderFactory = Callable[[ShardPipeline, StartingPosition], ShardReader]


class ReaderActor(Actor[None]):
    """Reads one shard into its pipeline: a credit first, then a read, then a non-blocking offer.

    A source actor (``ChildSpec(source=True)``): its input is the shard, not a mailbox, and a
    rewind or a lost lease reaches it as a cancellation of its generation's scope.

    It never awaits the buffer, so a shard nobody takes from holds only its own reader
    (FLINK-34071). After the shard's end it stays until the shard is finished (everything
    committed), because a processor's restart may rewind the shard and need it again; a rewind
    cancels the current generation and reading starts over from the committed position. Closing its
    reader (an EFO subscription waits for the server) is bounded by ``close_timeout``, which
    fits inside the child's ``cleanup_timeout`` (``_supervision``).
    """

    def __init__(
        self,
        pipeline: ShardPipeline,
        make_reader: ReaderFactory,
        fail: Callable[[BaseException], None] = lambda error: None,
        *,
        close_timeout: float = 1.0,
    ) -> None:
        self._pipeline = pipeline
        self._make_reader = make_reader
        self._fail = fail
        self._close_timeout = close_timeout

    async def run(self, ctx: ActorContext[None]) -> None:
        pipeline = self._pipeline
        while True:
            with anyio.CancelScope() as scope:
                if not pipeline.end_reached:
                    try:
                        await self._read_to_end(pipeline, scope)
                    except (errors.ShardUnreadableError, errors.PoisonRecordError) as exc:
                        # Named and final: a restart would meet it again and end in an
                        # anonymous RestartIntensityExceeded. The consumer surfaces it; the
                        # shard's position stays where it was.
                        pipeline.failed()
                        self._fail(exc)
                        return
                await pipeline.wait_let_go()
                return
            if pipeline.dropped:
                return  # the shard's lease was lost: another worker reads it now
            # Cancelled by a rewind (an outer cancellation does not get here): read again.

    async def _read_to_end(self, pipeline: ShardPipeline, scope: anyio.CancelScope) -> None:
        generation, start, skip = pipeline.begin_generation(scope)
        reader = self._make_reader(pipeline, start)
        try:
            while not pipeline.end_reached:
                if not pipeline.try_credit():
                    await pipeline.wait_credit()
                if await self._read_once(reader, pipeline, skip, generation):
                    skip = None
                if pipeline.generation != generation:
                    # A rewind or a drop while the read was out: it cancelled ``scope`` and
                    # ignored the read, which may have met the shard's end. Reading this
                    # reader again would fail; the cancellation ends it here instead.
                    await anyio.lowlevel.checkpoint()
                    raise AssertionError("a new generation without cancelling the old one")
        finally:
            with anyio.move_on_after(self._close_timeout, shield=True) as closing:
                await reader.aclose()
            if closing.cancelled_caught:
                log.warning(
                    "%s/%s: closing the reader took more than %.1f s; abandoned",
                    pipeline.stream,
                    pipeline.shard_id,
                    self._close_timeout,
                )

    @staticmethod
    async def _read_once(
        reader: ShardReader,
        pipeline: ShardPipeline,
        skip: Position | None,
        generation: int,
    ) -> bool:
        """One read into the pipeline; True if it carried records.

        A method of its own so that the read's decoded records die when it returns: held
        by the loop until the next read came back, every shard kept its last answer's
        records alive (a dict a record, beside the batch built from them) while it waited
        for pacing, a credit or the service, and at a thousand shards the collector's full
        passes walked them all."""
        try:
            read = await reader.read()  # the end only on proof
        except BaseException:
            pipeline.withdraw_credit(generation)  # it must not leak with a crashed read
            raise
        pipeline.pin_start(reader.start)
        pipeline.accept(read, skip, generation)
        return bool(read.records)


class ProcessorActor(Actor[RecordBatch]):
    """Calls the handler for one shard's batches, one at a time, in order, committing each.

    A restarted incarnation first rewinds the shard to its last committed position, so the
    batch whose handler failed (and what was read after it) is delivered again. Once the
    shard is ``fenced`` (its lease lapsed on this worker's clock, or is gone), nothing more
    of it is handled: another worker may read it already, from its checkpoint, and the
    processor waits to be stopped with the shard (never handling a later batch, whose
    commit would pass over the one not handled).
    """

    def __init__(
        self,
        pipeline: ShardPipeline,
        handler: Handler,
        commit: Callable[[RecordBatch], None],
        fenced: Callable[[ShardKey], bool],
    ) -> None:
        self._pipeline = pipeline
        self._handler = handler
        self._commit = commit
        self._fenced = fenced

    async def on_start(self, ctx: ActorContext[RecordBatch]) -> None:
        if ctx.incarnation > 0:
            self._pipeline.rewind()

    async def run(self, ctx: ActorContext[RecordBatch]) -> None:
        # The mailbox is the shard's buffer (``_supervision.processor_spec``). A crash
        # mid-batch dead-letters the batch in flight; the restart's rewind reads it again.
        pipeline = self._pipeline
        async for batch in ctx:  # ends once the shard ended and everything was handled
            pipeline.took(batch)
            if self._fenced(pipeline.key):
                ctx.done()
                log.debug("%s/%s: lease lapsed or lost, batch not handled", *pipeline.key)
                await anyio.sleep_forever()  # the shard's drop stops this processor
            await self._handler(batch)
            self._commit(batch)
            ctx.done()
