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
from ._calls import Entry
from ._handle import Outcomes, PutHandle, PutHandles

__all__ = [
    "KEY_FACTS_LIMIT",
    "batch_entries",
    "key_facts",
    "known_key_facts",
    "prepare_record",
    "valid_key_facts",
]


KEY_FACTS_LIMIT = 65_536
"""How many partition keys' facts are kept (a few MB at most); past it, the keeping starts
over."""

# key -> (size in UTF-8 bytes, hash key). A plain dict emptied when full, not an LRU: on this
# machine a known key costs one dict lookup (inlined by batch_entries) and a new one about
# 800 ns, where through functools.lru_cache they cost 44 and 1,300 (its evictions were half of
# a new key, and with keys that never repeat, such as UUIDs, every key is new).
_known_keys: dict[str, tuple[int, int]] = {}
known_key_facts = _known_keys.get  # the facts of a key seen before, or None: a C call


def key_facts(partition_key: str) -> tuple[int, int]:
    """A valid partition key's ``(size in UTF-8 bytes, hash key)``; ``ValueError`` if it is
    not valid. Kept for the key's next records (see ``KEY_FACTS_LIMIT``)."""
    facts = _known_keys.get(partition_key)
    if facts is None:
        if partition_key.isascii() and 0 < len(partition_key) <= PARTITION_KEY_MAX_CHARS:
            facts = len(partition_key), hash_key(partition_key)
        else:
            validate_partition_key(partition_key)  # raises, naming the limit or the surrogate
            facts = len(partition_key.encode("utf-8")), hash_key(partition_key)
        if len(_known_keys) >= KEY_FACTS_LIMIT:
            _known_keys.clear()
        _known_keys[partition_key] = facts
    return facts


def valid_key_facts(partition_key: str) -> tuple[int, int] | None:
    """:func:`key_facts`, or ``None`` for an invalid key: the put paths' fast way, whose
    slow way (:func:`prepare_record`) raises the typed error. After a miss of
    :data:`known_key_facts`, which they call first (one C call for a known key).

    A short ASCII key, the usual new one, is hashed and kept here, :func:`key_facts`'s first
    branch inlined: with a new key per record (UUIDs) every record comes this way, and the
    two calls were a third of its 0.8 us (measured)."""
    if partition_key.isascii() and 0 < len(partition_key) <= PARTITION_KEY_MAX_CHARS:
        facts = len(partition_key), hash_key(partition_key)
        if len(_known_keys) >= KEY_FACTS_LIMIT:
            _known_keys.clear()
        _known_keys[partition_key] = facts
        return facts
    try:
        return key_facts(partition_key)
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
    one lookup of its key's facts (:func:`key_facts`) and no tuple. Anything else goes
    through :func:`prepare_record`, which raises the typed error.
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
    known = known_key_facts
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
            facts = known(key) or valid_key_facts(key)  # None: prepare_record raises, typed
            if facts is not None:
                size = len(data) + facts[0]
                if size <= limit:
                    entry = spares.pop() if spares else Entry()
                    append(entry.fill(data, key, None, facts[1], size, block, slot, epoch))
                    continue
        try:
            data, size, hashed = prepare_record(data, key, explicit_hash_key, limit, stream)
        except errors.KinesisError as exc:
            raise type(exc)(f"record {index} of the batch: {exc}") from exc
        entry = spares.pop() if spares else Entry()
        append(entry.fill(data, key, explicit_hash_key, hashed, size, block, slot, epoch))
    return entries, outcomes
