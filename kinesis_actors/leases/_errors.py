"""The lease package's typed errors.

They derive from :class:`~kinesis_actors.errors.KinesisError` like every error the library
raises on purpose, and are exported from :mod:`kinesis_actors.leases`.
"""

from __future__ import annotations

from ..errors import KinesisError

__all__ = ["LeaseLostError", "LeaseTableError", "WorkerIdConflictError"]


class LeaseTableError(KinesisError):
    """The lease table cannot be used as it is, and nothing was written to it.

    Raised for a table whose key schema is not the KCL's (``leaseKey``, a string hash key), and
    for items that belong to another stream or to the other lease-key form (a multi-stream
    table read by a single-stream worker, or the reverse). ``table`` names the table; the
    message says what was found and what was expected.
    """

    def __init__(self, message: str, *, table: str) -> None:
        super().__init__(message)
        self.table = table


class LeaseLostError(KinesisError):
    """This worker no longer holds the lease: its conditional write found another owner or
    counter. The shard's reader must stop at once; what it processed after the last
    checkpoint will be delivered again to the lease's next owner (at-least-once)."""

    def __init__(self, message: str, *, stream: str, shard_id: str) -> None:
        super().__init__(message)
        self.stream = stream
        self.shard_id = shard_id


class WorkerIdConflictError(KinesisError):
    """Another live process uses this worker's id.

    Detected when a renewal or checkpoint of a lease fails its condition while the lease's
    owner is still this worker's id (someone else renewed it in our name), or when a lease
    owned by this id, but not held by this process, keeps being renewed. Two processes with
    one id would both believe they hold the same shards: every worker needs its own id.
    """

    def __init__(self, message: str, *, worker_id: str, lease_key: str) -> None:
        super().__init__(message)
        self.worker_id = worker_id
        self.lease_key = lease_key
