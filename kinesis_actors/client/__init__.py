"""The async Kinesis and DynamoDB clients: transport, signing, protocol, retries, typed errors.

* :class:`KinesisClient` - ``call(operation, params)`` for any Kinesis operation (JSON 1.1,
  SigV4, pooled HTTP/1.1 by default, HTTP/2 opt-in with ``ClientConfig.http2``), retried per
  :class:`RetryPolicy`; ``send(request)`` for a request built with the codec;
  ``async with client.subscribe_to_shard(...)`` yields a :class:`Subscription`, an async
  iterator of SubscribeToShard events; ``statistics()`` gives a :class:`ClientStats`.
* :class:`DynamoDBClient` - the same for DynamoDB (JSON 1.0; the lease table's I/O): ``call``
  in boto3's low-level shapes, ``create_table`` / ``wait_for_table`` / ``delete_table``,
  ``scan`` (every item, paginated); :data:`DYNAMODB_RETRY_SETTINGS` for its item operations.
* :class:`AssumeRole` - credentials of an IAM role assumed with STS, for ``credentials=``:
  assumed when a client opens, renewed ahead of expiry in a thread of their own (no pause on
  the event loop); ``statistics()`` gives an :class:`AssumeRoleStats`.
* :class:`ClientConfig`, :class:`RetrySettings`, :data:`DEFAULT_RETRY_SETTINGS` - settings;
  :func:`is_retryable` - the retry classification, for callers that own their retries.
* :class:`ProtocolCodec` / :class:`EncodedRequest` - the sans-IO encoding and decoding the
  client uses, for callers that build a request themselves (the producer's PutRecords).
* :class:`StreamRef` - a stream given by name or by ARN (a stream of another account): checked
  before any call (``StreamRef.parse``), its name (the library's key for it) and the parameter
  its calls take; :func:`stream_params` for a reference already checked.
* :func:`service_now` - the service's clock as a client's replies tell it (``service_time()``,
  from their ``Date``): what a position chosen by time is pinned to, never this host's clock.
* :class:`H2PoolStatistics` - what ``KinesisClient.subscription_statistics()`` returns: the
  SubscribeToShard connections open and the streams they carry.
* :class:`H2Stream` - the transport under :class:`Subscription`: one HTTP/2 request with a
  streamed response, on a TLS connection shared with other subscriptions (at most
  ``ClientConfig.subscriptions_per_connection``), its receive window advertised in SETTINGS
  and handed back only as it is read; ``H2Stream.open`` gives it a connection of its own
  (the benchmark load target's self-benchmark drives it).
"""

from ._client import ClientStats, KinesisClient
from ._config import ClientConfig
from ._dynamodb import DynamoDBClient
from ._h2pool import H2PoolStatistics
from ._h2stream import H2Stream
from ._protocol import EncodedRequest, ProtocolCodec
from ._retry import (
    DEFAULT_RETRY_SETTINGS,
    DYNAMODB_RETRY_SETTINGS,
    RetryPolicy,
    RetrySettings,
    is_retryable,
)
from ._role import AssumeRole, AssumeRoleStats
from ._service import service_now
from ._streams import StreamRef, stream_params
from ._subscription import Subscription

__all__ = [
    "DEFAULT_RETRY_SETTINGS",
    "DYNAMODB_RETRY_SETTINGS",
    "AssumeRole",
    "AssumeRoleStats",
    "ClientConfig",
    "ClientStats",
    "DynamoDBClient",
    "EncodedRequest",
    "H2PoolStatistics",
    "H2Stream",
    "KinesisClient",
    "ProtocolCodec",
    "RetryPolicy",
    "RetrySettings",
    "StreamRef",
    "Subscription",
    "is_retryable",
    "service_now",
    "stream_params",
]
