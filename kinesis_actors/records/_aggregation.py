"""The KPL aggregation format: many user records packed into one Kinesis record.

Wire format, shared with the KPL, the KCL, Flink and ``aws-kinesis-agg``::

    F3 89 9A C2 | protobuf AggregatedRecord | MD5 of the protobuf bytes (16 bytes)

    message AggregatedRecord {            // proto2
      repeated string partition_key_table = 1;
      repeated string explicit_hash_key_table = 2;
      repeated Record records = 3;
    }
    message Record {
      required uint64 partition_key_index = 1;
      optional uint64 explicit_hash_key_index = 2;
      required bytes data = 3;
      repeated Tag tags = 4;
    }
    message Tag { required string key = 1; optional string value = 2; }

This module holds the format and the encoder (:class:`Aggregator`); ``_deaggregation`` the
decoder. The protobuf encoding is written by hand for this one schema: it sits on the hot path
of both producer and consumer, and the library must not depend on ``protobuf``. Fields are
emitted in field-number order (tables, then records), as protobuf's own serializers do, so the
output is byte-for-byte what ``aws-kinesis-agg`` produces for the same input.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterable
from functools import lru_cache
from itertools import accumulate, chain
from operator import add
from typing import NamedTuple

from ._hashing import (
    PARTITION_KEY_MAX_CHARS,
    hash_key,
    parse_explicit_hash_key,
    validate_partition_key,
)

__all__ = ["DEFAULT_AGGREGATION_MAX_BYTES", "MAGIC", "Aggregator", "OutboundRecord"]

MAGIC = b"\xf3\x89\x9a\xc2"
"""The four bytes every aggregated record starts with."""

DIGEST_SIZE = 16
"""The MD5 of the protobuf bytes that ends every aggregated record."""

_OVERHEAD = len(MAGIC) + DIGEST_SIZE

DEFAULT_AGGREGATION_MAX_BYTES = 51_200
"""The KPL's default ``AggregationMaxSize``: the whole blob, magic and MD5 included."""

# Tags (field number << 3 | wire type) of the schema's fields; all fit one byte. Shared with
# the decoder in _deaggregation.
TAG_PK_TABLE = 0x0A  # AggregatedRecord.partition_key_table, length-delimited
TAG_EHK_TABLE = 0x12  # AggregatedRecord.explicit_hash_key_table, length-delimited
TAG_RECORD = 0x1A  # AggregatedRecord.records, length-delimited
TAG_PK_INDEX = 0x08  # Record.partition_key_index, varint
TAG_EHK_INDEX = 0x10  # Record.explicit_hash_key_index, varint
TAG_DATA = 0x1A  # Record.data, length-delimited
TAG_TAGS = 0x22  # Record.tags, length-delimited
TAG_TAG_KEY = 0x0A  # Tag.key, length-delimited

_SMALL_VARINTS = [bytes((value,)) for value in range(0x80)]

# The least a record adds to an aggregate: its field's tag and length, the key index's tag and
# one byte, the data's tag and length (an empty data).
_MIN_RECORD_BYTES = 6


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if value < 0x80:
        return _SMALL_VARINTS[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_prefixed(tag: int, payload: bytes) -> bytes:
    size = len(payload)
    if size < 0x80:
        return bytes((tag, size)) + payload
    return _SMALL_VARINTS[tag] + _varint(size) + payload


@lru_cache(maxsize=16_384)
def _record_header(pk_index: int, size: int) -> bytes:
    """The bytes before a record's data: its field tag and length, its key index, the data's
    tag and length. Cached: a producer's aggregates reuse the same indexes and sizes."""
    fields = _SMALL_VARINTS[TAG_PK_INDEX] + _varint(pk_index) + _SMALL_VARINTS[TAG_DATA]
    fields += _varint(size)
    return _SMALL_VARINTS[TAG_RECORD] + _varint(len(fields) + size) + fields


# The key table's field tag and length, by length, for keys under 0x80 ASCII characters: such
# a key's entry is one of these plus its bytes. Not cached per key: through an lru_cache a
# call cost 44 ns for a key seen before and 447 for a new one (keys that rarely repeat, such
# as UUIDs, are all new); built each time, 96 ns for any key.
_KEY_ENTRY_PREFIXES = [bytes((TAG_PK_TABLE, size)) for size in range(0x80)]


def _key_table_entry(partition_key: str) -> bytes:
    """A short ASCII partition key's entry in the key table."""
    return _KEY_ENTRY_PREFIXES[len(partition_key)] + partition_key.encode("ascii")


class OutboundRecord(NamedTuple):
    """What to send to ``PutRecord(s)``: data plus the keys that route it to the right shard."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | None
    user_record_count: int


class Aggregator:
    """Packs user records bound for one shard into one Kinesis record, tracking its exact size.

    Sans-IO and incremental: the producer keeps one per predicted shard, asks :meth:`would_fit`
    (or just calls :meth:`add`, which refuses what does not fit), and calls :meth:`build` when the
    aggregate is full or its linger time is up. :attr:`size` is always exactly ``len(build().data)``
    so the producer can also account for request-level limits without encoding.

    Partition keys and explicit hash keys are deduplicated into the protobuf tables in order of
    first appearance. A single buffered record is sent as itself (no magic, no overhead); several
    are sent as one aggregate under the first record's partition key with an explicit hash key
    equal to the first record's hash key, so the aggregate lands on the first record's shard.

    ``max_bytes`` caps the aggregate (magic and MD5 included; KPL default 51,200). One record
    always fits an empty aggregator whatever its size, since it will be sent on its own; checking
    the service's per-record limit is the producer's job.
    """

    __slots__ = (
        "_body_size",
        "_count",
        "_ehk_entries",
        "_ehk_index",
        "_first",
        "_max_bytes",
        "_pk_entries",
        "_pk_index",
        "_record_parts",
    )

    def __init__(self, max_bytes: int = DEFAULT_AGGREGATION_MAX_BYTES) -> None:
        if max_bytes <= _OVERHEAD:
            raise ValueError(f"aggregation max_bytes must exceed {_OVERHEAD}, got {max_bytes}")
        self._max_bytes = max_bytes
        self._pk_index: dict[str, int] = {}
        self._ehk_index: dict[str, int] = {}
        self._pk_entries: list[bytes] = []
        self._ehk_entries: list[bytes] = []
        # The encoded records in order, joined only by build(): a header and a data per record;
        # or, for a run of one size (add_run), its header and the run's datas joined with the
        # header between them. So ``_count`` counts the records.
        self._record_parts: list[bytes] = []
        self._count = 0
        self._body_size = 0
        self._first: tuple[bytes, str, str | None] | None = None

    @property
    def max_bytes(self) -> int:
        """The cap on the aggregate's size in bytes, magic and MD5 included."""
        return self._max_bytes

    def __len__(self) -> int:
        """The number of user records buffered."""
        return self._count

    @property
    def size(self) -> int:
        """Exactly ``len(self.build().data)``; 0 when empty."""
        count = self._count
        if count == 0:
            return 0
        if count == 1:
            assert self._first is not None
            return len(self._first[0])
        return _OVERHEAD + self._body_size

    @property
    def container_size(self) -> int:
        """Exactly ``len(self.build_container())``, even for zero or one record."""
        return _OVERHEAD + self._body_size

    def _encode(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None
    ) -> tuple[bytes | None, bytes | None, bytes, int]:
        """Encode one record against the current tables, validating keys seen for the first time.

        Returns the new partition key table entry (or None), the new explicit hash key table
        entry (or None), the record's header, and how many bytes all three plus data add.
        """
        pk_entry = ehk_entry = None
        added = size = len(data)
        pk_index = self._pk_index.get(partition_key)
        if pk_index is None:
            if not partition_key.isascii() or not 0 < len(partition_key) <= (
                PARTITION_KEY_MAX_CHARS
            ):
                # Non-ASCII keys are counted in UTF-16 code units, as the service counts them;
                # this raises, naming the limit or the lone surrogate.
                validate_partition_key(partition_key)
            encoded = partition_key.encode("utf-8")
            pk_index = len(self._pk_index)
            pk_entry = _length_prefixed(TAG_PK_TABLE, encoded)
            added += len(pk_entry)
        if explicit_hash_key is None:
            header = _record_header(pk_index, size)
            return pk_entry, None, header, added + len(header)
        fields = _SMALL_VARINTS[TAG_PK_INDEX] + _varint(pk_index)
        if explicit_hash_key is not None:
            ehk_index = self._ehk_index.get(explicit_hash_key)
            if ehk_index is None:
                parse_explicit_hash_key(explicit_hash_key)
                ehk_index = len(self._ehk_index)
                ehk_entry = _length_prefixed(TAG_EHK_TABLE, explicit_hash_key.encode("ascii"))
                added += len(ehk_entry)
            fields += _SMALL_VARINTS[TAG_EHK_INDEX] + _varint(ehk_index)
        fields += _SMALL_VARINTS[TAG_DATA] + _varint(size)
        header = _SMALL_VARINTS[TAG_RECORD] + _varint(len(fields) + size) + fields
        added += len(header)
        return pk_entry, ehk_entry, header, added

    def size_if_added(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> int:
        """What :attr:`size` would be after adding this record (validates the keys)."""
        added = self._encode(data, partition_key, explicit_hash_key)[3]
        if not self._count:
            return len(data)
        return _OVERHEAD + self._body_size + added

    def would_fit(
        self, data: bytes, partition_key: str, explicit_hash_key: str | None = None
    ) -> bool:
        """Whether :meth:`add` would accept this record (validates the keys)."""
        size = self.size_if_added(data, partition_key, explicit_hash_key)
        return not self._count or size <= self._max_bytes

    def add(self, data: bytes, partition_key: str, explicit_hash_key: str | None = None) -> bool:
        """Buffer a user record; ``False`` (and nothing changes) if it would exceed ``max_bytes``.

        Raises ``ValueError`` for an invalid partition key or explicit hash key.
        """
        if explicit_hash_key is None:
            # The common record, without an explicit hash key and with a key already in the
            # table or short and ASCII, encoded here without _encode's call and tuple (the
            # same bytes, from the same caches as add_run); anything else below.
            pk_index = self._pk_index.get(partition_key)
            pk_entry = None
            if pk_index is None and partition_key.isascii() and 0 < len(partition_key) < 0x80:
                pk_index = len(self._pk_index)
                pk_entry = _key_table_entry(partition_key)
            if pk_index is not None:
                header = _record_header(pk_index, len(data))
                added = len(data) + len(header)
                if pk_entry is not None:
                    added += len(pk_entry)
                if self._count:
                    if _OVERHEAD + self._body_size + added > self._max_bytes:
                        return False
                else:
                    self._first = (data, partition_key, None)
                if pk_entry is not None:
                    self._pk_index[partition_key] = pk_index
                    self._pk_entries.append(pk_entry)
                self._record_parts += (header, data)
                self._count += 1
                self._body_size += added
                return True
        pk_entry, ehk_entry, header, added = self._encode(data, partition_key, explicit_hash_key)
        if self._count:
            if _OVERHEAD + self._body_size + added > self._max_bytes:
                return False
        else:
            self._first = (data, partition_key, explicit_hash_key)
        if pk_entry is not None:
            self._pk_index[partition_key] = len(self._pk_index)
            self._pk_entries.append(pk_entry)
        if ehk_entry is not None:
            assert explicit_hash_key is not None
            self._ehk_index[explicit_hash_key] = len(self._ehk_index)
            self._ehk_entries.append(ehk_entry)
        self._record_parts += (header, data)
        self._count += 1
        self._body_size += added
        return True

    def add_run(
        self, datas: Iterable[bytes], partition_key: str, explicit_hash_key: str | None = None
    ) -> int:
        """Buffer records that share keys, in order, while they fit: how many were taken.

        The same bytes as an :meth:`add` per record, for the producer's runs of one ordering
        domain, in C calls rather than a step of Python per record: the key is looked up
        once, the headers come from a cache by ``(key index, size)`` and how many fit from a
        running sum, and a run of equal sizes is one ``join`` (see ``docs/producer.md``,
        "Seventh round"). Stops at the first record that does not fit. ``datas`` other than a
        list or tuple is read in full first; of a long list, only as many as the room could
        hold are looked at. Raises ``ValueError`` as :meth:`add` does.
        """
        if type(datas) is not list and type(datas) is not tuple:
            datas = list(datas)
        count = len(datas)
        if count == 0 or explicit_hash_key is not None:
            return self._add_each(datas, partition_key, explicit_hash_key)
        if count == 1:
            return int(self.add(datas[0], partition_key))
        # Plain arithmetic rather than min/max: this runs per domain of every aggregate, and
        # most runs are a few records (measured: the builtins were a third of a short run).
        room = self._max_bytes - _OVERHEAD - self._body_size
        # A record takes at least _MIN_RECORD_BYTES, so no more than this many can fit: the
        # work is bounded by the room, however long the run.
        most = room // _MIN_RECORD_BYTES + 1 if room > 0 else 1
        if count > most:
            datas = datas[:most]
            count = most
        pk_index = self._pk_index.get(partition_key)
        key_entry = b""
        if pk_index is None:
            if not (partition_key.isascii() and 0 < len(partition_key) < 0x80):
                return self._add_each(datas, partition_key)  # validates it, as add does
            pk_index = len(self._pk_index)
            key_entry = _key_table_entry(partition_key)
            room -= len(key_entry)
        first = datas[0]
        size = len(first)
        sizes = list(map(len, datas))
        if sizes.count(size) == count:  # one size (measured: half of max and sum of a map)
            header = _record_header(pk_index, size)
            each = size + len(header)
            taken = room // each if room > 0 else 0
            if taken > count:
                taken = count
            elif taken == 0:
                if self._count:
                    return 0
                taken = 1  # one record always fits an empty aggregator
            if taken == 1:
                self._record_parts += (header, first)
            else:
                run = datas if taken == count else datas[:taken]
                self._record_parts += (header, header.join(run))
            added = taken * each
        else:
            by_size = {size: _record_header(pk_index, size) for size in set(sizes)}
            headers = list(map(by_size.__getitem__, sizes))
            ends = list(accumulate(map(add, map(len, headers), sizes)))  # record bytes so far
            taken = bisect_right(ends, room)
            if taken == 0:
                if self._count:
                    return 0
                taken = 1
            pairs = zip(headers[:taken], datas[:taken], strict=True)
            self._record_parts += chain.from_iterable(pairs)
            added = ends[taken - 1]
        if not self._count:
            self._first = (first, partition_key, None)
        if key_entry:
            self._pk_index[partition_key] = pk_index
            self._pk_entries.append(key_entry)
            added += len(key_entry)
        self._count += taken
        self._body_size += added
        return taken

    def _add_each(
        self, datas: Iterable[bytes], partition_key: str, explicit_hash_key: str | None = None
    ) -> int:
        """:meth:`add_run` one :meth:`add` at a time (keys the fast way does not cover)."""
        taken = 0
        add = self.add
        for data in datas:
            if not add(data, partition_key, explicit_hash_key):
                break
            taken += 1
        return taken

    def build_container(self) -> bytes:
        """The buffered records in the aggregated format, even if there are zero or one."""
        body = b"".join((*self._pk_entries, *self._ehk_entries, *self._record_parts))
        digest = hashlib.md5(body, usedforsecurity=False).digest()
        return b"".join((MAGIC, body, digest))

    def build(self) -> OutboundRecord:
        """The record to send: the lone record as itself, or the aggregate. Raises if empty.

        The aggregator is left as it was; call :meth:`reset` to start the next one.
        """
        first = self._first
        count = self._count
        if count == 0 or first is None:
            raise ValueError("cannot build a record from an empty aggregator")
        data, partition_key, explicit_hash_key = first
        if count == 1:
            return OutboundRecord(data, partition_key, explicit_hash_key, 1)
        if explicit_hash_key is None:
            explicit_hash_key = str(hash_key(partition_key))
        return OutboundRecord(self.build_container(), partition_key, explicit_hash_key, count)

    def reset(self) -> None:
        """Forget every buffered record, keeping ``max_bytes``."""
        self._pk_index.clear()
        self._ehk_index.clear()
        self._pk_entries.clear()
        self._ehk_entries.clear()
        self._record_parts.clear()
        self._count = 0
        self._body_size = 0
        self._first = None
