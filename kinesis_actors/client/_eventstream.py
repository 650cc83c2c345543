"""SubscribeToShard's event stream, sans-IO: bytes in, decoded events out.

The binary framing (prelude, headers, payload, CRCs) is decoded by botocore's
``EventStreamBuffer``; events are checked and decoded by ``_records``. Real Kinesis sends an
``initial-response`` event before the first ``SubscribeToShardEvent``; the local test server
does not. Both are accepted: the initial response is skipped wherever it appears.

A stream that cannot be framed (a bad checksum, an absurd length, a 200 whose body is no
event stream at all) or that ends inside a message is a
:class:`~kinesis_actors.errors.MalformedReplyError`, like a garbled unary reply: botocore's
own ``ParserError`` would reach the consumer untyped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from botocore.eventstream import EventStreamBuffer, EventStreamMessage, ParserError

from .. import errors
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

    def __init__(self, codec: ProtocolCodec, *, epoch_timestamps: bool = False) -> None:
        self._codec = codec
        self._epoch_timestamps = epoch_timestamps  # records' arrival times as epoch seconds
        self._shape = codec.event_stream_shape(_OPERATION)
        self._buffer = EventStreamBuffer()
        self.initial_response_seen = False
        self.events_decoded = 0
        #: Bytes fed that no complete message has used yet: nonzero at the end of the body
        #: means the stream was cut inside a message.
        self.pending_bytes = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add bytes; return every event they complete, in order."""
        return list(self.events(data))

    def events(self, data: bytes) -> Iterator[dict[str, Any]]:
        """Add bytes; yield the events they complete, in order, as they are decoded.

        Unlike :meth:`feed`, the events before a failing message are delivered before its
        error is raised, so a malformed event does not take its good predecessors with it.
        """
        self._buffer.add_data(data)
        self.pending_bytes += len(data)
        return self._decoded()

    def check_complete(self) -> None:
        """At the end of the body: raise if it ended inside a message."""
        if self.pending_bytes:
            raise errors.MalformedReplyError(
                f"the event stream ended inside a message ({self.pending_bytes} bytes left)",
                operation=_OPERATION,
                status_code=200,
            )

    def _messages(self) -> Iterator[EventStreamMessage]:
        messages = iter(self._buffer)
        while True:
            try:
                message = next(messages)
            except StopIteration:
                return
            except (ParserError, KeyError, ValueError, struct.error) as exc:
                # KeyError, ValueError, struct.error: headers of an unknown type or encoding.
                raise errors.MalformedReplyError(
                    f"the event stream cannot be framed ({type(exc).__name__}: {exc})",
                    operation=_OPERATION,
                    status_code=200,
                ) from exc
            self.pending_bytes -= message.prelude.total_length
            yield message

    def _decoded(self) -> Iterator[dict[str, Any]]:
        for message in self._messages():
            headers = message.headers
            if headers.get(":event-type") == "initial-response":
                self.initial_response_seen = True
                continue
            parsed = self._codec.decode_event(
                _OPERATION,
                self._shape,
                headers,
                message.payload,
                epoch_timestamps=self._epoch_timestamps,
            )
            event = parsed.get(_EVENT)
            if event is None:
                # An event type this version of the model does not know: nothing to deliver.
                continue
            self.events_decoded += 1
            yield event
