"""A two-host Spark standalone cluster on this machine for the speculation test (~10 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.spark_cluster._cluster import StandaloneCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running
