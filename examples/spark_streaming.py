"""README's and docs/spark.md's Spark queries, run in local mode against the local Kinesis:
orders -> upper-cased -> orders-upper (a Kinesis sink) -> a parquet folder."""

import os
import sys
from tempfile import TemporaryDirectory

from pyspark.sql import SparkSession

import spark_bridge
from kinesis_actors import LocalKinesis
from kinesis_actors.sync import SyncProducer

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python: this one

with LocalKinesis(streams={"orders": 2, "orders-upper": 1}) as server, TemporaryDirectory() as tmp:
    with SyncProducer(
        "orders",
        region=server.region,
        endpoint_url=server.endpoint_url,
        credentials=server.credentials,
    ) as producer:
        for i in range(100):
            producer.put(f"order {i}".encode(), f"customer-{i % 10}")
    key, secret = server.credentials
    # On a cluster: SparkSession.builder.getOrCreate()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )

    # [readme]
    spark_bridge.register(spark)  # the "kinesis" format
    # On AWS: {"region": "eu-west-1"}, and credentials from the environment or a role
    connection = {"endpointUrl": server.endpoint_url, "awsAccessKeyId": key, "awsSecretKey": secret}
    orders = (
        spark.readStream.format("kinesis")
        .option("streamName", "orders")
        .options(**connection)
        .option("initialPosition", "trim_horizon")
        .load()
    )
    query = (
        orders.selectExpr("partitionKey", "upper(CAST(data AS STRING)) AS data")
        .writeStream.format("kinesis")
        .option("streamName", "orders-upper")
        .options(**connection)
        .option("checkpointLocation", f"{tmp}/checkpoints/orders-upper")
        .trigger(availableNow=True)  # or none: a micro-batch as soon as the last one ends
        .start()
    )
    # [/readme]
    query.awaitTermination()

    # [docs]
    frame = (
        spark.readStream.format("kinesis")
        .option("streamName", "orders-upper")  # comma-separated for several
        .options(**connection)
        .option("initialPosition", "trim_horizon")
        .option("arrivalWindowPerTrigger", "30s")  # a backlog in 30 s steps
        .load()
    )
    query = (
        frame.writeStream.format("parquet")
        .option("path", f"{tmp}/orders-upper")  # on AWS: "s3://bucket/orders-upper"
        .option("checkpointLocation", f"{tmp}/checkpoints/parquet")
        .trigger(availableNow=True)
        .start()
    )
    # [/docs]
    query.awaitTermination()
    rows = spark.read.parquet(f"{tmp}/orders-upper").orderBy("data").collect()
    print(f"{len(rows)} records through Spark; first: {bytes(rows[0]['data']).decode()!r}")
    spark.stop()
