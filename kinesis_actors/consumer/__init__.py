"""The consumer: read Kinesis streams shard by shard into Arrow batches.

* :class:`Consumer` - async context manager and async iterator of :class:`RecordBatch`, or
  ``await consumer.run(handler)`` for one supervised processor per shard.
* :class:`ConsumerConfig` and :class:`StartingPosition` - what to read and how.
* ``commit(batch)`` / ``positions()`` - resume exactly after the last committed record,
  including in the middle of a KPL aggregate and across resharding.

Polling (GetRecords) today; Enhanced Fan-Out plugs into the same core through
:class:`ShardReader`.
"""

from ._batch import RecordBatch
from ._config import ConsumerConfig, StartingPosition
from ._consumer import Consumer
from ._reader import PollingReader, ShardRead, ShardReader

__all__ = [
    "Consumer",
    "ConsumerConfig",
    "PollingReader",
    "RecordBatch",
    "ShardRead",
    "ShardReader",
    "StartingPosition",
]
