"""Hypothesis strategies shared by the record tests."""

from __future__ import annotations

import hashlib

from hypothesis import strategies as st

from kinesis_actors.records import MAGIC, MAX_HASH_KEY

UserRecordInput = tuple[bytes, str, str | None]
"""(data, partition_key, explicit_hash_key), the arguments of ``Aggregator.add``."""

# Hypothesis leaves surrogates out of text() by default, so every key encodes as UTF-8.
partition_keys = st.text(min_size=1, max_size=256)
explicit_hash_keys = st.integers(0, MAX_HASH_KEY).map(str)


@st.composite
def user_records(
    draw: st.DrawFn,
    *,
    min_records: int = 0,
    max_records: int = 40,
    max_data: int = 300,
    ehk_mode: str = "mixed",
) -> list[UserRecordInput]:
    """User records whose keys come from small pools, so tables get deduplicated.

    ``ehk_mode`` is "mixed" (some records have an explicit hash key), "all" or "none".
    """
    pks = draw(st.lists(partition_keys, min_size=1, max_size=6))
    ehks = draw(st.lists(explicit_hash_keys, min_size=1, max_size=4))
    count = draw(st.integers(min_records, max_records))
    records = []
    for _ in range(count):
        data = draw(st.binary(max_size=max_data))
        pk = draw(st.sampled_from(pks))
        if ehk_mode == "none":
            ehk = None
        elif ehk_mode == "all":
            ehk = draw(st.sampled_from(ehks))
        else:
            ehk = draw(st.none() | st.sampled_from(ehks))
        records.append((data, pk, ehk))
    return records


def wrap(body: bytes) -> bytes:
    """An aggregate around an arbitrary protobuf payload, with a correct MD5."""
    return MAGIC + body + hashlib.md5(body).digest()
