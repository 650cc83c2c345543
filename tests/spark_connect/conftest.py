"""A Spark Connect server for the Connect test modules, and a remote session on it.

The session is a pure gRPC client (``pyspark.sql.connect``): it shares nothing with the local
session of tests/spark_bridge, which may be running in the same pytest process, and sets no
process-wide ``SPARK_*`` variable that would turn later local sessions into remote ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark_connect._server import ConnectServer


# Module scope: the server (a 1 GB JVM) ends with the module that uses it, not with the run.
@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with ConnectServer(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server


@pytest.fixture(scope="module")
def remote(connect_server: ConnectServer) -> Iterator[Any]:
    """A remote ``SparkSession`` (Spark Connect) with the kinesis format registered."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    import spark_bridge

    session = RemoteSparkSession.builder.remote(connect_server.url).create()
    spark_bridge.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Connect server whose Python has our dependencies but not our packages: this
    checkout (installed in development mode) is hidden from it."""
    import spark_bridge

    checkout = Path(spark_bridge.__file__).resolve().parent.parent
    with ConnectServer(tmp_path_factory.mktemp("spark-connect-bare"), hide=checkout) as server:
        yield server
