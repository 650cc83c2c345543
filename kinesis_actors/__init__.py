"""kinesis-actors: an actor runtime for AWS Kinesis Data Streams on anyio.

The names most programs need are re-exported here. The rest of the public surface is what
each layer's package exports in its ``__all__`` (:mod:`kinesis_actors.client`,
:mod:`~kinesis_actors.consumer`, :mod:`~kinesis_actors.producer`,
:mod:`~kinesis_actors.records`, :mod:`~kinesis_actors.runtime`,
:mod:`~kinesis_actors.metrics`) and the public modules :mod:`kinesis_actors.errors`,
:mod:`kinesis_actors.sync`, :mod:`kinesis_actors.local` and
:mod:`kinesis_actors.metrics.otel`. Everything in underscore modules is private: other
packages (``spark_bridge``, the benchmarks) and the other layers import only the public names
(``tests/test_import_boundaries.py`` checks it). ``_validate`` is private to this package, the
configuration checks its layers share, and so is ``_deprecated``, how they warn of an old
name. ``LocalKinesis`` and ``LocalDynamoDB`` (the local servers' process managers, for tests
and demos) are imported on first use, not with the package.
"""

from typing import TYPE_CHECKING, Any

from . import errors
from .client import (
    AssumeRole,
    ClientConfig,
    DynamoDBClient,
    KinesisClient,
    RetryPolicy,
    RetrySettings,
)
from .consumer import (
    Consumer,
    ConsumerConfig,
    ConsumerStatistics,
    RecordBatch,
    StartingPosition,
)
from .producer import (
    Producer,
    ProducerConfig,
    ProducerMetrics,
    PutHandle,
    PutHandles,
    PutResult,
)
from .records import RECORD_SCHEMA

if TYPE_CHECKING:
    from .local import LocalDynamoDB, LocalKinesis

__all__ = [
    "RECORD_SCHEMA",
    "AssumeRole",
    "ClientConfig",
    "Consumer",
    "ConsumerConfig",
    "ConsumerStatistics",
    "DynamoDBClient",
    "KinesisClient",
    "LocalDynamoDB",
    "LocalKinesis",
    "Producer",
    "ProducerConfig",
    "ProducerMetrics",
    "PutHandle",
    "PutHandles",
    "PutResult",
    "RecordBatch",
    "RetryPolicy",
    "RetrySettings",
    "StartingPosition",
    "errors",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("LocalKinesis", "LocalDynamoDB"):
        from . import local  # noqa: PLC0415 - on first use, not with the package

        return getattr(local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
