"""How the consumer's actors are supervised, and how long each may take to stop.

Two supervisors, one per kind of actor: the readers (one per shard) and, under
:meth:`Consumer.run`, the processors (one per shard). A shard's actors do not depend on
another shard's, so each supervisor stops its children concurrently
(:attr:`StopOrder.CONCURRENT`): closing a consumer costs its slowest shard, not the sum of its
shards. Measured against the local server with 32 EFO shards, 31 s before, about 1 s after
(docs/runtime.md, "Shutdown").

How many restarts, of whom. ``restart_intensity`` (5 within 30 s by default) is
a budget *per reader* (:attr:`IntensityScope.CHILD`) but one budget *for all the processors*:

* Readers. A shard's reader depends on no other shard's, and the failures that crash readers
  come in bursts over many shards at once: a network blip resets every subscription. With
  one budget for all, the consumer tolerated less the more shards it read: six readers giving
  up within 30 s of each other failed it, while one shard alone could crash every 6 s for
  ever. Scaling a shared budget with the shard count was the other way; it would change under
  resharding and leases, and still let one shard's crash loop spend the others' budget. Per
  reader, what fails the consumer is one shard whose reader keeps crashing. A reader crashes
  after ``max_consecutive_failures`` (5) errors in a row, subscriptions at least 1 s apart
  and backed off 1 s to 10 s, jittered (``_efo``; ResourceInUse waits do not count): an
  outage crashes each reader about every 15 s (5 s if every wait were drawn at its floor),
  about 2 crashes per 30 s whatever the shard count; 6 would take every draw near its floor
  six times running. So a network outage is waited out, each shard's crash a warning (the
  producer waits for its endpoint the same way), while a reader that crashes as soon as it
  starts, a bug, spends its 5 restarts (0.05 s doubling to 0.8 s) in under 2 s and fails the
  consumer.
* A reader's crash on a retryable error (a reset, a 5xx, throttling, a reply that cannot be
  believed: :func:`~kinesis_actors.client.is_retryable`) is expected: one warning line,
  ``crashed on a recoverable error``. Any other (a bug, access denied, a deregistered
  consumer) is an ERROR with its traceback, and so is the consumer giving up.
* Processors keep one budget for all: a handler's exception is the user's, and a handler that
  fails on every shard should end ``run()`` fast, with that exception (``last_failure``).

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

from ..client import is_retryable
from ..runtime import (
    Backoff,
    ChildSpec,
    IntensityScope,
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
from ._positions import ShardKey

__all__ = ["last_failure", "processor_spec", "reader_spec", "shard_supervisor"]

RESTART_BACKOFF = Backoff(initial=0.05, maximum=2.0)

#: A polling reader holds no connection of its own: closing it forgets an iterator.
POLLING_CLOSE = 1.0
#: An EFO reader's close waits (bounded) for the server to end its subscription.
EFO_CLOSE = DISPOSE_TIMEOUT + 0.5


def shard_supervisor(
    name: str,
    intensity: tuple[int, float],
    scope: IntensityScope = IntensityScope.SUPERVISOR,
) -> Supervisor:
    """A supervisor of one actor per shard: one_for_one, stopped concurrently; ``intensity``
    for all of them or, with ``IntensityScope.CHILD``, for each (see the module doc)."""
    return Supervisor(
        Strategy.ONE_FOR_ONE,
        name=name,
        intensity=intensity,
        backoff=RESTART_BACKOFF,
        stop_order=StopOrder.CONCURRENT,
        intensity_scope=scope,
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
        recoverable=is_retryable,  # gave up on the network: a warning, not an ERROR
    )


def last_failure(gave_up: RestartIntensityExceeded) -> BaseException:
    """What :meth:`Consumer.run` raises when its processors give up: the last exception itself
    (most often the handler's own), noted with the restarts the supervisor counted.

    A user's exception is the user's: ``except KeyError`` around ``run()`` catches
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
    pipeline: ShardPipeline,
    handler: Handler,
    commit: Callable[[RecordBatch], None],
    fenced: Callable[[ShardKey], bool],
) -> ChildSpec[RecordBatch]:
    """The child spec of a shard's processor under :meth:`Consumer.run`: its mailbox is the
    shard's buffer, which the pipeline owns (it outlives the processor: batches read before
    ``run()`` and across its restarts stay there). ``fenced`` says when the shard's lease
    is no longer validly held (see :class:`ProcessorActor`)."""

    def factory() -> ProcessorActor:
        return ProcessorActor(pipeline, handler, commit, fenced)

    return ChildSpec(
        f"{pipeline.stream}:{pipeline.shard_id}",
        factory,
        restart=Restart.TRANSIENT,
        mailbox=pipeline.buffer,
        shutdown_timeout=0.0,  # stopping is a cancellation: the batch in hand is not committed
        cleanup_timeout=1.0,
    )
