"""Encoding ``application/vnd.amazon.eventstream`` messages (what SubscribeToShard sends).

A message is a prelude (total length, headers length, CRC32 of those 8 bytes), the headers,
the payload and a CRC32 of everything before it. Header values here are all strings (type 7).
"""

from __future__ import annotations

import json
import struct
from zlib import crc32

__all__ = ["encode_event", "encode_exception", "encode_message", "initial_response"]

_PRELUDE = struct.Struct(">II")
_CRC = struct.Struct(">I")


def _header(name: str, value: str) -> bytes:
    raw_name = name.encode()
    raw_value = value.encode()
    return (
        bytes([len(raw_name)]) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value
    )


def _headers(pairs: tuple[tuple[str, str], ...]) -> bytes:
    return b"".join(_header(name, value) for name, value in pairs)


_EVENT_HEADERS = _headers(
    (
        (":message-type", "event"),
        (":event-type", "SubscribeToShardEvent"),
        (":content-type", "application/json"),
    )
)
_INITIAL_HEADERS = _headers(
    (
        (":message-type", "event"),
        (":event-type", "initial-response"),
        (":content-type", "application/json"),
    )
)


def encode_message(headers: bytes, payload: bytes) -> bytes:
    """One message from encoded headers and a payload."""
    total = _PRELUDE.size + 4 + len(headers) + len(payload) + 4
    prelude = _PRELUDE.pack(total, len(headers))
    prelude_crc = crc32(prelude)
    head = prelude + _CRC.pack(prelude_crc)
    message_crc = crc32(payload, crc32(headers, crc32(head)))
    return b"".join((head, headers, payload, _CRC.pack(message_crc)))


def encode_event(payload: bytes) -> bytes:
    """A ``SubscribeToShardEvent`` carrying ``payload`` (its JSON)."""
    return encode_message(_EVENT_HEADERS, payload)


def initial_response() -> bytes:
    """The ``initial-response`` event real Kinesis sends first."""
    return encode_message(_INITIAL_HEADERS, b"{}")


def encode_exception(code: str, message: str) -> bytes:
    """An exception event (``:message-type: exception``), e.g. ``ResourceInUseException``."""
    headers = _headers(
        (
            (":message-type", "exception"),
            (":exception-type", code),
            (":content-type", "application/json"),
        )
    )
    return encode_message(headers, json.dumps({"message": message}).encode())
