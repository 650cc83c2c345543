"""How each shard's reader is made: by GetRecords or by Enhanced Fan-Out, from one set of
settings per consumer.

The :class:`~._scheduler.ShardScheduler` decides which shards are read and when; a shard's
reader actor (``_actors``) asks this for a reader whenever it starts one (again after a
crash). Polling readers each get their own :class:`~._pacing.ReadPacer` on the consumer's
pacing settings and share one :class:`~._pacing.IdleBudget` for their idle reads (one event
loop); EFO readers get the consumer's :class:`~._efo_policy.EfoSettings`, the ARN of the
stream's registered consumer (resolved at open) and a pacer of their own for reading by
GetRecords while the service holds their shard. Kept apart from the scheduler because it is
configuration turned into readers: its state is what open resolved (the ARNs) and the idle
reads' budget, whose calendar the polling readers' pacers write; nothing of the scheduler's.
(Its :meth:`ReaderMaker.make` is the :data:`~._actors.ReaderFactory` a reader actor calls.)
"""

from __future__ import annotations

from collections.abc import Callable

from ..client import KinesisClient
from ._config import ConsumerConfig, StartingPosition
from ._efo import EfoReader
from ._efo_policy import EfoSettings
from ._pacing import IdleBudget, PacingSettings, ReadPacer
from ._pipeline import ShardPipeline
from ._positions import ShardKey
from ._reader import PollingReader, ShardReader

__all__ = ["ReaderMaker"]


class ReaderMaker:
    """Makes the readers of one consumer (see the module's doc).

    ``streams`` maps a stream's name to what its calls name (an ARN for another account's
    stream); ``closed`` says whether discovery lists a shard as closed (an EFO reader then
    checks for its end at the tip, see :func:`~._proof.closed_shard_end`).
    """

    def __init__(
        self,
        client: KinesisClient,
        streams: dict[str, str],
        config: ConsumerConfig,
        *,
        closed: Callable[[ShardKey], bool],
    ) -> None:
        self._client = client
        self._streams = streams
        self._config = config
        self._closed = closed
        self._pacing = PacingSettings(
            max_calls_per_second=config.max_calls_per_second,
            max_bytes_per_second=config.max_bytes_per_second,
            idle_initial=config.idle_backoff_initial,
            idle_max=config.idle_backoff_max,
            throttle_initial=config.throttle_backoff_initial,
            throttle_max=config.throttle_backoff_max,
            caught_up_millis=config.caught_up_millis_behind,
            caught_up_interval=config.caught_up_read_interval,
        )
        # Shared by every polling reader's pacer (one event loop): their idle reads' slots.
        self._idle_budget = (
            None
            if config.idle_reads_per_second is None
            else IdleBudget(config.idle_reads_per_second)
        )
        self._efo = EfoSettings(
            watchdog_timeout=config.efo_watchdog_timeout,
            subscription_lifetime=config.efo_subscription_lifetime,
            starvation_warning=config.efo_starvation_warning,
            fallback_after=config.efo_fallback_after,
        )
        self._consumer_arns: dict[str, str] = {}

    def opened(self, consumer_arns: dict[str, str]) -> None:
        """The consumer opened: ``consumer_arns`` (EFO) are the ones resolved for this open."""
        self._consumer_arns = consumer_arns

    def make(self, pipeline: ShardPipeline, start: StartingPosition) -> ShardReader:
        """A reader of ``pipeline``'s shard from ``start``, in the consumer's mode."""
        config = self._config
        if config.mode == "efo":
            key = pipeline.key
            return EfoReader(
                self._client,
                self._streams[pipeline.stream],
                pipeline.shard_id,
                self._consumer_arns[pipeline.stream],
                start,
                metrics=pipeline.counters,
                settings=self._efo,
                closed=lambda: self._closed(key),
                poison=config.poison_records,
                pacer=ReadPacer(self._pacing),  # reading by GetRecords while held
                limit=config.max_records_per_call,
            )
        return PollingReader(
            self._client,
            self._streams[pipeline.stream],
            pipeline.shard_id,
            start,
            pacer=ReadPacer(self._pacing, self._idle_budget),
            metrics=pipeline.counters,
            limit=config.max_records_per_call,
            poison=config.poison_records,
        )
