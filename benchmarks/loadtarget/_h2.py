"""HTTP/2 on the TLS port (ALPN ``h2``): unary calls and SubscribeToShard event streams.

Sending honours the client's flow control: DATA frames never exceed the stream's and the
connection's send windows (SETTINGS_INITIAL_WINDOW_SIZE as later changed, plus every
WINDOW_UPDATE) nor the peer's maximum frame size; what does not fit waits for the next
WINDOW_UPDATE. A subscription produces its next event only once the previous one has left
(windows open, and the socket's write buffer below its high-water mark), so a client that
stops reading stops the stream without the server buffering more than one event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from ._base import Outcome
from ._eventstream import encode_event, initial_response
from ._service import Reply, Result, Service, Subscription

__all__ = ["H2"]

_RECEIVE_WINDOW = 16 * 1024 * 1024
_EVENTSTREAM = b"application/vnd.amazon.eventstream"


class H2:
    """The HTTP/2 side of one TLS connection (the owning protocol feeds it bytes)."""

    def __init__(self, service: Service, transport: asyncio.Transport) -> None:
        self._service = service
        self._transport = transport
        self._conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self._conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _RECEIVE_WINDOW,
            },
        )
        self._conn.initiate_connection()
        self._conn.increment_flow_control_window(_RECEIVE_WINDOW)
        self._requests: dict[int, tuple[dict[bytes, bytes], list[bytes]]] = {}
        self._pending: dict[int, tuple[bytes, bool]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._gone: set[int] = set()  # streams the client reset
        self._progress = asyncio.Event()
        self._writable = True
        self._closed = False
        self._flush()

    # Bytes in -----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        try:
            events = self._conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self._flush()
            self.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = {bytes(k): bytes(v) for k, v in event.headers or ()}
                self._requests[event.stream_id or 0] = (headers, [])
                if event.stream_ended is not None:
                    self._dispatch(event.stream_id or 0)
            elif isinstance(event, h2.events.DataReceived):
                request = self._requests.get(event.stream_id or 0)
                if request is not None and event.data:
                    request[1].append(event.data)
                self._conn.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id or 0
                )
            elif isinstance(event, h2.events.StreamEnded):
                self._dispatch(event.stream_id or 0)
            elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
                self._drain()
            elif isinstance(event, h2.events.StreamReset):
                self._forget(event.stream_id or 0)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self._flush()
                self.close()
                return
        self._flush()

    def _dispatch(self, stream_id: int) -> None:
        request = self._requests.pop(stream_id, None)
        if request is None:
            return
        headers, parts = request
        body = b"".join(parts)
        operation = headers.get(b"x-amz-target", b"").decode("latin-1").rpartition(".")[2]
        if operation == "SubscribeToShard":
            outcome = self._service.subscribe(body)
            if isinstance(outcome, Subscription):
                task = asyncio.get_running_loop().create_task(self._stream(stream_id, outcome))
                self._tasks[stream_id] = task
                task.add_done_callback(lambda _: self._tasks.pop(stream_id, None))
                return
            self._answer(stream_id, outcome)
            return
        self._answer(stream_id, self._service.respond(operation, body))

    def _answer(self, stream_id: int, result: Result) -> None:
        if isinstance(result, Reply):
            self._reply(stream_id, result)
        elif isinstance(result, str):  # CUT: drop the whole connection, as a network cut does
            self.close()
        else:
            task = asyncio.get_running_loop().create_task(self._later(stream_id, result))
            self._tasks[stream_id] = task
            task.add_done_callback(lambda _: self._tasks.pop(stream_id, None))

    async def _later(self, stream_id: int, pending: Awaitable[Outcome]) -> None:
        outcome = await pending
        if not self._closed:
            self._answer(stream_id, outcome)
            self._flush()

    # Bytes out ----------------------------------------------------------------------------

    def _reply(self, stream_id: int, reply: Reply) -> None:
        if self._closed:
            return
        try:
            self._conn.send_headers(
                stream_id,
                [
                    (b":status", str(reply.status).encode()),
                    (b"content-type", reply.content_type.encode()),
                    (b"content-length", str(len(reply.body)).encode()),
                ],
            )
        except h2.exceptions.ProtocolError:  # the client reset the stream meanwhile
            return
        self._send(stream_id, reply.body, end_stream=True)

    def _send(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        """Send what the windows allow now; keep the rest until a WINDOW_UPDATE."""
        conn = self._conn
        try:
            while data:
                window = conn.local_flow_control_window(stream_id)
                if window <= 0:
                    break
                size = min(window, conn.max_outbound_frame_size, len(data))
                conn.send_data(stream_id, data[:size])
                data = data[size:]
            if data:
                self._pending[stream_id] = (data, end_stream)
                return
            self._pending.pop(stream_id, None)
            if end_stream:
                conn.end_stream(stream_id)
        except h2.exceptions.ProtocolError:  # stream closed or reset by the client
            self._pending.pop(stream_id, None)

    def _drain(self) -> None:
        for stream_id, (data, end_stream) in list(self._pending.items()):
            self._send(stream_id, data, end_stream)
        self._signal()

    def _flush(self) -> None:
        data = self._conn.data_to_send()
        if data and not self._closed:
            self._transport.write(data)

    def _signal(self) -> None:
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    async def _send_event(self, stream_id: int, data: bytes) -> bool:
        """Send one event and wait until it has left; False if the stream is gone."""
        self._send(stream_id, data, end_stream=False)
        self._flush()
        # Yield at least once per event, or a producer that is never paused would starve the
        # loop and miss the client's RST_STREAM or the socket closing.
        await asyncio.sleep(0)
        while self._open() and (stream_id in self._pending or not self._writable):
            await self._progress.wait()
        return self._open() and stream_id not in self._gone

    def _open(self) -> bool:
        if self._transport.is_closing():
            self._closed = True
        return not self._closed

    # SubscribeToShard -----------------------------------------------------------------------

    async def _stream(self, stream_id: int, subscription: Subscription) -> None:
        service = self._service
        config = service.config
        shard = subscription.shard
        try:
            self._reply_headers(stream_id)
            if config.initial_response and not await self._send_event(
                stream_id, initial_response()
            ):
                return
            while time.monotonic() < subscription.deadline:
                if shard.shard_id in service.paused:
                    await service.wait_resumed((shard.shard_id,))
                bucket = subscription.bucket
                while bucket is not None and not bucket.positive():  # noqa: ASYNC110 - a clock
                    await asyncio.sleep(min(0.05, bucket.seconds_until_positive()))
                share = service.faults.stream_reset_share
                if share and service.random.random() < share:
                    service.count_fault("stream_reset")
                    self._conn.reset_stream(stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
                    self._flush()
                    return
                changed = shard.changed
                event = service.next_event(subscription)
                if event is None:
                    try:
                        await asyncio.wait_for(changed.wait(), config.heartbeat_seconds)
                        continue
                    except TimeoutError:
                        payload = service.event_payload(subscription, "", 0)
                else:
                    payload = event[0]
                if not await self._send_event(stream_id, encode_event(payload)):
                    return
            self._send(stream_id, b"", end_stream=True)
            self._flush()
        except h2.exceptions.ProtocolError:
            return

    def _reply_headers(self, stream_id: int) -> None:
        self._conn.send_headers(
            stream_id,
            [(b":status", b"200"), (b"content-type", _EVENTSTREAM)],
        )
        self._flush()

    def _forget(self, stream_id: int) -> None:
        self._pending.pop(stream_id, None)
        self._requests.pop(stream_id, None)
        self._gone.add(stream_id)
        task = self._tasks.pop(stream_id, None)
        if task is not None:
            task.cancel()
        self._signal()

    # Connection -------------------------------------------------------------------------------

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport.close()
            self._signal()

    def connection_lost(self) -> None:
        self._closed = True
        for task in list(self._tasks.values()):
            task.cancel()
        self._signal()

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        self._signal()
