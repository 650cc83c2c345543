"""The stream the target serves: shards, hash ranges, sequence numbers, retained records.

Sequence numbers are 56 decimal digits: a 36-digit prefix naming the shard, then a 20-digit
per-shard counter, so they compare correctly as integers and as strings, and the counter
(a record's position in its shard) is recovered by slicing.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from hashlib import md5
from typing import Any

from ._config import Limits
from ._limits import EPSILON, Clock, SecondSeries, TokenBucket

__all__ = ["HASH_SPACE", "SEQ_PREFIX_LEN", "Shard", "Stream"]

HASH_SPACE = 1 << 128
SEQ_PREFIX_LEN = 36
_ROUTE_CACHE = 200_000

#: A retained record: (arrival epoch seconds, data as base64 text, partition key).
Record = tuple[float, str, str]


def shard_id(index: int) -> str:
    return f"shardId-{index:012d}"


class Shard:
    """One shard's state: its sequence counter, retained records, buckets and counters."""

    __slots__ = (
        "changed",
        "end_key",
        "first_counter",
        "get_iterator_bucket",
        "index",
        "next_counter",
        "prefix",
        "put_head",
        "put_tail",
        "read_bytes_bucket",
        "read_calls_bucket",
        "records",
        "series",
        "shard_id",
        "start_key",
        "stats",
        "write_bytes_bucket",
        "write_records_bucket",
    )

    def __init__(
        self,
        index: int,
        count: int,
        epoch: int,
        limits: Limits | None,
        clock: Clock,
        series_seconds: int,
    ) -> None:
        self.index = index
        self.shard_id = shard_id(index)
        self.start_key = index * HASH_SPACE // count
        self.end_key = (index + 1) * HASH_SPACE // count - 1
        self.prefix = f"4960{epoch % 10**12:012d}{index:020d}"
        self.put_head = '{"SequenceNumber":"' + self.prefix
        self.put_tail = '","ShardId":"' + self.shard_id + '"}'
        # Counter 0 is the shard's StartingSequenceNumber, which no record carries (as on the
        # service), so "after the start" is expressible as AFTER_SEQUENCE_NUMBER.
        self.next_counter = 1
        self.first_counter = 1
        self.records: list[Record] = []
        self.changed = asyncio.Event()
        #: records_in, bytes_in, throttled, records_out, bytes_out, get_records, events
        self.stats = dict.fromkeys(
            (
                "records_in",
                "bytes_in",
                "throttled",
                "records_out",
                "bytes_out",
                "get_records_calls",
                "read_throttled",
                "subscriptions",
                "events",
            ),
            0,
        )
        #: per second: accepted records, accepted bytes, throttled records, records out
        self.series = SecondSeries(clock, 4, series_seconds)
        self.write_records_bucket: TokenBucket | None = None
        self.write_bytes_bucket: TokenBucket | None = None
        self.read_calls_bucket: TokenBucket | None = None
        self.read_bytes_bucket: TokenBucket | None = None
        self.get_iterator_bucket: TokenBucket | None = None
        if limits is not None:
            burst = limits.burst_seconds

            def bucket(rate: float | None) -> TokenBucket | None:
                return None if rate is None else TokenBucket(rate, rate * burst, clock)

            self.write_records_bucket = bucket(limits.write_records_per_s)
            self.write_bytes_bucket = bucket(limits.write_bytes_per_s)
            self.read_calls_bucket = bucket(limits.read_calls_per_s)
            self.read_bytes_bucket = bucket(limits.read_bytes_per_s)
            self.get_iterator_bucket = bucket(limits.get_shard_iterator_per_s)

    def sequence(self, counter: int) -> str:
        return self.prefix + f"{counter:020d}"

    def refill_write(self) -> None:
        """Bring the write buckets up to date (once per call; time stands still within one)."""
        if self.write_records_bucket is not None:
            self.write_records_bucket.refill()
        if self.write_bytes_bucket is not None:
            self.write_bytes_bucket.refill()

    def admit_write(self, size: int) -> bool:
        """Whether a record of ``size`` bytes fits both write buckets (then it is charged).

        Call :meth:`refill_write` first in each call.
        """
        records, data = self.write_records_bucket, self.write_bytes_bucket
        if records is not None and records.level < 1 - EPSILON:
            return False
        if data is not None:
            if data.level < size - EPSILON:
                return False
            data.level -= size
        if records is not None:
            records.level -= 1
        return True

    def append(self, record: Record, retain: int) -> None:
        records = self.records
        records.append(record)
        if len(records) > 2 * retain:
            drop = len(records) - retain
            del records[:drop]
            self.first_counter += drop

    def notify(self) -> None:
        """Wake every subscription waiting for new records on this shard."""
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def describe(self) -> dict[str, Any]:
        return {
            "ShardId": self.shard_id,
            "HashKeyRange": {
                "StartingHashKey": str(self.start_key),
                "EndingHashKey": str(self.end_key),
            },
            "SequenceNumberRange": {"StartingSequenceNumber": self.sequence(0)},
        }


class Stream:
    """The stream's shards and routing of partition keys / explicit hash keys to them."""

    def __init__(
        self,
        name: str,
        shards: int,
        region: str,
        account: str,
        limits: Limits | None,
        clock: Clock,
        series_seconds: int,
    ) -> None:
        self.name = name
        self.arn = f"arn:aws:kinesis:{region}:{account}:stream/{name}"
        self.created = clock.epoch()
        epoch = int(self.created)
        self.shards = [
            Shard(i, shards, epoch, limits, clock, series_seconds) for i in range(shards)
        ]
        self.by_id = {shard.shard_id: shard for shard in self.shards}
        self._starts = [shard.start_key for shard in self.shards]
        self._by_key: dict[str, Shard] = {}
        self._by_hash: dict[str, Shard] = {}

    def for_partition_key(self, key: str) -> Shard:
        shard = self._by_key.get(key)
        if shard is None:
            value = int.from_bytes(md5(key.encode()).digest(), "big")
            shard = self.shards[bisect_right(self._starts, value) - 1]
            if len(self._by_key) < _ROUTE_CACHE:
                self._by_key[key] = shard
        return shard

    def for_hash_key(self, key: str) -> Shard:
        """The shard of an ExplicitHashKey (a decimal string); ValueError if malformed."""
        shard = self._by_hash.get(key)
        if shard is None:
            value = int(key)
            if not 0 <= value < HASH_SPACE:
                raise ValueError(key)
            shard = self.shards[bisect_right(self._starts, value) - 1]
            if len(self._by_hash) < _ROUTE_CACHE:
                self._by_hash[key] = shard
        return shard

    def shard(self, shard_id: str) -> Shard | None:
        return self.by_id.get(shard_id)

    def counter_of(self, shard: Shard, sequence: str) -> int:
        """The counter in ``sequence``; ValueError unless it is one of ``shard``'s."""
        if len(sequence) != SEQ_PREFIX_LEN + 20 or not sequence.startswith(shard.prefix):
            raise ValueError(sequence)
        return int(sequence[SEQ_PREFIX_LEN:])
