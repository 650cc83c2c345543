"""The shared connection's flow-control arithmetic and RST_STREAM guard, without a loop."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings

from kinesis_actors.client._h2conn import new_h2
from kinesis_actors.client._h2flow import (
    CONNECTION_CREDIT_BATCH,
    MAX_CONNECTION_WINDOW,
    ConnectionCredit,
    ResetGuard,
    StreamCredit,
    connection_window,
)


def rst_stream(stream_id: int) -> bytes:
    return b"\x00\x00\x04\x03\x00" + stream_id.to_bytes(4, "big") + b"\x00\x00\x00\x08"


def window_update(stream_id: int, increment: int) -> bytes:
    return b"\x00\x00\x04\x08\x00" + stream_id.to_bytes(4, "big") + increment.to_bytes(4, "big")


def test_the_connection_window_covers_every_stream_window_with_room_to_spare() -> None:
    assert connection_window(50, 256 * 1024) == 4 * 50 * 256 * 1024 + CONNECTION_CREDIT_BATCH
    assert connection_window(1, 65535) == 4 * 65535 + CONNECTION_CREDIT_BATCH
    assert connection_window(10_000, 2**20) == MAX_CONNECTION_WINDOW


def test_the_connection_s_credit_goes_back_in_quarters_of_the_initial_window() -> None:
    """An idle event's few hundred bytes send no frame of their own; a server that keeps to
    the initial 65,535 bytes (the local one does) waits on at most a quarter of them."""
    assert CONNECTION_CREDIT_BATCH == 65_535 // 4 + 1
    credit = ConnectionCredit(50, 256 * 1024)
    advertised = credit.window
    assert advertised == 4 * 50 * 256 * 1024 + 16_384
    assert credit.due(advertised) == 0
    assert credit.due(advertised - 16_383) == 0
    assert credit.due(advertised - 16_384) == 16_384  # all it lacks, once a batch
    assert credit.due(advertised - 100_000) == 100_000


def test_where_the_cap_leaves_no_room_beyond_the_margin_every_read_is_credited() -> None:
    """At the largest configuration (2**28 bytes of stream windows a connection) four times
    them is the cap itself: nothing may be owed; a little below it, what the cap leaves."""
    credit = ConnectionCredit(1_024, 2**18)
    assert credit.window == 4 * 2**28 == MAX_CONNECTION_WINDOW
    assert credit.due(credit.window - 1) == 1
    partly = ConnectionCredit(1_024, 2**18 - 2)  # the cap leaves 8 KiB beyond the margin
    assert partly.due(partly.window - 8 * 1024 + 1) == 0
    assert partly.due(partly.window - 8 * 1024) == 8 * 1024


def test_bytes_arriving_on_a_reset_stream_are_credited_to_the_connection() -> None:
    """h2 hands those back by itself only once half the window is owed (26 MB by default):
    against a server that keeps to 65,535 bytes, 48 KiB of them would stop every stream.
    The credit is taken from h2's own count of the window, so they are in it."""
    client = new_h2(256 * 1024, 50)
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())  # the client's SETTINGS ACK
    headers = [(":method", "POST"), (":scheme", "https"), (":authority", "x"), (":path", "/")]
    client.send_headers(1, headers, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", "200")])
    for _ in range(5):
        server.send_data(1, b"d" * 10_000)
    in_flight = server.data_to_send()
    client.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    client.data_to_send()
    events = client.receive_data(in_flight)
    assert not [e for e in events if isinstance(e, h2.events.DataReceived)]  # all after reset
    credit = ConnectionCredit(50, 256 * 1024)
    owed = credit.due(client.inbound_flow_control_window)
    assert owed == 50_000
    client.increment_flow_control_window(owed)
    assert client.inbound_flow_control_window == credit.window
    assert window_update(0, 50_000) in client.data_to_send()


def test_a_stream_s_credit_goes_back_in_quarters_of_its_window_and_none_is_lost() -> None:
    credit = StreamCredit(64 * 1024)
    handed = [credit.taken(10_000) for _ in range(10)]
    assert handed == [0, 20_000, 0, 20_000, 0, 20_000, 0, 20_000, 0, 20_000]
    assert credit.taken(5) == 0
    assert credit.owed == 5


def test_only_the_reset_the_client_asked_for_leaves_and_only_once() -> None:
    guard = ResetGuard()
    update = window_update(0, 1000)
    assert guard.filter(rst_stream(1) + update) == update  # not asked for: dropped
    guard.allow(3)
    assert guard.filter(rst_stream(3) + rst_stream(3) + update) == rst_stream(3) + update
    assert guard.filter(rst_stream(3)) == b""
    assert guard.dropped == 3


def test_a_frame_split_across_two_sends_is_judged_whole() -> None:
    guard = ResetGuard()
    frames = window_update(1, 7) + rst_stream(1) + window_update(0, 9)
    out = guard.filter(frames[:14]) + guard.filter(frames[14:])
    assert out == window_update(1, 7) + window_update(0, 9)


def test_h2_s_own_resets_of_frames_on_a_reset_stream_are_all_dropped() -> None:
    """h2 answers each DATA frame on a stream it has reset with another RST_STREAM."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    guard = ResetGuard()
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    headers = [(":method", "POST"), (":scheme", "https"), (":authority", "x"), (":path", "/")]
    client.send_headers(1, headers, end_stream=True)
    server.receive_data(guard.filter(client.data_to_send()))
    server.send_headers(1, [(":status", "200")])
    server.send_data(1, b"a" * 100)
    server.send_data(1, b"b" * 100)
    in_flight = server.data_to_send()
    guard.allow(1)
    client.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    sent = guard.filter(client.data_to_send())
    assert sent == rst_stream(1)[:9] + (8).to_bytes(4, "big")  # one RST_STREAM, CANCEL
    client.receive_data(in_flight)
    assert rst_stream(1)[:5] not in guard.filter(client.data_to_send())
    assert guard.dropped >= 2
