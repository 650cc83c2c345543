"""The async Kinesis client: transport, signing, protocol, retries and typed errors."""

from ._client import ClientStats, KinesisClient
from ._config import ClientConfig
from ._protocol import EncodedRequest, ProtocolCodec
from ._retry import DEFAULT_RETRY_SETTINGS, RetryPolicy, RetrySettings, is_retryable
from ._subscription import Subscription

__all__ = [
    "DEFAULT_RETRY_SETTINGS",
    "ClientConfig",
    "ClientStats",
    "EncodedRequest",
    "KinesisClient",
    "ProtocolCodec",
    "RetryPolicy",
    "RetrySettings",
    "Subscription",
    "is_retryable",
]
