"""arrow_records: Arrow columns as put_many's records, strings sent as UTF-8 bytes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kinesis_actors import errors
from kinesis_actors.producer import arrow_records


def test_string_and_binary_columns_become_bytes_and_null_hash_keys_none() -> None:
    records = arrow_records(
        pa.array(["é", "b"]), pa.array(["k1", "k2"]), pa.array([None, "42"], pa.string())
    )
    assert records == [("é".encode(), "k1", None), (b"b", "k2", "42")]
    chunked = pa.chunked_array(
        [pa.array([b"x"], pa.large_binary()), pa.array([b"y"], pa.large_binary())]
    )
    assert arrow_records(chunked, pa.chunked_array([["a"], ["b"]])) == [
        (b"x", "a", None),
        (b"y", "b", None),
    ]
    assert arrow_records(pa.array(["z"], pa.large_string()), pa.array(["k"])) == [(b"z", "k", None)]


def test_a_null_or_a_length_mismatch_is_a_validation_error_naming_the_row() -> None:
    with pytest.raises(errors.ValidationError, match="partition_keys is null in row 1"):
        arrow_records(pa.array([b"a", b"b"]), pa.array(["k", None]))
    with pytest.raises(errors.ValidationError, match="different lengths"):
        arrow_records(pa.array([b"a"]), pa.array(["k", "j"]))
