"""The service: every operation, plus the admin endpoint's statistics and controls."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ._base import CUT, JSON_TYPE, Reply, Result, ServiceError, Subscription
from ._config import Faults, TargetConfig
from ._ops import Operations

__all__ = [
    "CUT",
    "JSON_TYPE",
    "Reply",
    "Result",
    "Service",
    "ServiceError",
    "Subscription",
]


class Service(Operations):
    """The stream, its consumers, limits, faults and counters."""

    def __init__(
        self, config: TargetConfig, cpu_clock: Callable[[], float] = time.process_time
    ) -> None:
        super().__init__(config, cpu_clock)
        self._handlers.update(
            {
                "PutRecords": self.put_records,
                "PutRecord": self.put_record,
                "ListShards": self.list_shards,
                "DescribeStreamSummary": self.describe_stream_summary,
                "GetShardIterator": self.get_shard_iterator,
                "GetRecords": self.get_records,
                "RegisterStreamConsumer": self.register_stream_consumer,
                "DescribeStreamConsumer": self.describe_stream_consumer,
                "ListStreamConsumers": self.list_stream_consumers,
                "DeregisterStreamConsumer": self.deregister_stream_consumer,
            }
        )

    # Admin ----------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        shards = self.stream.shards
        totals = {key: sum(shard.stats[key] for shard in shards) for key in shards[0].stats}
        return {
            "clock": self.clock.now(),
            "cpu_seconds": self._cpu_clock() - self._cpu_start,
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "faults": dict(self.fault_counts),
            "connections": dict(self.connections),
            "totals": totals,
            "shards": {shard.shard_id: dict(shard.stats) for shard in shards},
            "series": {shard.shard_id: shard.series.rows() for shard in shards},
            "consumers": len(self.consumers),
        }

    def control(self, document: dict[str, Any]) -> dict[str, Any]:
        """Change faults, pause or resume shards, or advance a manual clock."""
        if "faults" in document:
            self.set_faults(Faults.from_dict(document["faults"]) or Faults())
        if "pause" in document or "resume" in document:
            paused = (set(self.paused) | set(document.get("pause", ()))) - set(
                document.get("resume", ())
            )
            self.set_faults(_replace_paused(self.faults, tuple(sorted(paused))))
        if "advance" in document:
            self.clock.advance(float(document["advance"]))
        return {"faults": self.faults.to_dict(), "clock": self.clock.now()}


def _replace_paused(faults: Faults, paused: tuple[str, ...]) -> Faults:
    data = faults.to_dict()
    data["paused_shards"] = list(paused)
    return Faults.from_dict(data) or Faults()
