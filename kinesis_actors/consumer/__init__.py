"""The consumer: read Kinesis streams shard by shard into Arrow batches.

* :class:`Consumer` - async context manager and async iterator of :class:`RecordBatch`, or
  ``await consumer.run(handler)`` for one supervised processor per shard.
* :class:`ConsumerConfig` and :class:`StartingPosition` - what to read and how.
* ``commit(batch)`` / ``positions()`` - resume exactly after the last committed record,
  including in the middle of a KPL aggregate and across resharding.
* ``statistics()`` - a frozen :class:`ConsumerStatistics`, its shards' :class:`ShardStatistics`
  keyed by ``(stream, shard_id)``, each in a :class:`ShardState`.

``ConsumerConfig(mode="polling")`` reads with GetRecords, ``mode="efo"`` with Enhanced Fan-Out
(SubscribeToShard, :class:`EfoReader`); both plug into the same core through
:class:`ShardReader`. EFO registration and cleanup: :func:`register_consumers` (the ``eager``
step), :func:`list_consumers`, :func:`deregister_consumer`, :func:`default_consumer_name`.

The positions document codec is a seam other packages build on (``spark_bridge``'s
``startingPositions`` takes what ``positions()`` returned); it is public and stable like the
rest: :func:`encode_positions` / :func:`parse_positions` (the document ``positions()``
returns, keyed by :data:`ShardKey` ``(stream, shard_id)``, versioned by
:data:`POSITIONS_VERSION`) and :class:`SavedShard` (one shard's entry).
"""

from ._batch import RecordBatch
from ._config import ConsumerConfig, StartingPosition
from ._consumer import Consumer
from ._efo import EfoReader
from ._efo_policy import EfoSettings
from ._metrics import ShardState
from ._positions import (
    POSITIONS_VERSION,
    SavedShard,
    ShardKey,
    encode_positions,
    parse_positions,
)
from ._reader import PollingReader, ShardRead, ShardReader
from ._registration import (
    default_consumer_name,
    deregister_consumer,
    deregister_consumers,
    list_consumers,
    register_consumers,
)
from ._statistics import ConsumerStatistics, ShardStatistics

__all__ = [
    "POSITIONS_VERSION",
    "Consumer",
    "ConsumerConfig",
    "ConsumerStatistics",
    "EfoReader",
    "EfoSettings",
    "PollingReader",
    "RecordBatch",
    "SavedShard",
    "ShardKey",
    "ShardRead",
    "ShardReader",
    "ShardState",
    "ShardStatistics",
    "StartingPosition",
    "default_consumer_name",
    "deregister_consumer",
    "deregister_consumers",
    "encode_positions",
    "list_consumers",
    "parse_positions",
    "register_consumers",
]
