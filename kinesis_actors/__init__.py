"""kinesis-actors: an actor runtime for AWS Kinesis Data Streams on anyio.

The public surface is re-exported here; everything in underscore modules is private.
"""

from . import errors
from .client import ClientConfig, KinesisClient, RetryPolicy, RetrySettings
from .consumer import Consumer, ConsumerConfig, RecordBatch, StartingPosition
from .local import LocalKinesis
from .producer import Producer, ProducerConfig, ProducerMetrics, PutHandle, PutResult
from .records import RECORD_SCHEMA

__all__ = [
    "RECORD_SCHEMA",
    "ClientConfig",
    "Consumer",
    "ConsumerConfig",
    "KinesisClient",
    "LocalKinesis",
    "Producer",
    "ProducerConfig",
    "ProducerMetrics",
    "PutHandle",
    "PutResult",
    "RecordBatch",
    "RetryPolicy",
    "RetrySettings",
    "StartingPosition",
    "errors",
]

__version__ = "0.1.0"
