"""A loopback Kinesis endpoint for benchmarks, fast enough that the client is the bottleneck.

    with LoadTarget(shards=4, limits=True) as target:
        async with target.client() as client:          # HTTP/1.1; client(tls=True) for h2
            await client.call("PutRecords", {...})
        print(target.stats(), target.cpu_seconds())

It speaks the JSON 1.1 protocol over HTTP/1.1 (keep-alive) and, on its TLS port, HTTP/2
(ALPN ``h2`` or ``http/1.1``) including SubscribeToShard's event stream; it accepts any
signature. Operations: PutRecords, PutRecord, ListShards, DescribeStreamSummary,
GetShardIterator, GetRecords, Register/Describe/List/DeregisterStreamConsumer and
SubscribeToShard, on one stream whose shards split the hash key space evenly.

It can emulate the per-shard service limits (:class:`Limits`), inject throttling, errors,
delays, paused shards, connection cuts and stream resets (:class:`Faults`), and serve endless
pre-encoded records for consumer benchmarks (:class:`Synthetic`). Its own throughput:
``python -m benchmarks.loadtarget.selfbench``.
"""

from __future__ import annotations

from ._config import MIB, Faults, Limits, Synthetic, TargetConfig
from ._target import LoadTarget, self_signed_certificate

__all__ = [
    "MIB",
    "Faults",
    "Limits",
    "LoadTarget",
    "Synthetic",
    "TargetConfig",
    "self_signed_certificate",
]
