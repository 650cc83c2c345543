"""Flow-control arithmetic and the outbound RST_STREAM guard of a shared HTTP/2 connection.

Sans-IO: nothing here awaits or reads a clock. ``_h2conn`` asks and does the I/O.

Why several subscriptions can share a connection without one stalled shard holding the others
back (FLINK-34071's lesson): HTTP/2 has two windows, one per stream and one per connection. A
stream's window bounds what the server may send on it before the client returns credit; the
client returns a stream's credit only as its subscription takes the bytes
(:class:`StreamCredit`), so an unread subscription holds at most its stream window
(``ClientConfig.subscribe_window``) in memory, and the server stops sending on that stream
only. The connection window is shared: a server may not send on *any* stream once it is
spent. So no subscription may be able to spend it:

- the connection's credit goes back as bytes leave the socket, whoever takes them later,
  whichever stream they came on (one just reset included): after each socket read, once
  the connection's window as h2 counts it has fallen 16 KiB or more below what was
  advertised, the whole difference goes back (:class:`ConnectionCredit`). So what the
  server has outstanding on the connection is what is in flight plus less than 16 KiB;
- in flight is at most the stream windows of the open subscriptions (N * window), plus as
  much again for subscriptions just reset whose bytes are still on the way (their slots are
  reused at once);
- the connection window advertised is four times N * window plus 16 KiB
  (:func:`connection_window`), which covers them with room to spare. (Where the window's
  cap leaves no room for the 16 KiB, the batch is what is left, down to a byte: credit
  after every read that brought any.)

A stalled subscription thus only ever exhausts its own stream window. Every DATA frame's
flow-controlled length (padding included) is credited exactly once on the connection (after
its read, in a batch) and at most once on its stream (when taken; not once the stream is
closed, when its window is moot). h2 hands back bytes that arrive on closed streams by
itself, but only once half the window is owed, and never more than the window lacks at
that moment: with credit taken from its own count, no byte goes back twice. Measured on
the local test server: with the connection's credit handed back only as bytes were taken,
one stalled shard stopped its sibling's events on the shared connection for as long as it
stalled; handed back on receipt, the sibling read on.

The batch is a quarter of the protocol's initial window (65,535), not a share of the larger
window advertised: the local test server keeps to the initial one whatever the client
advertises (measured: in that test, with batches of 64 KiB the sibling stopped short of
its records; with 16 KiB it read on), and handed back in quarters of it, no server waits on
more than a quarter of its window, however many bytes arrive on streams already reset.
"""

from __future__ import annotations

__all__ = [
    "CONNECTION_CREDIT_BATCH",
    "MAX_CONNECTION_WINDOW",
    "ConnectionCredit",
    "ResetGuard",
    "StreamCredit",
    "connection_window",
]

#: The largest connection window advertised. The protocol allows 2**31 - 1; the local test
#: server fails a connection whose stream window is that large, so stay well below.
MAX_CONNECTION_WINDOW = 2**30

#: Margin over the sum of the stream windows (see the module docstring).
_MARGIN = 4

#: The connection's credit is handed back once this much is owed (see the module docstring).
CONNECTION_CREDIT_BATCH = 16_384

_HEADER = 9
_RST_STREAM = 0x3


def connection_window(subscriptions: int, window: int) -> int:
    """The connection window for up to ``subscriptions`` streams of ``window`` bytes each."""
    wanted = _MARGIN * subscriptions * window + CONNECTION_CREDIT_BATCH
    return max(65535, min(MAX_CONNECTION_WINDOW, wanted))


class ConnectionCredit:
    """The credit the connection owes the server, handed back in batches of
    :data:`CONNECTION_CREDIT_BATCH` (less where the window's cap leaves less beyond the
    margin; see the module docstring).

    One WINDOW_UPDATE a batch rather than one a socket read: an idle subscription's event
    (a few hundred bytes) cost a frame sent, a TLS record and a system call of its own, and
    batched, 1,000 idle shards cost the client a third less CPU (measured:
    ``docs/consumer.md``, "Enhanced Fan-Out connections").
    """

    def __init__(self, subscriptions: int, window: int) -> None:
        self.window = connection_window(subscriptions, window)  # as advertised
        spare = self.window - _MARGIN * subscriptions * window
        self._threshold = max(1, min(spare, CONNECTION_CREDIT_BATCH))

    def due(self, current: int) -> int:
        """How much to hand back now that the connection's window is ``current`` (h2's
        ``inbound_flow_control_window``): all it lacks, once that is a batch (0: later)."""
        owed = self.window - current
        return owed if owed >= self._threshold else 0


class StreamCredit:
    """The credit one stream owes the server, handed back in quarters of its window.

    Fewer WINDOW_UPDATE frames than one per DATA frame, and the server never waits for more
    than a quarter of the window (h2's own rule, half, would leave it half the time).
    """

    def __init__(self, window: int) -> None:
        self._threshold = max(1, window // 4)
        self.owed = 0

    def taken(self, length: int) -> int:
        """``length`` flow-controlled bytes were taken: how much to hand back now (0: later)."""
        self.owed += length
        if self.owed < self._threshold:
            return 0
        owed, self.owed = self.owed, 0
        return owed


class ResetGuard:
    """Lets out exactly one RST_STREAM per stream the client chose to reset, and no other.

    h2 answers every frame that arrives on a stream it has reset with another RST_STREAM (it
    may: RFC 9113 section 5.4.2), and a subscription reset with data in flight has many such
    frames. The local test server tears the whole connection down on a second RST_STREAM
    for one stream, failing every sibling subscription. The client resets a stream only when
    it closes one that has not ended (once), so every RST_STREAM h2 writes on its own is
    dropped from the bytes it sends: they are all for streams already closed. (Filtering the
    bytes h2 hands over keeps h2's own methods untouched.)
    """

    def __init__(self) -> None:
        # Bounded by the streams being reset right now: an id leaves when its frame goes out.
        self._allowed: set[int] = set()
        self._partial = b""  # the start of a frame whose end is in the next chunk
        self.dropped = 0

    def allow(self, stream_id: int) -> None:
        """The client resets ``stream_id``: let its (first) RST_STREAM through."""
        self._allowed.add(stream_id)

    def revoke(self, stream_id: int) -> None:
        """The reset of ``stream_id`` did not happen after all."""
        self._allowed.discard(stream_id)

    def filter(self, data: bytes) -> bytes:
        """``data`` (frames h2 has to send) without the RST_STREAM frames not allowed."""
        data = self._partial + data
        kept: list[bytes] = []
        start = offset = 0
        while offset + _HEADER <= len(data):
            end = offset + _HEADER + int.from_bytes(data[offset : offset + 3], "big")
            if end > len(data):
                break
            if data[offset + 3] == _RST_STREAM:
                stream_id = int.from_bytes(data[offset + 5 : offset + 9], "big") & 0x7FFFFFFF
                if stream_id in self._allowed:
                    self._allowed.discard(stream_id)
                else:
                    kept.append(data[start:offset])
                    start = end
                    self.dropped += 1
            offset = end
        kept.append(data[start:offset])
        self._partial = data[offset:]
        return b"".join(kept)
