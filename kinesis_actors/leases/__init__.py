"""Consumer groups through a lease table in DynamoDB, in the KCL's item format.

Several processes share the shards of one or more streams: each shard has one lease item; a
worker holds a lease by bumping its counter (renewal), takes expired, free or (to balance)
other workers' leases with conditional writes on the counter, and keeps its checkpoint in the
lease. See ``docs/leases.md``.

* :class:`LeaseCoordinator` - the actor a consumer drives: events :class:`LeaseAcquired` /
  :class:`LeaseLost` / :class:`LeaseHandoff`, ``checkpoint`` / ``note_checkpoint`` /
  ``hand_over`` / ``finish`` / ``release_all``,
  ``snapshot()`` -> :class:`LeaseStats`; tuned by :class:`LeaseConfig`.
* :class:`LeaseTable` - the table's I/O: ensure, list, create, take, renew, checkpoint,
  release; :class:`Lease` with :func:`encode_lease` / :func:`decode_lease` - one item in the
  KCL's attribute names; the special checkpoints :data:`TRIM_HORIZON`, :data:`LATEST`,
  :data:`AT_TIMESTAMP`, :data:`SHARD_END`.
* Errors: :class:`LeaseTableError`, :class:`LeaseLostError`, :class:`WorkerIdConflictError`.
"""

from ._config import LeaseConfig
from ._coordinator import LeaseCoordinator
from ._errors import LeaseLostError, LeaseTableError, WorkerIdConflictError
from ._events import LeaseAcquired, LeaseEvent, LeaseHandoff, LeaseLost, LeaseStats
from ._items import (
    AT_TIMESTAMP,
    LATEST,
    SHARD_END,
    TRIM_HORIZON,
    Lease,
    decode_lease,
    encode_lease,
    lease_key,
    stream_identifier,
)
from ._table import Caller, LeaseTable

__all__ = [
    "AT_TIMESTAMP",
    "LATEST",
    "SHARD_END",
    "TRIM_HORIZON",
    "Caller",
    "Lease",
    "LeaseAcquired",
    "LeaseConfig",
    "LeaseCoordinator",
    "LeaseEvent",
    "LeaseHandoff",
    "LeaseLost",
    "LeaseLostError",
    "LeaseStats",
    "LeaseTable",
    "LeaseTableError",
    "WorkerIdConflictError",
    "decode_lease",
    "encode_lease",
    "lease_key",
    "stream_identifier",
]
