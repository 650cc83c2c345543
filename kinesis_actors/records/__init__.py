"""Sans-IO record handling: KPL aggregation, partition-key hashing and shard lookup, Arrow batches.

Nothing here performs I/O or needs an event loop; the producer and consumer actors call into it.
"""

from ._aggregation import DEFAULT_AGGREGATION_MAX_BYTES, MAGIC, Aggregator, OutboundRecord
from ._arrow import RECORD_SCHEMA, Position, RecordBatchResult, build_record_batch
from ._deaggregation import UserRecord, deaggregate, deaggregate_into, is_aggregated
from ._hashing import (
    MAX_HASH_KEY,
    PARTITION_KEY_MAX_CHARS,
    HashRange,
    ShardMap,
    effective_hash_key,
    hash_key,
    parse_explicit_hash_key,
    validate_partition_key,
)

__all__ = [
    "DEFAULT_AGGREGATION_MAX_BYTES",
    "MAGIC",
    "MAX_HASH_KEY",
    "PARTITION_KEY_MAX_CHARS",
    "RECORD_SCHEMA",
    "Aggregator",
    "HashRange",
    "OutboundRecord",
    "Position",
    "RecordBatchResult",
    "ShardMap",
    "UserRecord",
    "build_record_batch",
    "deaggregate",
    "deaggregate_into",
    "effective_hash_key",
    "hash_key",
    "is_aggregated",
    "parse_explicit_hash_key",
    "validate_partition_key",
]
