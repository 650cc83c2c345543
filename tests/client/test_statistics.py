"""``statistics()`` on the clients and on an assumed role: frozen snapshots, and the old
``stats`` properties kept for one release with a warning naming the new verb."""

from __future__ import annotations

import dataclasses

import pytest

from kinesis_actors.client import AssumeRole, ClientStats, DynamoDBClient, KinesisClient

ENDPOINT = "http://127.0.0.1:9"  # never called: nothing here opens a client


def test_a_clients_statistics_are_a_frozen_snapshot_before_any_call() -> None:
    statistics = KinesisClient(endpoint_url=ENDPOINT).statistics()
    assert statistics == ClientStats()
    with pytest.raises(dataclasses.FrozenInstanceError):
        statistics.calls = 1  # type: ignore[misc]


@pytest.mark.parametrize("client_type", [KinesisClient, DynamoDBClient])
def test_client_stats_still_works_and_warns_naming_statistics(
    client_type: type[KinesisClient] | type[DynamoDBClient],
) -> None:
    client = client_type(endpoint_url=ENDPOINT)
    name = client_type.__name__
    with pytest.warns(DeprecationWarning, match=rf"{name}\.statistics\(\)"):
        stats = client.stats
    assert stats == client.statistics()


def test_assume_role_stats_still_works_and_warns_naming_statistics() -> None:
    role = AssumeRole("arn:aws:iam::123456789012:role/reader", credentials=("a", "b"))
    with pytest.warns(DeprecationWarning, match=r"AssumeRole\.statistics\(\)"):
        stats = role.stats
    assert stats == role.statistics()
    assert (stats.assumed, stats.expires_at) == (0, None)
