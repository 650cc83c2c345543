"""Decoding the KPL aggregation format (see ``_aggregation`` for the wire format).

Consumers cannot trust that a record starting with the magic is an aggregate: any producer may
send any bytes. So decoding is all-or-nothing: a blob is expanded only if its MD5 matches and
the whole payload parses as a valid ``AggregatedRecord`` (required fields present, table indexes
in range); otherwise it is one plain record, as the KCL treats it. Unknown fields are skipped, as
protobuf parsers do, so aggregates from newer producers still decode.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from ._aggregation import (
    DIGEST_SIZE,
    MAGIC,
    TAG_DATA,
    TAG_EHK_INDEX,
    TAG_EHK_TABLE,
    TAG_PK_INDEX,
    TAG_PK_TABLE,
    TAG_RECORD,
    TAG_TAG_KEY,
    TAG_TAGS,
)

__all__ = ["UserRecord", "deaggregate", "deaggregate_into", "is_aggregated"]

_OVERHEAD = len(MAGIC) + DIGEST_SIZE
_MAX_FIELD_NUMBER = 2**29 - 1
_LENGTH_DELIMITED_TOP_LEVEL = frozenset((TAG_PK_TABLE, TAG_EHK_TABLE, TAG_RECORD))


class UserRecord(NamedTuple):
    """One user record recovered from a Kinesis record.

    ``sub_sequence_number`` is the record's index in its aggregate (0 for a plain record); with
    the Kinesis record's sequence number it identifies the user record for checkpointing.
    """

    partition_key: str
    explicit_hash_key: str | None
    data: bytes
    sub_sequence_number: int


class _Malformed(Exception):
    """The protobuf payload does not parse as an AggregatedRecord."""


def _varint_tail(buf: bytes, pos: int, first: int, limit: int) -> tuple[int, int]:
    """Finish a varint whose first byte (continuation bit set) was just read at ``pos - 1``."""
    value = first & 0x7F
    shift = 7
    while True:
        if pos >= limit or shift > 63:
            raise _Malformed
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _read_varint(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    if pos >= limit:
        raise _Malformed
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    return _varint_tail(buf, pos + 1, byte, limit)


def _read_length(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """Read a length prefix; returns (start, end) of the payload, checked against ``limit``."""
    length, pos = _read_varint(buf, pos, limit)
    end = pos + length
    if end > limit:
        raise _Malformed
    return pos, end


def _skip_field(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """Skip the field whose tag starts at ``pos``; returns (tag, position after the field).

    Unknown fields are skipped as protobuf parsers do. Groups (wire types 3 and 4) are
    deprecated, never written by any KPL, and refused as malformed.
    """
    tag, pos = _read_varint(buf, pos, limit)
    wire_type = tag & 7
    if not 1 <= tag >> 3 <= _MAX_FIELD_NUMBER:
        raise _Malformed
    if wire_type == 0:
        return tag, _read_varint(buf, pos, limit)[1]
    if wire_type == 2:
        return tag, _read_length(buf, pos, limit)[1]
    size = 8 if wire_type == 1 else 4 if wire_type == 5 else 0
    if size == 0 or pos + size > limit:
        raise _Malformed
    return tag, pos + size


def _check_tag(buf: bytes, pos: int, limit: int) -> None:
    """Validate a Tag message: well-formed, with its required key present."""
    has_key = False
    while pos < limit:
        tag, pos = _skip_field(buf, pos, limit)
        has_key = has_key or tag == TAG_TAG_KEY
    if not has_key:
        raise _Malformed


def _parse_record(buf: bytes, pos: int, end: int) -> tuple[int, int, bytes]:
    """Parse a Record message in ``buf[pos:end]`` in full generality.

    Returns (partition key index, explicit hash key index or -1, data).
    """
    pk_index = ehk_index = -1
    data: bytes | None = None
    while pos < end:
        tag = buf[pos]
        if tag == TAG_PK_INDEX:
            pk_index, pos = _read_varint(buf, pos + 1, end)
        elif tag == TAG_EHK_INDEX:
            ehk_index, pos = _read_varint(buf, pos + 1, end)
        elif tag == TAG_DATA:
            start, pos = _read_length(buf, pos + 1, end)
            data = buf[start:pos]
        elif tag == TAG_TAGS:
            start, pos = _read_length(buf, pos + 1, end)
            _check_tag(buf, start, pos)
        else:
            pos = _skip_field(buf, pos, end)[1]
    if pk_index < 0 or data is None:
        raise _Malformed
    return pk_index, ehk_index, data


def _decode(buf: bytes, pos: int, limit: int) -> tuple[list[str], list[str | None], list[bytes]]:
    """Parse the AggregatedRecord in ``buf[pos:limit]`` into its user records' columns.

    ``buf`` must extend at least 16 bytes past ``limit`` (the MD5 does): the fast paths peek
    a few bytes ahead before checking bounds. Raises ``_Malformed`` or ``IndexError`` (a table
    index out of range).
    """
    pk_table: list[str] = []
    ehk_table: list[str] = []
    pk_indexes: list[int] = []
    ehk_indexes: list[int] = []  # -1 where the record has no explicit hash key
    datas: list[bytes] = []
    any_ehk = False
    # Everything below is inlined varint reading with a fast path for the layout every
    # encoder writes (08 pk [10 ehk] 1A len data, one-byte indexes): it runs once per user
    # record and function calls would double its cost. Anything else takes _parse_record.
    while pos < limit:
        tag = buf[pos]
        if tag not in _LENGTH_DELIMITED_TOP_LEVEL:
            pos = _skip_field(buf, pos, limit)[1]
            continue
        length = buf[pos + 1]
        if length < 0x80:
            start = pos + 2
        else:
            length, start = _varint_tail(buf, pos + 2, length, limit)
        pos = start + length
        if pos > limit:
            raise _Malformed
        if tag == TAG_RECORD:
            at = start
            if buf[at] == TAG_PK_INDEX and buf[at + 1] < 0x80:
                pk_index = buf[at + 1]
                ehk_index = -1
                at += 2
                if buf[at] == TAG_EHK_INDEX and buf[at + 1] < 0x80:
                    ehk_index = buf[at + 1]
                    any_ehk = True
                    at += 2
                if buf[at] == TAG_DATA and at < pos:
                    size = buf[at + 1]
                    if size < 0x80:
                        at += 2
                    else:
                        size, at = _varint_tail(buf, at + 2, size, pos)
                    if at + size == pos:
                        pk_indexes.append(pk_index)
                        ehk_indexes.append(ehk_index)
                        datas.append(buf[at:pos])
                        continue
            pk_index, ehk_index, data = _parse_record(buf, start, pos)
            pk_indexes.append(pk_index)
            ehk_indexes.append(ehk_index)
            datas.append(data)
            any_ehk = any_ehk or ehk_index >= 0
        elif tag == TAG_PK_TABLE:
            # proto2 does not validate UTF-8; like the KCL (Java), substitute rather than fail.
            pk_table.append(buf[start:pos].decode("utf-8", "replace"))
        else:
            ehk_table.append(buf[start:pos].decode("utf-8", "replace"))
    pks = [pk_table[index] for index in pk_indexes]
    ehks: list[str | None]
    if any_ehk:
        ehks = [ehk_table[index] if index >= 0 else None for index in ehk_indexes]
    else:
        ehks = [None] * len(datas)
    return pks, ehks, datas


def is_aggregated(data: bytes) -> bool:
    """Whether ``data`` starts with the magic and carries a matching MD5 (the payload may still
    fail to parse, in which case :func:`deaggregate` treats it as a plain record)."""
    if len(data) < _OVERHEAD or data[:4] != MAGIC:
        return False
    digest = hashlib.md5(memoryview(data)[4:-DIGEST_SIZE], usedforsecurity=False).digest()
    return digest == data[-DIGEST_SIZE:]


def deaggregate_into(
    data: bytes,
    partition_keys: list[str],
    explicit_hash_keys: list[str | None],
    datas: list[bytes],
) -> int | None:
    """Columnar deaggregation: append the user records of an aggregate to three lists.

    Returns how many were appended (possibly 0 for an aggregate of no records), or ``None``
    when ``data`` is not a valid aggregate (no magic, MD5 mismatch, truncated, malformed
    protobuf, table index out of range): then nothing is appended, and the caller should
    deliver ``data`` as one plain record with the Kinesis record's own keys. User record ``i``
    has sub-sequence number ``i``.
    """
    if not is_aggregated(data):
        return None
    try:
        pks, ehks, found = _decode(data, len(MAGIC), len(data) - DIGEST_SIZE)
    except (_Malformed, IndexError):
        return None
    partition_keys += pks
    explicit_hash_keys += ehks
    datas += found
    return len(found)


def deaggregate(
    data: bytes, partition_key: str, explicit_hash_key: str | None = None
) -> list[UserRecord]:
    """The user records in one Kinesis record's data.

    ``partition_key`` and ``explicit_hash_key`` are the Kinesis record's own; they are used only
    when ``data`` is not a valid aggregate, in which case it comes back as one record with
    sub-sequence number 0.
    """
    pks: list[str] = []
    ehks: list[str | None] = []
    datas: list[bytes] = []
    if deaggregate_into(data, pks, ehks, datas) is None:
        return [UserRecord(partition_key, explicit_hash_key, data, 0)]
    return list(map(UserRecord, pks, ehks, datas, range(len(datas))))
