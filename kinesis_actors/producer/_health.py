"""Whether the producer's endpoint answers, and what to say when it does not or when puts
wait for room (sans-IO).

A dead endpoint must be said, not waited on in silence: killed mid-produce, the producer used
to wait forever (with ``record_ttl=None``) while its only warning said "the stream is not
keeping up (throttled 0 times so far)". Here a refused, reset or timed-out connection is no
answer and any reply, even an error, is one; the first call without an answer starts the
clock. :meth:`EndpointHealth.warn` says so once it has lasted ``backpressure_warning_after``,
then every ``backpressure_warning_interval``, naming the endpoint, the error and how long.
The two warnings are a pair: "answers again" is said only after "has not answered" was. A
transport error that the next call recovers from before the warning is due is no outage
anyone was told of (measured before: "answers again after 0.0s" after every single reset, 46-59
lines a run with no warning before them).

``now`` comes in (the loop's clock); the same moment is also kept on ``time.monotonic`` so
that :meth:`EndpointHealth.seconds` can be read from any thread (a stopped loop's producer).
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

from .. import errors
from ._config import ProducerConfig

if TYPE_CHECKING:
    from ._pipeline import Pipeline

__all__ = ["EndpointHealth", "why_no_room"]

log = logging.getLogger("kinesis_actors.producer")


class EndpointHealth:
    """Since when the endpoint has not answered (``since``, None while it does) and why
    (``error``, the last transport error)."""

    __slots__ = ("_config", "_last_warning", "_monotonic", "_stream", "endpoint", "error", "since")

    def __init__(self, stream: str, endpoint: str, config: ProducerConfig) -> None:
        self._stream = stream
        self._config = config
        self.endpoint = endpoint
        self.since: float | None = None
        self.error: errors.TransportError | None = None
        self._monotonic = 0.0
        self._last_warning = -math.inf

    def answered(self, error: errors.KinesisError | None, now: float) -> None:
        """A call ended: with ``error`` (None: a reply). A transport error other than a
        certificate's is no answer; anything else is one, and ends an outage (said once, if
        :meth:`warn` said it began)."""
        if isinstance(error, errors.TransportError) and not isinstance(
            error, errors.CertificateError
        ):
            if self.since is None:
                self.since = now
                self._monotonic = time.monotonic()
            self.error = error
        elif self.since is not None:
            if self._last_warning > -math.inf:
                log.warning(
                    "producer for stream %r: the endpoint %s answers again after %.1fs",
                    self._stream,
                    self.endpoint,
                    now - self.since,
                )
            self.since = None
            self.error = None
            self._last_warning = -math.inf

    def seconds(self) -> float:
        """How long no call has got an answer, 0.0 while the endpoint answers; any thread."""
        if self.since is None:
            return 0.0
        return max(0.0, time.monotonic() - self._monotonic)

    def cause(self, now: float) -> str | None:
        """The sentence that names the outage, for other warnings (None while it answers)."""
        if self.since is None:
            return None
        return (
            f"The endpoint {self.endpoint} has not answered for {now - self.since:.1f}s "
            f"({self.error})."
        )

    def warn(self, now: float, waiting: int) -> float | None:
        """Log the outage if it is due (``waiting`` records wait to be sent again); returns
        when to look again, None while the endpoint answers."""
        since = self.since
        if since is None:
            return None
        config = self._config
        due = max(
            since + config.backpressure_warning_after,
            self._last_warning + config.backpressure_warning_interval,
        )
        if now < due:
            return due
        self._last_warning = now
        ttl = config.record_ttl
        log.warning(
            "producer for stream %r: the endpoint %s has not answered for %.1fs (%s); "
            "%d records wait to be sent again, at most %.1fs apart. %s",
            self._stream,
            self.endpoint,
            now - since,
            self.error,
            waiting,
            config.retry_max,
            "With record_ttl=None they wait until it answers (set record_ttl to fail them)."
            if ttl is None
            else f"Each fails with RecordExpiredError {ttl}s after its put.",
        )
        return now + config.backpressure_warning_interval


def why_no_room(pipeline: Pipeline, config: ProducerConfig, in_flight: int, now: float) -> str:
    """What holds the queue full while the endpoint answers, as the producer knows it
    (``in_flight``: its PutRecords calls out).

    The usual cause is the producer's own pacing: it keeps each shard within its write
    limits before the service has to throttle, so a full queue with no throttle at all is
    the expected picture of a stream with too few shards for the input, not a contradiction.
    """
    throttled = pipeline.throttled
    service = (
        "the service throttled nothing so far"
        if throttled == 0
        else f"the service throttled {throttled} Kinesis records so far"
    )
    paced = pipeline.paced_shards(now)
    if paced:
        return (
            f"Records arrive faster than the stream's shards take them: the producer paces "
            f"each shard to its write limits (1,000 records/s and 1 MiB/s, times rate_limit "
            f"{config.rate_limit:g}) and {paced} shard(s) are at that pace now; {service}. "
            "More shards (or fewer, larger records, with aggregation) raise the rate."
        )
    if in_flight >= config.max_in_flight_calls:
        return (
            f"All {in_flight} PutRecords calls allowed at once (max_in_flight_calls) are "
            f"waiting for their answers: the endpoint acknowledges slower than records "
            f"arrive; {service}."
        )
    held = pipeline.pending_records - pipeline.ready_records
    where = (
        "behind their key's record in flight (preserve_order) or in a retry's backoff"
        if config.preserve_order
        else "in a retry's backoff"
    )
    return (
        f"Records arrive faster than they are acknowledged ({in_flight} PutRecords "
        f"calls in flight, {pipeline.pending_records} records waiting to be sent, {held} "
        f"of them {where}); {service}."
    )
