"""``LeaseCoordinator.statistics()``, and ``snapshot()`` kept for one release with a warning."""

from __future__ import annotations

import pytest

from kinesis_actors.client import DynamoDBClient, KinesisClient
from kinesis_actors.leases import LeaseCoordinator

ENDPOINT = "http://127.0.0.1:9"  # never called: the coordinator is not opened


def coordinator() -> LeaseCoordinator:
    return LeaseCoordinator(
        DynamoDBClient(endpoint_url=ENDPOINT),
        KinesisClient(endpoint_url=ENDPOINT),
        "table",
        "orders",
        worker_id="w1",
    )


def test_a_coordinators_statistics_include_its_table_clients_figures() -> None:
    statistics = coordinator().statistics()
    assert statistics.worker_id == "w1"
    assert (statistics.held, statistics.table_calls, statistics.table_retries) == (0, 0, 0)


def test_lease_coordinator_snapshot_still_works_and_warns_naming_statistics() -> None:
    leases = coordinator()
    with pytest.warns(DeprecationWarning, match=r"LeaseCoordinator\.statistics\(\)"):
        snapshot = leases.snapshot()
    assert snapshot == leases.statistics()
