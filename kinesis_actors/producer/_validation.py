"""Checking a record before it takes room in the queue: typed errors, at ``put``, at once."""

from __future__ import annotations

from functools import lru_cache

from .. import errors
from ..records import hash_key, parse_explicit_hash_key, validate_partition_key

__all__ = ["key_facts", "prepare_record"]


@lru_cache(maxsize=65_536)
def key_facts(partition_key: str) -> tuple[int, int]:
    """A valid partition key's ``(size in UTF-8 bytes, hash key)``; ``ValueError`` if it is
    not valid. Cached (keys repeat): a hit costs one C call and allocates nothing."""
    validate_partition_key(partition_key)
    return len(partition_key.encode("utf-8")), hash_key(partition_key)


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
