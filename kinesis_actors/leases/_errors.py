"""The lease package's typed errors, defined with every other in :mod:`kinesis_actors.errors`
(one place for a user's ``except``) and exported from :mod:`kinesis_actors.leases` too."""

from __future__ import annotations

from ..errors import LeaseLostError, LeaseTableError, WorkerIdConflictError

__all__ = ["LeaseLostError", "LeaseTableError", "WorkerIdConflictError"]
