"""The consumer: read Kinesis streams shard by shard into Arrow batches.

* :class:`Consumer` - async context manager and async iterator of :class:`RecordBatch`, or
  ``await consumer.run(handler)`` for one supervised processor per shard.
* :class:`ConsumerConfig` and :class:`StartingPosition` - what to read and how.
* ``commit(batch)`` / ``positions()`` - resume exactly after the last committed record,
  including in the middle of a KPL aggregate and across resharding.
* ``statistics()`` - a frozen :class:`ConsumerStatistics`, its shards' :class:`ShardStatistics`
  keyed by ``(stream, shard_id)``.

``ConsumerConfig(mode="polling")`` reads with GetRecords, ``mode="efo"`` with Enhanced Fan-Out
(SubscribeToShard, :class:`EfoReader`); both plug into the same core through
:class:`ShardReader`. EFO registration and cleanup: :func:`register_consumers` (the ``eager``
step), :func:`list_consumers`, :func:`deregister_consumer`, :func:`default_consumer_name`.

The seams other packages build on (``spark_bridge`` reads and replays shard ranges with them,
its offsets being positions documents); each is public and stable like the rest:

* positions documents: :func:`encode_positions` / :func:`parse_positions` (the document
  ``positions()`` returns, keyed by :data:`ShardKey` ``(stream, shard_id)``, versioned by
  :data:`POSITIONS_VERSION`), :class:`SavedShard` (one shard's entry), :func:`resume_from`
  (where a saved shard resumes, and which user records to drop there) and
  :func:`position_order` (the sort key of a :class:`~kinesis_actors.records.Position`);
* a :class:`PollingReader` of one's own: :class:`ReadPacer` with :class:`PacingSettings` (the
  sans-IO pacing of GetRecords and GetShardIterator per shard) and :class:`ShardMetrics` (the
  counters it fills);
* :func:`list_shards`: every shard of a stream (:class:`ShardInfo`, open and closed), every
  ListShards page followed, and the calls it took.
"""

from ._batch import RecordBatch
from ._config import ConsumerConfig, StartingPosition
from ._consumer import Consumer
from ._discovery import list_shards
from ._efo import EfoReader
from ._efo_policy import EfoSettings
from ._metrics import ShardMetrics
from ._pacing import PacingSettings, ReadPacer
from ._positions import (
    POSITIONS_VERSION,
    SavedShard,
    ShardKey,
    encode_positions,
    parse_positions,
    resume_from,
)
from ._positions import order as position_order
from ._reader import PollingReader, ShardRead, ShardReader
from ._registration import (
    default_consumer_name,
    deregister_consumer,
    deregister_consumers,
    list_consumers,
    register_consumers,
)
from ._shards import ShardInfo
from ._statistics import ConsumerStatistics, ShardStatistics

__all__ = [
    "POSITIONS_VERSION",
    "Consumer",
    "ConsumerConfig",
    "ConsumerStatistics",
    "EfoReader",
    "EfoSettings",
    "PacingSettings",
    "PollingReader",
    "ReadPacer",
    "RecordBatch",
    "SavedShard",
    "ShardInfo",
    "ShardKey",
    "ShardMetrics",
    "ShardRead",
    "ShardReader",
    "ShardStatistics",
    "StartingPosition",
    "default_consumer_name",
    "deregister_consumer",
    "deregister_consumers",
    "encode_positions",
    "list_consumers",
    "list_shards",
    "parse_positions",
    "position_order",
    "register_consumers",
    "resume_from",
]
