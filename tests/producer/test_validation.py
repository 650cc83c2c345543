"""A partition key's facts (size and hash key); its hash key is kept for its next records,
bounded."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_actors.producer import _validation
from kinesis_actors.producer._validation import KEY_FACTS_LIMIT, key_facts
from kinesis_actors.records import hash_key, validate_partition_key


@given(st.text(min_size=0, max_size=300))
def test_key_facts_are_the_keys_size_and_hash_or_its_validation_error(key: str) -> None:
    try:
        validate_partition_key(key)
    except ValueError as expected:
        with pytest.raises(ValueError, match=re.escape(str(expected))):
            key_facts(key)
        assert _validation.valid_hash_key(key) is None
        assert key not in _validation._known_keys  # a bad key is never kept
    else:
        assert key_facts(key) == (len(key.encode("utf-8")), hash_key(key))
        assert _validation.known_hash_key(key) == key_facts(key)[1]
        assert _validation.valid_hash_key(key) == hash_key(key)


@pytest.mark.parametrize(
    "key", ["a" * 256, "é" * 256, "😀" * 128], ids=["ascii", "two-byte", "emoji"]
)
def test_keys_at_the_limit_are_valid_whatever_their_bytes(key: str) -> None:
    assert key_facts(key) == (len(key.encode("utf-8")), hash_key(key))


@pytest.mark.parametrize("key", ["", "a" * 257, "😀" * 129, "\ud800"])
def test_keys_the_service_refuses_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="partition key"):
        key_facts(key)


def test_the_kept_facts_are_bounded() -> None:
    """Keys that never repeat (UUIDs) cannot grow what is kept past KEY_FACTS_LIMIT."""
    for index in range(KEY_FACTS_LIMIT + 1_000):
        key_facts(f"new-{index}")
        assert len(_validation._known_keys) <= KEY_FACTS_LIMIT
    assert key_facts("new-0") == (5, hash_key("new-0"))  # forgotten, then found again
