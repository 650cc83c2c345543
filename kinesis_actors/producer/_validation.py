"""Checking a record before it takes room in the queue: typed errors, at ``put``, at once;
and a batch for ``put_many``, every record before any is queued."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .. import errors
from ..records import (
    PARTITION_KEY_MAX_CHARS,
    hash_key,
    parse_explicit_hash_key,
    validate_partition_key,
)
from ._entry import Entry
from ._handle import Outcomes, PutHandle, PutHandles

__all__ = [
    "KEY_FACTS_LIMIT",
    "batch_entries",
    "key_facts",
    "key_size",
    "known_hash_key",
    "prepare_record",
    "valid_hash_key",
]


KEY_FACTS_LIMIT = 65_536
"""How many partition keys' hash keys are kept (a few MB at most); past it, the keeping
starts over."""

# key -> hash key. A plain dict emptied when full, not an LRU: on this machine a known key
# costs one dict lookup (inlined by the put paths) and a new one about 500 ns, where through
# functools.lru_cache they cost 44 and 1,300 (its evictions were half of a new key, and with
# keys that never repeat, such as UUIDs, every key is new). The key's size is not kept with
# it: a (size, hash key) tuple per new key was an allocation the collector counts, and with
# a new key per record those set off a young collection every 700 records (measured: 0.64 us
# a record in collections, 0.30 without them). An ASCII key's size is its length.
_known_keys: dict[str, int] = {}
known_hash_key = _known_keys.get  # the hash key of a valid key seen before, or None: a C call


def key_size(partition_key: str) -> int:
    """A partition key's size in UTF-8 bytes, as the service counts it against the limits."""
    return len(partition_key) if partition_key.isascii() else len(partition_key.encode("utf-8"))


def key_facts(partition_key: str) -> tuple[int, int]:
    """A valid partition key's ``(size in UTF-8 bytes, hash key)``; ``ValueError`` if it is
    not valid. Its hash key is kept for its next records (see ``KEY_FACTS_LIMIT``)."""
    hashed = _known_keys.get(partition_key)
    if hashed is None:
        if not (partition_key.isascii() and 0 < len(partition_key) <= PARTITION_KEY_MAX_CHARS):
            validate_partition_key(partition_key)  # raises, naming the limit or the surrogate
        hashed = hash_key(partition_key)
        if len(_known_keys) >= KEY_FACTS_LIMIT:
            _known_keys.clear()
        _known_keys[partition_key] = hashed
    return key_size(partition_key), hashed


def valid_hash_key(partition_key: str) -> int | None:
    """A valid key's hash key, kept (as :func:`key_facts` keeps it), or ``None`` for an
    invalid key: the put paths' fast way, whose slow way (:func:`prepare_record`) raises the
    typed error. After a miss of :data:`known_hash_key`, which they call first (one C call
    for a known key).

    A short ASCII key, the usual new one, is hashed and kept here without a further call:
    with a new key per record (UUIDs) every record comes this way, and the two calls of
    ``key_facts`` were a third of its 0.8 us (measured)."""
    if partition_key.isascii() and 0 < len(partition_key) <= PARTITION_KEY_MAX_CHARS:
        hashed = hash_key(partition_key)
        if len(_known_keys) >= KEY_FACTS_LIMIT:
            _known_keys.clear()
        _known_keys[partition_key] = hashed
        return hashed
    try:
        return key_facts(partition_key)[1]
    except ValueError:
        return None


def prepare_record(
    data: bytes,
    partition_key: str,
    explicit_hash_key: str | None,
    max_record_bytes: int,
    stream: str,
) -> tuple[bytes, int, int]:
    """``(data as bytes, size counted against the limits, hash key)``, or a typed error.

    The size is the data plus the UTF-8 partition key, as the service counts it against the
    record limit (``MaxRecordSizeInKiB``, 1 MiB by default) and the call limit. Partition
    keys are validated and hashed through small caches, since real workloads repeat them.
    """
    if not isinstance(data, bytes):
        if isinstance(data, bytearray | memoryview):
            data = bytes(data)
        else:
            raise errors.ValidationError(
                f"data must be bytes, got {type(data).__name__} (encode text first)"
            )
    if not data:
        raise errors.ValidationError("data must not be empty")
    if not isinstance(partition_key, str):
        raise errors.ValidationError(
            f"partition_key must be a str, got {type(partition_key).__name__}"
        )
    if explicit_hash_key is not None and not isinstance(explicit_hash_key, str):
        raise errors.ValidationError(
            f"explicit_hash_key must be a str or None, got {explicit_hash_key!r}"
        )
    try:
        key_size, hashed = key_facts(partition_key)
        if explicit_hash_key is not None:
            hashed = parse_explicit_hash_key(explicit_hash_key)
    except ValueError as exc:
        raise errors.ValidationError(str(exc)) from None
    size = len(data) + key_size
    if size > max_record_bytes:
        raise errors.RecordTooLargeError(
            f"record of {len(data)} data bytes plus a {key_size}-byte partition key "
            f"exceeds the {max_record_bytes}-byte limit of stream {stream!r}"
        )
    return data, size, hashed


def batch_entries(
    records: Iterable[Sequence[Any]],
    handles: Sequence[PutHandle] | None,
    max_record_bytes: int,
    stream: str,
    epoch: int,
    *,
    spares: list[Entry],
) -> tuple[list[Entry], Outcomes | None]:
    """Validate a batch for ``put_many``: an entry per record (refilled from ``spares``
    first), or the typed error of the first bad one, naming its index. The entries settle
    into a new :class:`~._handle.Outcomes` for the batch, returned with them; or, when
    ``handles`` are given (one per record), into those, and the outcomes are ``None``. A
    count that does not match is a :class:`~kinesis_actors.errors.ValidationError`.

    One pass; a ``(bytes, str)`` record (or ``(bytes, str, None)``) within the limit costs
    one lookup of its key's hash key (:func:`valid_hash_key` when new) and no tuple.
    Anything else goes through :func:`prepare_record`, which raises the typed error.
    """
    if not isinstance(records, list | tuple):
        records = list(records)
    limit = max_record_bytes
    entries: list[Entry] = []
    append = entries.append
    outcomes = Outcomes(len(records)) if handles is None else None
    if handles is not None and len(handles) != len(records):
        raise errors.ValidationError(
            f"put_many got {len(handles)} handles for {len(records)} records"
        )
    # The slots to settle: the batch's own, those of a PutHandles, or each given handle's.
    shared = outcomes if handles is None else None
    if isinstance(handles, PutHandles):
        shared = handles._outcomes
    known = known_hash_key
    for index, record in enumerate(records):
        if shared is not None:
            block, slot = shared, index
        else:
            assert handles is not None
            handle = handles[index]
            block, slot = handle._outcomes, handle._slot
        if len(record) == 2:
            data, key = record
            explicit_hash_key = None
        elif len(record) == 3:
            data, key, explicit_hash_key = record
        else:
            raise errors.ValidationError(
                f"record {index} of the batch: expected (data, partition_key[, "
                f"explicit_hash_key]), got {len(record)} fields"
            )
        # exact types: no subclass; a third field of None is no explicit hash key
        if explicit_hash_key is None and type(key) is str and type(data) is bytes and data:
            hashed = known(key)
            if hashed is None:
                hashed = valid_hash_key(key)  # None: prepare_record raises, typed
            if hashed is not None:
                size = len(data) + (len(key) if key.isascii() else key_size(key))
                if size <= limit:
                    entry = spares.pop() if spares else Entry()
                    append(entry.fill(data, key, None, hashed, size, block, slot, epoch))
                    continue
        try:
            data, size, hashed = prepare_record(data, key, explicit_hash_key, limit, stream)
        except errors.KinesisError as exc:
            raise type(exc)(f"record {index} of the batch: {exc}") from exc
        entry = spares.pop() if spares else Entry()
        append(entry.fill(data, key, explicit_hash_key, hashed, size, block, slot, epoch))
    return entries, outcomes
