"""The Enhanced Fan-Out reader: :class:`ShardReader` over SubscribeToShard.

One :class:`EfoReader` per shard, driven by the shard's ``ReaderActor`` task, which is the
only task that ever touches the subscription: it opens it, pulls one event per ``read()``
(after the core has taken a credit), and every failure (end of stream, exception event,
transport error, watchdog, ResourceInUse) lands in the one ``read()`` loop, which closes the
current subscription *by generation* and opens the next one from the last continuation
(FLINK-39660: stale callbacks disposed of the new subscription). Nothing takes an event
without a credit, so a backpressured shard takes nothing and HTTP/2 flow control pushes back
on its own stream only, even on a connection it shares with other shards (its stream window;
see ``client/_h2flow.py``).

- Each event advances the position to ``AFTER_SEQUENCE_NUMBER(continuation)``, empty events
  included; a null continuation ends the shard for good.
- Subscriptions are renewed after ``subscription_lifetime`` (the service's 5 minutes) or when
  the server ends the stream; exception events and read timeouts resubscribe from the last
  delivered position; ResourceInUse backs off exponentially, and no
  shard subscribes more than once per second (the service's rule). A shard that meets only
  ResourceInUse for ``starvation_warning`` seconds is said to be starved: a warning naming the
  shard and the consumer, state ``starved`` (it used to stay "reading", silent).
- No shard is held hostage: a subscription reset mid-stream made the
  local server refuse that consumer and shard for 300 s, and the shard delivered nothing
  meanwhile. Refused for ``fallback_after`` seconds, the reader reads the shard by GetRecords
  from its position (a :class:`PollingReader` on the shard's :class:`ReadPacer`, so within the
  shard's polling budget), one read per credit as for events, and keeps subscribing at the
  backoff's cadence from where polling reached; the first event of an accepted subscription
  ends the polling. One position throughout, so neither way repeats or skips a record.
  :class:`~._efo_policy.HeldShard` keeps the hold's clock, without I/O.
- Waiting is not failing: ResourceInUse is the service saying another subscription
  still holds the shard, so it backs off like an error but does not count toward
  ``max_consecutive_failures``; only errors in a row do (resets, exception events, the
  watchdog), and then the reader crashes to its supervisor. It used to count, so a reader that
  had waited out a held shard crashed on the first reset after it, with an ERROR and a
  traceback. :class:`~._efo_policy.SubscribeBackoff` keeps both counts, without I/O.
- A watchdog resubscribes when no event arrived for ``watchdog_timeout`` seconds of *asking*
  (time spent waiting for a credit does not count), so a zombie subscription cannot hang a
  shard.
"""

from __future__ import annotations

import logging
import random as _random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio

from .. import errors
from ..client import KinesisClient, StreamRef, service_now
from ._config import StartingPosition
from ._efo_policy import EfoSettings, HeldShard, SubscribeBackoff
from ._metrics import ShardMetrics, ShardState
from ._pacing import PacingSettings, ReadPacer
from ._poison import screen
from ._proof import (
    NotFoundPolicy,
    check_resumed_at,
    closed_shard_end,
    judge_not_found,
    unreadable,
)
from ._reader import PollingReader, ShardRead
from ._replies import BadRecord, child_shard_ids, subscribe_event

__all__ = ["DISPOSE_TIMEOUT", "SUBSCRIPTION_CLOSE", "EfoReader"]

log = logging.getLogger("kinesis_actors.consumer")

#: Least time between two end-of-shard probes (see ``_at_end_of_closed_shard``).
_PROBE_INTERVAL = 1.0
#: The client bounds closing a subscription at 5 s (``client/_h2stream.py``): it waits for the
#: server to end the connection, which kinesis-mock does only at its next event, up to 1 s.
SUBSCRIPTION_CLOSE = 5.0
#: Disposing of a subscription: the client's bound and a little more, so ours never cuts it.
DISPOSE_TIMEOUT = SUBSCRIPTION_CLOSE + 0.5


class EfoReader:
    """SubscribeToShard on one shard; each ``read()`` returns one event (see module doc)."""

    def __init__(
        self,
        client: KinesisClient,
        stream: str,
        shard_id: str,
        consumer_arn: str,
        start: StartingPosition,
        *,
        metrics: ShardMetrics,
        settings: EfoSettings,
        closed: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = anyio.current_time,
        poison: str = "fail",
        not_found: NotFoundPolicy | None = None,
        random: Callable[[], float] = _random.random,
        pacer: ReadPacer | None = None,
        limit: int = 10_000,
    ) -> None:
        self._client = client
        ref = StreamRef.parse(stream)
        self._stream = ref.name  # its identity, in batches and errors
        self._ref = stream  # what its calls name: StreamARN for a stream given by ARN
        self._shard_id = shard_id
        self._arn = consumer_arn
        self._start = start
        self._position = start
        self._metrics = metrics
        self._settings = settings
        self._clock = clock
        self._closed = closed
        self._last_probe = -_PROBE_INTERVAL
        self._generation = 0
        self._stack: AsyncExitStack | None = None
        self._events: AsyncIterator[dict[str, Any]] | None = None
        self._opened_at = 0.0
        self._backoff = SubscribeBackoff(settings, random=random)
        self._finished = False
        self._poison = poison
        self._resumed_at: StartingPosition | None = None  # checked on the first records
        self._held = HeldShard(settings.starvation_warning, settings.fallback_after)
        self._not_found_policy = not_found if not_found is not None else NotFoundPolicy()
        # Reading by GetRecords while the service holds the shard: the shard's polling budget
        # (one pacer for the reader's life), and GetRecords' ``Limit``.
        self._pacer = pacer if pacer is not None else ReadPacer(PacingSettings())
        self._limit = limit
        self._polling: PollingReader | None = None
        self._polled_before = metrics.fallback_seconds  # the shard's, by earlier readers

    @property
    def start(self) -> StartingPosition:
        return self._start

    @property
    def position(self) -> StartingPosition:
        """Where the next subscription starts: after the last continuation received."""
        return self._position

    @property
    def generation(self) -> int:
        """Incremented each time a subscription is disposed of."""
        return self._generation

    # -- the one loop -----------------------------------------------------------------------

    async def read(self) -> ShardRead:
        if self._finished:
            raise RuntimeError(f"{self._stream}/{self._shard_id} is finished; nothing to read")
        settings = self._settings
        while True:
            if self._events is None:
                now = self._clock()
                delay = self._backoff.delay(now)
                fallback_at = self._held.fallback_at()
                if fallback_at is not None and fallback_at <= now + delay:
                    # Held past the bound before the next attempt: read by GetRecords now.
                    if fallback_at > now:
                        await anyio.sleep(fallback_at - now)
                    self._fall_back()
                    continue
                if self._polling is not None and delay > 0:
                    return await self._poll(self._polling)  # subscribing when the backoff allows
                await self._subscribe()
                if self._finished:
                    return ShardRead((), finished=True)
                continue
            generation = self._generation
            if self._clock() - self._opened_at >= settings.subscription_lifetime:
                await self._dispose(generation, "renewal")
                continue
            try:
                with anyio.move_on_after(settings.watchdog_timeout) as watchdog:
                    event = await self._events.__anext__()
            except StopAsyncIteration:
                # The server ended the stream: its 5 minutes are up, or it just closed it.
                await self._dispose(generation, "end")
                continue
            except errors.ResourceInUseError:
                await self._dispose(generation, "resource_in_use")
                self._in_use()
                continue
            except errors.ResourceNotFoundError as exc:
                await self._dispose(generation, "error")
                if await self._not_found(exc):
                    return self._end()
                continue
            except errors.MalformedReplyError as exc:
                if exc.bad_records and exc.reply is not None:
                    # A whole event but for some records (the client's contract): poison path.
                    # The subscription ended with the error; the next one starts after it.
                    self._backoff.delivered()
                    read = await self._accept(exc.reply, generation, exc.bad_records, removed=True)
                    await self._dispose(generation, "error")  # no-op at the shard's end
                    return read
                self._metrics.transient_errors += 1
                await self._dispose(generation, "error")
                self._failed(exc)
                continue
            except errors.KinesisError as exc:
                # Exception events, resets, read timeouts (e.g. after long backpressure):
                # recoverable, from the last delivered position.
                log.info("%s/%s: subscription failed: %s", self._stream, self._shard_id, exc)
                self._metrics.transient_errors += 1
                await self._dispose(generation, "error")
                self._failed(exc)
                continue
            if watchdog.cancelled_caught:
                log.warning(
                    "%s/%s: no event for %.1fs; resubscribing",
                    self._stream,
                    self._shard_id,
                    settings.watchdog_timeout,
                )
                await self._dispose(generation, "watchdog")
                self._failed()
                continue
            try:
                checked = subscribe_event(event)
            except errors.MalformedReplyError as exc:
                self._metrics.transient_errors += 1
                await self._dispose(generation, "error")
                self._failed(exc)
                continue
            self._backoff.delivered()
            self._not_found_policy.read_succeeded()
            self._fed()
            # The client decoded every record (a bad one raises MalformedReplyError, above).
            return await self._accept(checked, generation, ())

    def _end(self) -> ShardRead:
        self._finished = True
        return ShardRead((), finished=True)

    async def _not_found(self, exc: errors.ResourceNotFoundError) -> bool:
        """ResourceNotFound on the subscription: True if the shard expired (no longer
        listed); False to resubscribe (backed off); ShardUnreadableError for an open shard
        that keeps failing, or when the stream is gone (``_proof``)."""
        await self._check_consumer()
        self._metrics.not_found += 1
        if await judge_not_found(
            self._client,
            self._ref,
            self._shard_id,
            self._position,
            policy=self._not_found_policy,
            exc=exc,
        ):
            return True
        self._failed()
        return False

    async def _accept(
        self,
        event: Mapping[str, Any],
        generation: int,
        bad: Sequence[BadRecord] = (),
        *,
        removed: bool = False,
    ) -> ShardRead:
        records, _ = screen(
            self._stream,
            self._shard_id,
            event.get("Records") or [],
            bad,
            policy=self._poison,
            metrics=self._metrics,
            operation="SubscribeToShard",
            removed=removed,
        )
        continuation = event.get("ContinuationSequenceNumber")
        children = child_shard_ids("SubscribeToShard", event)
        if self._resumed_at is not None and check_resumed_at(
            self._stream, self._shard_id, self._resumed_at, records
        ):
            self._resumed_at = None
        self._metrics.events += 1
        if continuation and not records and not children:
            found = await self._at_end_of_closed_shard(event, continuation)
            if found is not None:
                children, continuation = found, None
        if continuation:
            self._position = StartingPosition.after_sequence_number(continuation)
        else:
            # A null continuation is the shard's end: never resubscribe.
            self._finished = True
            await self._dispose(generation, None)
        return ShardRead(
            records,
            millis_behind_latest=event.get("MillisBehindLatest"),
            finished=self._finished,
            child_shards=children,
            size=sum(len(record["Data"]) for record in records),
        )

    async def _at_end_of_closed_shard(
        self, event: Mapping[str, Any], continuation: str
    ) -> tuple[str, ...] | None:
        """For a shard that discovery lists as closed, at the tip of its subscription: whether
        it has ended, with its children (None: not known to have ended), proved by one
        GetRecords (:func:`~._proof.closed_shard_end`) at most once a second and only in
        that state."""
        if event.get("MillisBehindLatest") not in (0, None) or not self._closed():
            return None
        now = self._clock()
        if now - self._last_probe < _PROBE_INTERVAL:
            return None
        self._last_probe = now
        return await closed_shard_end(self._client, self._ref, self._shard_id, continuation)

    # -- owning the subscription ------------------------------------------------------------

    async def _subscribe(self) -> None:
        delay = self._backoff.delay(self._clock())
        if delay > 0:
            await anyio.sleep(delay)
        self._backoff.subscribing(self._clock())
        position = self._position
        taken_at = service_now(self._client)  # the service's clock: see service_now
        stack = AsyncExitStack()
        try:
            subscription = await stack.enter_async_context(
                self._client.subscribe_to_shard(
                    self._arn,
                    self._shard_id,
                    position.subscribe_params(),
                    epoch_timestamps=True,  # the Arrow batch wants milliseconds
                )
            )
            events = aiter(subscription)
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                stack.push_async_callback(aclose)
        except BaseException as exc:
            with anyio.move_on_after(DISPOSE_TIMEOUT, shield=True):
                await stack.aclose()
            if isinstance(exc, errors.ResourceInUseError):
                self._count("resource_in_use")
                self._in_use()
                return
            if isinstance(exc, errors.ResourceNotFoundError):
                if await self._not_found(exc):
                    self._finished = True
                return
            if isinstance(exc, errors.ValidationError) and position.sequence_number is not None:
                # InvalidArgument for a sequence number: not this shard's.
                raise unreadable(self._stream, self._shard_id, position, str(exc), exc) from exc
            if isinstance(exc, errors.KinesisError) and not isinstance(
                exc, errors.ConfigError | errors.CertificateError
            ):
                self._metrics.transient_errors += 1
                self._count("error")
                self._failed(exc)
                return
            raise
        self._metrics.subscriptions += 1
        self._resumed_at = position if position.type == "AT_SEQUENCE_NUMBER" else None
        if position.type == "LATEST":
            # Resubscribing at "LATEST" would skip what arrived meanwhile: pin it to a time.
            pinned = StartingPosition("AT_TIMESTAMP", timestamp=taken_at)
            self._position = pinned
            if self._start is position:
                self._start = pinned
        self._stack = stack
        self._events = events
        self._opened_at = self._clock()

    async def _dispose(self, generation: int, cause: str | None) -> None:
        """Close the subscription of ``generation`` (a stale generation is a no-op)."""
        if generation != self._generation or self._stack is None:
            return
        self._generation += 1
        stack, self._stack, self._events = self._stack, None, None
        with anyio.move_on_after(DISPOSE_TIMEOUT, shield=True):
            await stack.aclose()
        if cause is not None:
            self._count(cause)

    def _in_use(self) -> None:
        """ResourceInUse: back off, without counting it as a failure; past
        ``starvation_warning`` seconds of nothing but ResourceInUse, say so once, in the log
        and the shard's state."""
        now = self._clock()
        self._backoff.in_use(now)
        held = self._held
        if held.refused(now):
            self._metrics.starvations += 1
            if held.polling:
                then = "it is read by GetRecords meanwhile"
            else:
                self._metrics.state = ShardState.STARVED
                after = self._settings.fallback_after
                then = (
                    "still retrying"
                    if after is None
                    else f"still retrying; read by GetRecords after {after:.1f}s"
                )
            log.warning(
                "%s/%s: every subscription for %.1fs met ResourceInUse: another reader may hold "
                "this shard (consumer %s); %s",
                self._stream,
                self._shard_id,
                held.held_for(now),
                self._arn,
                then,
            )

    def _fed(self) -> None:
        """An event arrived: whatever held the shard let it go, and reading by GetRecords
        (if it did) ends here: the next read is the subscription's."""
        held = self._held
        if held.held_since is None:
            return
        now = self._clock()
        was_starved, was_polling, waited = held.starved, held.polling, held.held_for(now)
        held.released(now)
        self._metrics.state = ShardState.READING
        if was_polling:
            self._polling = None
            self._count_polled()
            log.warning(
                "%s/%s: subscribed again after %.1fs held; read by GetRecords meanwhile",
                self._stream,
                self._shard_id,
                waited,
            )
        elif was_starved:
            log.warning("%s/%s: reading again", self._stream, self._shard_id)

    # -- reading by GetRecords while the service holds the shard ----------------------------

    def _fall_back(self) -> None:
        """Held past ``fallback_after``: read by GetRecords from the reader's position."""
        now = self._clock()
        self._held.fell_back(now)
        self._metrics.fallbacks += 1
        self._metrics.state = ShardState.POLLING
        self._polling = PollingReader(
            self._client,
            self._ref,
            self._shard_id,
            self._position,
            pacer=self._pacer,
            metrics=self._metrics,
            limit=self._limit,
            clock=self._clock,
            poison=self._poison,
            not_found=self._not_found_policy,
        )
        log.warning(
            "%s/%s: every subscription for %.1fs met ResourceInUse (consumer %s); reading by "
            "GetRecords until one is accepted",
            self._stream,
            self._shard_id,
            self._held.held_for(now),
            self._arn,
        )

    async def _poll(self, polling: PollingReader) -> ShardRead:
        """One GetRecords, paced by the shard's budget; its position becomes the reader's,
        where the next subscription starts."""
        read = await polling.read()
        self._metrics.fallback_reads += 1
        self._count_polled()
        self._position = polling.position
        if self._start.type == "LATEST":
            self._start = polling.start  # pinned to its first iterator's time
        if read.finished:
            self._finished = True
            self._held.released(self._clock())
            self._polling = None
        return read

    def _count_polled(self) -> None:
        """The shard's ``fallback_seconds``: its earlier readers' and this one's so far."""
        polled = self._held.polled_seconds(self._clock())
        self._metrics.fallback_seconds = self._polled_before + polled

    def _count(self, cause: str) -> None:
        resubscriptions = self._metrics.resubscriptions
        resubscriptions[cause] = resubscriptions.get(cause, 0) + 1

    def _failed(self, error: BaseException | None = None) -> None:
        """Back off before the next subscription; give up with ``error`` after too many
        failures in a row (without one, as for the watchdog, never: it counts and backs off).
        While the shard is read by GetRecords, a failed attempt only backs off: the shard is
        read, and a crash would start the hold's clock over."""
        if self._polling is not None:
            self._backoff.in_use(self._clock())
            return
        if self._backoff.failed(self._clock()) and error is not None:
            raise error

    async def _check_consumer(self) -> None:
        """ResourceNotFound: first, whether the consumer itself is gone (then nothing is read)."""
        try:
            await self._client.call("DescribeStreamConsumer", {"ConsumerARN": self._arn})
        except errors.ResourceNotFoundError:
            raise errors.KinesisError(
                f"consumer {self._arn} no longer exists", operation="SubscribeToShard"
            ) from None

    async def aclose(self) -> None:
        if self._polling is not None:
            self._polling = None
            self._count_polled()
        await self._dispose(self._generation, None)
