"""What the KCL asks DynamoDB for, and how fast it fails over, with its defaults: models.

Computed from the intervals in the KCL's source (awslabs/amazon-kinesis-client), not from a
run of it: the lease benchmark (:mod:`benchmarks.lease_bench`) sets its measured requests
against both. Steady state only: shares even, no worker joining or dying, no shard ending;
checkpoints are the application's and left out, as in the benchmark. A table of a thousand
leases is one page of a Scan (1 MB) here and there.

- :func:`kcl2_calls_per_s`: the KCL 2.x, whose every worker lists the whole table on its
  taker's period.
- :func:`kcl3_calls_per_s`: the KCL 3.x (read at v3.5.1, a new application whose lease table
  holds its worker metrics and its leader lock, as 3.5 makes them), whose elected leader
  assigns leases and whose other workers find theirs through a secondary index.

Both take ``checkpoint_every``: an application that checkpoints each lease every so many
seconds (the KCL's Python sample, ``sample_kclpy_app.py``, every 60 s) adds one UpdateItem
a checkpoint in either version (``DynamoDBCheckpointer.setCheckpoint`` updates the lease at
once); ``None`` leaves checkpoints out.
"""

from __future__ import annotations

__all__ = [
    "KCL_EPSILON",
    "KCL_FAILOVER",
    "kcl2_calls_per_s",
    "kcl3_calls_per_s",
    "kcl_failover_window",
]

KCL_FAILOVER = 10.0
"""``failoverTimeMillis``: the lease duration, both versions."""
KCL_EPSILON = 0.025
"""``epsilonMillis``: what the renewer subtracts from its period and the taker adds."""
KCL2_SHARD_SYNC = 60.0
"""The KCL 2.x's periodic shard sync, one worker: a listing of the leases."""
KCL3_AUDITOR = 120.0
"""``leasesRecoveryAuditorExecutionFrequencyMillis``: the 3.x leader's shard-sync listing."""
KCL3_WORKER_METRICS = 30.0
"""``workerMetricsReporterFreqInMillis``: each 3.x worker writes its metrics item."""
KCL3_LEADER_HEARTBEAT = 30.0
"""``dynamoDbLockBasedLeaderHeartbeatPeriodInMillis``: the 3.x leader's lock heartbeat, and
how long another worker trusts its last "not the leader" before reading the lock again."""


def _renewals_per_s(leases: int, failover: float) -> float:
    """Both versions renew each held lease every ``failover / 3 - epsilon``, in whole
    milliseconds as the Java computes it (3,333 - 25 = 3,308 ms)."""
    return leases / ((int(failover * 1000) // 3 - int(KCL_EPSILON * 1000)) / 1000)


def _checkpoints_per_s(leases: int, checkpoint_every: float | None) -> float:
    if checkpoint_every is None:
        return 0.0
    if not checkpoint_every > 0:
        raise ValueError(f"checkpoint_every must be positive seconds, got {checkpoint_every!r}")
    return leases / checkpoint_every


def kcl2_calls_per_s(
    leases: int,
    workers: int,
    failover: float = KCL_FAILOVER,
    checkpoint_every: float | None = None,
) -> dict[str, float]:
    """DynamoDB requests per second of a KCL 2.x application with its defaults.

    Its renewer updates every held lease each ``failover / 3 - epsilon`` (3.308 s), its taker
    scans the table each ``2 * (failover + epsilon)`` (20.05 s) on every worker, and its
    periodic shard sync (one worker) lists the leases each 60 s.
    """
    renewals = _renewals_per_s(leases, failover)
    scans = workers / (2 * (failover + KCL_EPSILON)) + 1 / KCL2_SHARD_SYNC
    checkpoints = _checkpoints_per_s(leases, checkpoint_every)
    return {
        "renewals_per_s": renewals,
        "scans_per_s": scans,
        "checkpoints_per_s": checkpoints,
        "calls_per_s": renewals + scans + checkpoints,
    }


def kcl3_calls_per_s(
    leases: int,
    workers: int,
    failover: float = KCL_FAILOVER,
    checkpoint_every: float | None = None,
) -> dict[str, float]:
    """DynamoDB requests per second of a KCL 3.x application with its defaults.

    Renewals as in 2.x. Every worker, the leader too, queries the ``leaseOwner`` index for
    its lease keys each ``leaseAssignmentIntervalMillis / 2 - epsilon`` (the interval is
    ``2 * failover`` by default: 9.975 s) and writes its metrics item each 30 s; the leader
    scans the lease table each ``leaseAssignmentIntervalMillis`` (20 s) to assign leases and
    each 120 s to audit the shards, and heartbeats its lock each 30 s, which every other
    worker reads about as often. Leases moved for balance (every third assignment round,
    by measured CPU, with a 10 % threshold) are counted as none: identical workers.
    """
    renewals = _renewals_per_s(leases, failover)
    assignment = 2 * failover
    queries = workers / (assignment / 2 - KCL_EPSILON)
    scans = 1 / assignment + 1 / KCL3_AUDITOR
    metrics = workers / KCL3_WORKER_METRICS
    lock = 1 / KCL3_LEADER_HEARTBEAT + (workers - 1) / KCL3_LEADER_HEARTBEAT
    checkpoints = _checkpoints_per_s(leases, checkpoint_every)
    return {
        "renewals_per_s": renewals,
        "queries_per_s": queries,
        "scans_per_s": scans,
        "metrics_per_s": metrics,
        "leader_lock_per_s": lock,
        "checkpoints_per_s": checkpoints,
        "calls_per_s": renewals + queries + scans + metrics + lock + checkpoints,
    }


def kcl_failover_window(failover: float = KCL_FAILOVER) -> tuple[float, float]:
    """The shortest and longest time from a KCL 2.x worker's death to a take, its defaults.

    A taker sees a lease expire once its counter has not moved for ``failover`` since the
    scan that first saw it; scans are ``2 * (failover + epsilon)`` apart, longer than
    ``failover``, so the take comes at the second scan after the last renewal: one to two
    taker intervals after it, and the death is at most one renewal interval after that
    renewal.
    """
    taker = 2 * (failover + KCL_EPSILON)
    renewer = failover / 3 - KCL_EPSILON
    return taker - renewer, 2 * taker
