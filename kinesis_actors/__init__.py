"""kinesis-actors: an actor runtime for AWS Kinesis Data Streams on anyio.

The public surface is re-exported here; everything in underscore modules is private.
"""

from . import errors
from .client import ClientConfig, KinesisClient, RetryPolicy, RetrySettings
from .local import LocalKinesis

__all__ = [
    "ClientConfig",
    "KinesisClient",
    "LocalKinesis",
    "RetryPolicy",
    "RetrySettings",
    "errors",
]

__version__ = "0.1.0"
