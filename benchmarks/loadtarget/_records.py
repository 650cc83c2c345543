"""Building record lists as JSON text, for GetRecords answers and SubscribeToShard events.

Both modes write JSON by concatenating pre-encoded fragments: the retained mode reuses the
base64 text the producer sent, the synthetic mode cycles through payloads encoded once.
"""

from __future__ import annotations

import base64
import random
from json.encoder import encode_basestring_ascii

from ._config import Synthetic
from ._stream import Shard

__all__ = ["SyntheticSource", "retained_records"]


def retained_records(
    shard: Shard, counter: int, limit: int, max_bytes: int
) -> tuple[str, int, int, int, float | None]:
    """Records of ``shard`` from ``counter`` as a JSON array's items.

    Returns (items, first counter served, records, bytes, arrival of the next unread
    record or None when the answer reaches the shard's end).
    """
    start = max(counter, shard.first_counter)
    index = start - shard.first_counter
    chosen = shard.records[index : index + limit]
    head = '{"SequenceNumber":"' + shard.prefix
    parts: list[str] = []
    size = 0
    for offset, (arrival, data, key) in enumerate(chosen):
        size += (len(data) >> 2) * 3 - data[-2:].count("=")
        if size > max_bytes and parts:
            chosen = chosen[:offset]
            break
        parts.append(
            f'{head}{start + offset:020d}","ApproximateArrivalTimestamp":{arrival:.3f},'
            f'"Data":"{data}","PartitionKey":{encode_basestring_ascii(key)}}}'
        )
    following = index + len(chosen)
    next_arrival = shard.records[following][0] if following < len(shard.records) else None
    return ",".join(parts), start, len(parts), size, next_arrival


class SyntheticSource:
    """An endless, pre-encoded record sequence served identically by every shard."""

    def __init__(self, settings: Synthetic) -> None:
        self.settings = settings
        rng = random.Random(20_240_611)
        payloads = settings.payloads or tuple(
            rng.randbytes(settings.record_size) for _ in range(settings.variants)
        )
        self._sizes = [len(p) for p in payloads]
        self._uniform = len(set(self._sizes)) == 1
        self._data = [
            ',"Data":"' + base64.b64encode(p).decode() + '","PartitionKey":' for p in payloads
        ]
        self._keys = [
            encode_basestring_ascii(f"pk-{i:08d}") + "}" for i in range(settings.partition_keys)
        ]

    def items(self, shard: Shard, counter: int, count: int, arrival: float) -> tuple[str, int]:
        """``count`` records from ``counter`` as JSON array items, and their data bytes."""
        head = '{"SequenceNumber":"' + shard.prefix
        stamp = f'","ApproximateArrivalTimestamp":{arrival:.3f}'
        data, keys, sizes = self._data, self._keys, self._sizes
        n_data, n_keys = len(data), len(keys)
        parts = [
            f"{head}{c:020d}{stamp}{data[c % n_data]}{keys[c % n_keys]}"
            for c in range(counter, counter + count)
        ]
        if self._uniform:
            total = count * sizes[0]
        else:
            total = sum(sizes[c % n_data] for c in range(counter, counter + count))
        return ",".join(parts), total
