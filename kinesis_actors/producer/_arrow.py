"""Arrow columns as records for ``put_many``: the Spark sink's batches, or any Arrow data.

Strings become bytes inside Arrow (one cast of the column, sent as UTF-8) rather than one
``str.encode`` per record, then each column turns into a Python list once; the records are
zipped from those lists. ``put_many`` validates them as it validates any record.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import pyarrow as pa

from .. import errors

__all__ = ["arrow_records"]


def arrow_records(
    data: pa.Array | pa.ChunkedArray,
    partition_keys: pa.Array | pa.ChunkedArray,
    explicit_hash_keys: pa.Array | pa.ChunkedArray | None = None,
) -> list[tuple[Any, Any, Any]]:
    """``(data, partition_key, explicit_hash_key)`` per row, for :meth:`Producer.put_many`.

    ``data`` is binary or string (sent as UTF-8), the keys strings; a null data or key
    raises :class:`~kinesis_actors.errors.ValidationError` naming the row, as do columns of
    different lengths. A null explicit hash key means none.
    """
    if len(partition_keys) != len(data) or (
        explicit_hash_keys is not None and len(explicit_hash_keys) != len(data)
    ):
        raise errors.ValidationError(
            f"arrow_records: columns of different lengths ({len(data)} data, "
            f"{len(partition_keys)} partition keys"
            + ("" if explicit_hash_keys is None else f", {len(explicit_hash_keys)} hash keys")
            + ")"
        )
    for name, column in (("data", data), ("partition_keys", partition_keys)):
        if column.null_count:
            row = column.to_pylist().index(None)
            raise errors.ValidationError(f"arrow_records: {name} is null in row {row}")
    if pa.types.is_large_string(data.type):
        data = data.cast(pa.large_binary())
    elif pa.types.is_string(data.type):
        data = data.cast(pa.binary())
    hash_keys = repeat(None) if explicit_hash_keys is None else explicit_hash_keys.to_pylist()
    return list(zip(data.to_pylist(), partition_keys.to_pylist(), hash_keys, strict=False))
