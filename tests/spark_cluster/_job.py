"""The driver of the speculation test, in a process of its own (one SparkContext per process,
and the other Spark tests keep a local one in theirs): an AvailableNow query of the kinesis
source on the standalone cluster, with speculation forced, every micro-batch's rows collected
by ``foreachBatch``; then every task attempt from the Spark UI's REST API. Writes both as JSON.

Usage: python -m tests.spark_cluster._job MASTER_URL OPTIONS_JSON CHECKPOINT RESULT_JSON
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import Any

SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "1.1",
    "spark.speculation.minTaskRuntime": "200ms",
    # Spark 3.4+ speculates only "inefficient" tasks by their rate of input rows, which a
    # Python data source does not report: judge by run time alone.
    "spark.speculation.efficiency.enabled": "false",
}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def main() -> None:
    master, options, checkpoint, result = sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_bridge

    builder = (
        SparkSession.builder.master(master)
        .appName("kinesis-actors-speculation")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        # A Python worker connects back to the JVM within this (15 s by default), under load.
        .config("spark.python.authenticate.socketTimeout", "120s")
    )
    for key, value in SPECULATION.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark_bridge.register(spark)
    rows: list[list[Any]] = []

    def collect(frame: Any, batch_id: int) -> None:
        for row in frame.select("shardId", "sequenceNumber", "subSequenceNumber", "data").collect():
            rows.append(
                [
                    batch_id,
                    row.shardId,
                    row.sequenceNumber,
                    row.subSequenceNumber,
                    bytes(row.data).decode(),
                ]
            )

    query = (
        spark.readStream.format("kinesis")
        .options(**options)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    error = query.exception()
    # The UI's own address: a port picked free beforehand may be taken (by the other test
    # worker) by the time the UI binds, and Spark then moves the UI to the next one.
    api = f"{spark.sparkContext.uiWebUrl}/api/v1/applications"
    app = spark.sparkContext.applicationId
    tasks = []
    for stage in _get(f"{api}/{app}/stages?details=true"):
        for task in (stage.get("tasks") or {}).values():
            tasks.append(
                {
                    "stage": stage["stageId"],
                    **{
                        k: task.get(k)
                        for k in (
                            "taskId",
                            "launchTime",
                            "duration",
                            "index",
                            "attempt",
                            "host",
                            "executorId",
                            "status",
                            "speculative",
                        )
                    },
                }
            )
    with open(result, "w") as out:
        json.dump(
            {
                "rows": rows,
                "tasks": tasks,
                "error": None if error is None else str(error),
                "active": query.isActive,
            },
            out,
        )
    spark.stop()


if __name__ == "__main__":
    main()
