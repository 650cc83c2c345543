"""How the consumer's actors are supervised, and how long each may take to stop.

Two supervisors, one per kind of actor: the readers (one per shard) and, under
:meth:`Consumer.run`, the processors (one per shard). A shard's actors do not depend on
another shard's, so each supervisor stops its children concurrently
(:attr:`StopOrder.CONCURRENT`): closing a consumer costs its slowest shard, not the sum of its
shards. Measured against the local server with 32 EFO shards, 31 s before, about 1 s after
(docs/runtime.md, "Shutdown").

The deadlines nest, from the inside out:

* the client bounds closing one subscription at 5 s (``client/_h2stream.py``), mirrored here
  as :data:`~._efo.SUBSCRIPTION_CLOSE`;
* the EFO reader bounds disposing of it at :data:`~._efo.DISPOSE_TIMEOUT`, a little more;
* a reader actor bounds closing its reader at its child's ``cleanup_timeout``, more again;
* the supervisor waits each child's ``cleanup_timeout`` plus a grace, and the whole stop is
  bounded by :func:`~kinesis_actors.runtime.stop_bound`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..runtime import (
    Backoff,
    ChildSpec,
    Restart,
    RestartIntensityExceeded,
    StopOrder,
    Strategy,
    Supervisor,
)
from ._actors import Handler, ProcessorActor, ReaderActor, ReaderFactory
from ._batch import RecordBatch
from ._efo import DISPOSE_TIMEOUT
from ._pipeline import ShardPipeline

__all__ = ["last_failure", "processor_spec", "reader_spec", "shard_supervisor"]

RESTART_BACKOFF = Backoff(initial=0.05, maximum=2.0)

#: A polling reader holds no connection of its own: closing it forgets an iterator.
POLLING_CLOSE = 1.0
#: An EFO reader's close waits (bounded) for the server to end its subscription.
EFO_CLOSE = DISPOSE_TIMEOUT + 0.5


def shard_supervisor(name: str, intensity: tuple[int, float]) -> Supervisor:
    """A supervisor of one actor per shard: one_for_one, stopped concurrently."""
    return Supervisor(
        Strategy.ONE_FOR_ONE,
        name=name,
        intensity=intensity,
        backoff=RESTART_BACKOFF,
        stop_order=StopOrder.CONCURRENT,
    )


def reader_spec(
    pipeline: ShardPipeline,
    make_reader: ReaderFactory,
    fail: Callable[[BaseException], None],
    mode: str,
) -> ChildSpec[None]:
    """The child spec of a shard's reader; ``mode`` is ``"polling"`` or ``"efo"``."""
    close = EFO_CLOSE if mode == "efo" else POLLING_CLOSE

    def factory() -> ReaderActor:
        return ReaderActor(pipeline, make_reader, fail, close_timeout=close)

    return ChildSpec(
        f"{pipeline.stream}:{pipeline.shard_id}",
        factory,
        restart=Restart.TRANSIENT,
        source=True,  # its input is the shard; stopping it is a cancellation
        shutdown_timeout=0.0,
        cleanup_timeout=close,
    )


def last_failure(gave_up: RestartIntensityExceeded) -> BaseException:
    """What :meth:`Consumer.run` raises when its processors give up: the last exception itself
    (most often the handler's own), noted with the restarts the supervisor counted.

    A user's exception is the user's (issue 14): ``except KeyError`` around ``run()`` catches
    the handler's ``KeyError``. ``RestartIntensityExceeded`` is kept for failures that are
    the library's (the readers'), where no exception of the user's is behind them.
    """
    if not gave_up.causes:
        return gave_up
    last = gave_up.causes[-1]
    earlier = gave_up.causes[:-1]
    listed = ", ".join(repr(cause) for cause in earlier[-_LISTED_CAUSES:])
    if len(earlier) > _LISTED_CAUSES:
        listed = f"..., {listed}"
    last.add_note(
        f"kinesis-actors: run() gave up: more than {gave_up.max_restarts} restart(s) of the "
        f"shard processors within {gave_up.period} s (restart_intensity); "
        f"{len(earlier)} earlier failure(s) in that window" + (f": {listed}" if earlier else "")
    )
    return last


#: The earlier failures a give-up's note lists (the newest ones).
_LISTED_CAUSES = 5


def processor_spec(
    pipeline: ShardPipeline, handler: Handler, commit: Callable[[RecordBatch], None]
) -> ChildSpec[RecordBatch]:
    """The child spec of a shard's processor under :meth:`Consumer.run`: its mailbox is the
    shard's buffer, which the pipeline owns (it outlives the processor: batches read before
    ``run()`` and across its restarts stay there)."""

    def factory() -> ProcessorActor:
        return ProcessorActor(pipeline, handler, commit)

    return ChildSpec(
        f"{pipeline.stream}:{pipeline.shard_id}",
        factory,
        restart=Restart.TRANSIENT,
        mailbox=pipeline.buffer,
        shutdown_timeout=0.0,  # stopping is a cancellation: the batch in hand is not committed
        cleanup_timeout=1.0,
    )
