"""SubscribeToShard's event stream, sans-IO: bytes in, decoded events out.

The binary framing (prelude, headers, payload, CRCs) is decoded by botocore's
``EventStreamBuffer``; events are parsed against the service model. Real Kinesis sends an
``initial-response`` event before the first ``SubscribeToShardEvent``; the local test server
does not. Both are accepted: the initial response is skipped wherever it appears.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from botocore.eventstream import EventStreamBuffer

from ._protocol import ProtocolCodec

__all__ = ["SubscribeToShardDecoder"]

_OPERATION = "SubscribeToShard"
_EVENT = "SubscribeToShardEvent"


class SubscribeToShardDecoder:
    """Feed it the response body's bytes as they arrive; it returns the complete events.

    Each event is the ``SubscribeToShardEvent`` dict (``Records``,
    ``ContinuationSequenceNumber``, ``MillisBehindLatest``, optionally ``ChildShards``),
    checked and decoded by ``_records``. An exception event raises its typed error (for
    example ``ResourceInUseError``), a malformed event
    :class:`~kinesis_actors.errors.MalformedReplyError`.
    """

    def __init__(self, codec: ProtocolCodec) -> None:
        self._codec = codec
        self._shape = codec.event_stream_shape(_OPERATION)
        self._buffer = EventStreamBuffer()
        self.initial_response_seen = False
        self.events_decoded = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add bytes; return every event they complete, in order."""
        return list(self.events(data))

    def events(self, data: bytes) -> Iterator[dict[str, Any]]:
        """Add bytes; yield the events they complete, in order, as they are decoded.

        Unlike :meth:`feed`, the events before a failing message are delivered before its
        error is raised, so a malformed event does not take its good predecessors with it.
        """
        self._buffer.add_data(data)
        return self._decoded()

    def _decoded(self) -> Iterator[dict[str, Any]]:
        for message in self._buffer:
            headers = message.headers
            if headers.get(":event-type") == "initial-response":
                self.initial_response_seen = True
                continue
            parsed = self._codec.decode_event(_OPERATION, self._shape, headers, message.payload)
            event = parsed.get(_EVENT)
            if event is None:
                # An event type this version of the model does not know: nothing to deliver.
                continue
            self.events_decoded += 1
            yield event
