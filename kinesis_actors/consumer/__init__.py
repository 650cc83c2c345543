"""The consumer: read Kinesis streams shard by shard into Arrow batches.

* :class:`Consumer` - async context manager and async iterator of :class:`RecordBatch`, or
  ``await consumer.run(handler)`` for one supervised processor per shard.
* :class:`ConsumerConfig` and :class:`StartingPosition` - what to read and how.
* ``commit(batch)`` / ``positions()`` - resume exactly after the last committed record,
  including in the middle of a KPL aggregate and across resharding.

``ConsumerConfig(mode="polling")`` reads with GetRecords, ``mode="efo"`` with Enhanced Fan-Out
(SubscribeToShard, :class:`EfoReader`); both plug into the same core through
:class:`ShardReader`. EFO registration and cleanup: :func:`register_consumers` (the ``eager``
step), :func:`list_consumers`, :func:`deregister_consumer`, :func:`default_consumer_name`.
"""

from ._batch import RecordBatch
from ._config import ConsumerConfig, StartingPosition
from ._consumer import Consumer
from ._efo import EfoReader, EfoSettings
from ._reader import PollingReader, ShardRead, ShardReader
from ._registration import (
    default_consumer_name,
    deregister_consumer,
    deregister_consumers,
    list_consumers,
    register_consumers,
)

__all__ = [
    "Consumer",
    "ConsumerConfig",
    "EfoReader",
    "EfoSettings",
    "PollingReader",
    "RecordBatch",
    "ShardRead",
    "ShardReader",
    "StartingPosition",
    "default_consumer_name",
    "deregister_consumer",
    "deregister_consumers",
    "list_consumers",
    "register_consumers",
]
