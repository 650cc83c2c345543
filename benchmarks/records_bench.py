"""Throughput of the record layer, side by side with ``aws-kinesis-agg`` where it has an equivalent.

    .venv/bin/python benchmarks/records_bench.py [--quick] [--json]

Measures KPL aggregation (encode), deaggregation (decode), and building Arrow batches from
10,000-record responses, plain and aggregated. Each figure is the best of several repeats,
interleaved across the variants compared. ``md5_only`` is the cost of hashing the aggregates
alone, a floor under any encoder or decoder of the format.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import json
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from kinesis_actors.records import (
    DEFAULT_AGGREGATION_MAX_BYTES,
    RECORD_SCHEMA,
    Aggregator,
    build_record_batch,
    deaggregate,
    deaggregate_into,
)

try:
    import aws_kinesis_agg.aggregator as agg_aggregator
    import aws_kinesis_agg.deaggregator as agg_deaggregator
except ImportError:  # the comparison is optional; our own figures do not need it
    agg_aggregator = agg_deaggregator = None

KEY_POOL = 1000  # distinct partition keys cycling through the user records


def _compare(count: int, variants: dict[str, Callable[[], object]], repeats: int) -> dict[str, Any]:
    """Rates of each variant over ``count`` records: the best of ``repeats`` runs.

    Repeats are interleaved across variants so that a busy machine slows them alike.
    """
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(repeats):
        for name, function in variants.items():
            start = time.perf_counter()
            function()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: _rate(count, seconds) for name, seconds in best.items()}


def _rate(count: int, seconds: float) -> dict[str, float]:
    return {"records_per_s": count / seconds, "us_per_record": seconds / count * 1e6}


def _user_records(count: int, size: int) -> list[tuple[bytes, str]]:
    rng = random.Random(size)
    payloads = [rng.randbytes(size) for _ in range(16)]
    return [(payloads[i % 16], f"user-{i % KEY_POOL:06d}") for i in range(count)]


def _encode_ours(records: list[tuple[bytes, str]]) -> list[bytes]:
    out = []
    aggregator = Aggregator(DEFAULT_AGGREGATION_MAX_BYTES)
    for data, key in records:
        if not aggregator.add(data, key):
            out.append(aggregator.build().data)
            aggregator.reset()
            aggregator.add(data, key)
    out.append(aggregator.build().data)
    return out


def _encode_theirs(records: list[tuple[bytes, str]]) -> list[bytes]:
    out = []
    aggregator = agg_aggregator.RecordAggregator(DEFAULT_AGGREGATION_MAX_BYTES)
    for data, key in records:
        full = aggregator.add_user_record(key, data)
        if full is not None:
            out.append(full.get_contents()[2])
    last = aggregator.clear_and_get()
    if last is not None:
        out.append(last.get_contents()[2])
    return out


def bench_encode(count: int, size: int, repeats: int) -> dict[str, Any]:
    records = _user_records(count, size)
    blobs = _encode_ours(records)
    variants: dict[str, Callable[[], object]] = {"ours": lambda: _encode_ours(records)}
    if agg_aggregator is not None:
        variants["aws_kinesis_agg"] = lambda: _encode_theirs(records)
    # The floor under both: hashing the aggregates' bytes, which the format requires.
    variants["md5_only"] = lambda: [hashlib.md5(memoryview(b)[4:-16]).digest() for b in blobs]
    return {
        "user_records": count,
        "record_bytes": size,
        "aggregates": len(blobs),
        **_compare(count, variants, repeats),
    }


def _raw_records(blobs: list[bytes], key: str = "outer") -> list[dict[str, Any]]:
    start = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    return [
        {
            "SequenceNumber": str(49_600_000_000_000_000_000_000_000_000_000_000_000_000 + i),
            "ApproximateArrivalTimestamp": start + timedelta(milliseconds=i // 100),
            "Data": blob,
            "PartitionKey": key,
        }
        for i, blob in enumerate(blobs)
    ]


def bench_decode(count: int, size: int, repeats: int) -> dict[str, Any]:
    blobs = _encode_ours(_user_records(count, size))

    # Every variant keeps what it decoded, as a consumer building a batch does: freeing each
    # aggregate's records at once would let the allocator recycle buffers and flatter it.
    def ours_records() -> None:
        kept = []
        for blob in blobs:
            kept.append(deaggregate(blob, "outer"))

    def ours_columns() -> None:
        pks: list[str] = []
        ehks: list[str | None] = []
        datas: list[bytes] = []
        for blob in blobs:
            deaggregate_into(blob, pks, ehks, datas)

    variants: dict[str, Callable[[], object]] = {
        "ours_user_records": ours_records,
        "ours_columnar": ours_columns,
    }
    if agg_deaggregator is not None:
        raw = _raw_records(blobs)
        variants["aws_kinesis_agg"] = lambda: list(
            agg_deaggregator.iter_deaggregate_records(raw, data_format="Boto3")
        )
    variants["md5_only"] = lambda: [hashlib.md5(memoryview(b)[4:-16]).digest() for b in blobs]
    return {
        "user_records": count,
        "record_bytes": size,
        "aggregates": len(blobs),
        **_compare(count, variants, repeats),
    }


def _theirs_to_arrow(raw: list[dict[str, Any]]) -> pa.RecordBatch:
    """The nearest equivalent with aws-kinesis-agg: deaggregate, then build rows into a batch."""
    rows = []
    for record in agg_deaggregator.iter_deaggregate_records(raw, data_format="Boto3"):
        fields = record["kinesis"]
        aggregated = fields.get("aggregated", False)
        rows.append(
            {
                "stream": "stream",
                "shard_id": "shardId-000000000000",
                "sequence_number": fields["sequenceNumber"],
                "sub_sequence_number": fields.get("subSequenceNumber", 0),
                "partition_key": fields["partitionKey"],
                "explicit_hash_key": fields.get("explicitHashKey"),
                "approximate_arrival_timestamp": fields["approximateArrivalTimestamp"],
                # Their deaggregator re-encodes aggregated data as base64, Lambda style.
                "data": base64.b64decode(fields["data"]) if aggregated else fields["data"],
            }
        )
    return pa.RecordBatch.from_pylist(rows, schema=RECORD_SCHEMA)


def bench_arrow(count: int, size: int, repeats: int) -> dict[str, Any]:
    user = _user_records(count, size)
    plain = _raw_records([data for data, _ in user])
    aggregated = _raw_records(_encode_ours(user))
    result: dict[str, Any] = {"user_records": count, "record_bytes": size}
    for name, raw in (("plain", plain), ("aggregated", aggregated)):
        assert build_record_batch("stream", "shard", raw).batch.num_rows == count
        variants: dict[str, Callable[[], object]] = {
            "ours": functools.partial(build_record_batch, "stream", "shard", raw)
        }
        if agg_deaggregator is not None:
            assert _theirs_to_arrow(raw).num_rows == count
            variants["aws_kinesis_agg_plus_from_pylist"] = functools.partial(_theirs_to_arrow, raw)
        result[name] = {"kinesis_records": len(raw), **_compare(count, variants, repeats)}
    return result


def run(quick: bool) -> dict[str, Any]:
    """Run every benchmark; ``quick`` uses fewer records and repeats (a smoke test, ~seconds)."""
    repeats = 3 if quick else 9
    small, large = (20_000, 1_000) if quick else (200_000, 10_000)
    return {
        "python": sys.version.split()[0],
        "pyarrow": pa.__version__,
        "encode_100B": bench_encode(small, 100, repeats),
        "encode_10KiB": bench_encode(large, 10 * 1024, repeats),
        "decode_100B": bench_decode(small, 100, repeats),
        "decode_10KiB": bench_decode(large, 10 * 1024, repeats),
        "arrow_10k_100B": bench_arrow(10_000, 100, repeats),
    }


def _rate_line(label: str, rate: dict[str, float], indent: int) -> str:
    return (
        f"{' ' * indent}{label:<{36 - indent}} {rate['records_per_s']:>12,.0f} rec/s"
        f" {rate['us_per_record']:>8.2f} us/rec"
    )


def _print(results: dict[str, Any]) -> None:
    print(f"python {results['python']}, pyarrow {results['pyarrow']}")
    for name, section in results.items():
        if not isinstance(section, dict):
            continue
        print(f"\n{name}")
        for key, value in section.items():
            if not isinstance(value, dict):
                continue
            if "records_per_s" in value:
                print(_rate_line(key, value, 2))
                continue
            print(f"  {key} ({value['kinesis_records']} Kinesis records)")
            for inner_key, inner in value.items():
                if isinstance(inner, dict):
                    print(_rate_line(inner_key, inner, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer records and repeats")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    results = run(args.quick)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(results)


if __name__ == "__main__":
    main()
