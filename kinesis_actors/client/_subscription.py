"""One open SubscribeToShard stream, as an async iterator of decoded events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from .. import errors
from ._eventstream import SubscribeToShardDecoder
from ._protocol import ProtocolCodec

if TYPE_CHECKING:
    from ._service import ClientCounters

__all__ = ["Subscription"]


class ResponseBody(Protocol):
    """What a subscription reads: the streamed body of its response (an ``H2Stream``)."""

    http_version: str

    async def receive(self) -> bytes:
        """The next chunk of the body; ``b""`` at its end."""
        ...


class Subscription:
    """The events of one SubscribeToShard call, decoded as the bytes arrive.

    Iterating reads from the network only when the caller asks for the next event, so a
    consumer that stops iterating pushes back on the server through HTTP/2 flow control.
    Transport failures are raised as :class:`~kinesis_actors.errors.TransportError`, exception
    events as their typed errors, a malformed event as
    :class:`~kinesis_actors.errors.MalformedReplyError` (after the good events before it;
    counted in the client's ``malformed_replies``), and so is a stream that cannot be framed
    or that ends inside an event. The iteration ends when the server ends
    the stream (every 5 minutes, or at the shard's end).
    """

    def __init__(
        self,
        response: ResponseBody,
        codec: ProtocolCodec,
        *,
        opened_at: float,
        counters: ClientCounters | None = None,
        epoch_timestamps: bool = False,
    ) -> None:
        self._response = response
        self._decoder = SubscribeToShardDecoder(codec, epoch_timestamps=epoch_timestamps)
        self._counters = counters
        self.opened_at = opened_at
        self.bytes_received = 0

    @property
    def http_version(self) -> str:
        """The negotiated protocol, ``"HTTP/2"`` over TLS."""
        return self._response.http_version

    @property
    def initial_response_seen(self) -> bool:
        """Whether the server sent an ``initial-response`` event (real Kinesis does)."""
        return self._decoder.initial_response_seen

    @property
    def events_received(self) -> int:
        return self._decoder.events_decoded

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._events()

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        decoder = self._decoder
        try:
            while chunk := await self._response.receive():
                self.bytes_received += len(chunk)
                for event in decoder.events(chunk):
                    yield event
            decoder.check_complete()
        except errors.MalformedReplyError:
            if self._counters is not None:
                self._counters.add("malformed_replies")
            raise
