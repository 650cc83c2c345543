"""Shipping the packages to a Connect server with ``addArtifacts`` instead of installing them.

The server here has kinesis_actors' dependencies but not kinesis_actors and spark_bridge
(``bare_server``). A zip of both, added with ``addArtifacts(..., pyfile=True)`` before
``register()``, serves batch writes (``df.write``, ``foreachPartition``). It does not serve
streaming queries on Spark 4.3: the source's driver-side planner
(``python_streaming_source_runner``) is started with a fixed artifact folder
(``streaming_job``) instead of the session's, and a streaming query's tasks do not get the
session's artifacts either. The last test pins that down, so that docs/spark.md is corrected
when Spark changes it.
"""

from __future__ import annotations

import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException

import kinesis_actors
import spark_bridge
from kinesis_actors import LocalKinesis
from kinesis_actors.records import deaggregate
from tests.boto import create_stream, read_back
from tests.spark_connect._server import ConnectServer

pytestmark = pytest.mark.local_kinesis

MISSING = "No module named 'spark_bridge'"


def bundle(path: Path) -> Path:
    """The zip docs/spark.md shows: both packages' modules, as they are installed here."""
    with zipfile.ZipFile(path, "w") as archive:
        for package in (kinesis_actors, spark_bridge):
            assert package.__file__ is not None
            root = Path(package.__file__).parent
            for module in root.rglob("*.py"):
                archive.write(module, module.relative_to(root.parent))
    return path


@pytest.fixture
def bare(bare_server: ConnectServer) -> Iterator[Any]:
    """A new remote session for each test: artifacts are per session, and cannot be replaced."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    session = RemoteSparkSession.builder.remote(bare_server.url).create()
    yield session
    session.stop()


def _connection(local: LocalKinesis) -> dict[str, str]:
    key, secret = local.credentials[:2]
    return {"endpointUrl": local.endpoint_url, "awsAccessKeyId": key, "awsSecretKey": secret}


def test_a_zip_added_with_add_artifacts_before_register_serves_batch_writes(
    bare: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    connection = _connection(local_kinesis)
    rows = [(f"batch-{i}", f"key-{i % 7}") for i in range(300)]
    frame = bare.createDataFrame(rows, "data string, partitionKey string").repartition(2)

    def write() -> None:
        frame.write.format("kinesis").mode("append").option("streamName", stream_name).options(
            **connection
        ).save()

    spark_bridge.register(bare)
    with pytest.raises(AnalysisException, match=MISSING):  # the server really lacks it
        write()

    bare.addArtifacts(str(bundle(tmp_path / "kinesis_actors.zip")), pyfile=True)
    spark_bridge.register(bare)  # again: a registration takes the session's artifacts of then
    write()

    partitioned = [(f"part-{i}", f"k{i % 3}") for i in range(200)]
    bare.createDataFrame(partitioned, "data string, partitionKey string").repartition(
        2
    ).foreachPartition(spark_bridge.partition_writer(stream_name, **connection))

    delivered = Counter(
        (user.partition_key, user.data.decode())
        for shard in read_back(local_kinesis, stream_name).values()
        for record in shard
        for user in deaggregate(record["Data"], record["PartitionKey"])
    )
    assert delivered == Counter((key, data) for data, key in rows + partitioned)


def _fails_for_want_of_the_package(query: Any) -> None:
    try:
        with pytest.raises(Exception, match=MISSING):
            query.awaitTermination(60)
    finally:
        query.stop()


def test_streaming_queries_cannot_use_shipped_packages_on_spark_4_3(
    bare: Any, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    connection = _connection(local_kinesis)
    bare.addArtifacts(str(bundle(tmp_path / "kinesis_actors.zip")), pyfile=True)
    spark_bridge.register(bare)

    source = (
        bare.readStream.format("kinesis").option("streamName", stream_name).options(**connection)
    )
    _fails_for_want_of_the_package(
        source.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "source-checkpoint"))
        .start()
    )

    folder = tmp_path / "input"
    bare.createDataFrame([("a", "k")], "data string, partitionKey string").write.parquet(
        str(folder)
    )
    _fails_for_want_of_the_package(
        bare.readStream.schema("data string, partitionKey string")
        .parquet(str(folder))
        .writeStream.format("kinesis")
        .option("streamName", stream_name)
        .options(**connection)
        .option("checkpointLocation", str(tmp_path / "sink-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
