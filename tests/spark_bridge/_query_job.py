"""A streaming query in a process of its own, for the kill tests: kinesis -> parquet.

Usage: python -m tests.spark_bridge._query_job OPTIONS_JSON OUTPUT CHECKPOINT MODE
MODE is ``continuous`` (a processing-time trigger, runs until killed) or ``available-now``.
:func:`launch` starts one in its own process group (so that a kill takes the JVM and the
Python workers with it); :func:`committed_files` says which parquet files each committed
micro-batch wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any


def launch(
    options: dict[str, str], output: Path, checkpoint: Path, mode: str, log: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    """Start a query job; its output goes to ``log`` (default: nowhere)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.spark_bridge._query_job",
            json.dumps(options),
            str(output),
            str(checkpoint),
            mode,
        ],
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=log if log is not None else subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the JVM and the Python workers
    )


def committed_files(output: Path) -> dict[Path, int]:
    """Each parquet file the file sink committed, and the micro-batch that wrote it (from the
    sink's log, ``_spark_metadata``; a file a killed driver left behind is not in it)."""
    files: dict[Path, int] = {}
    log = output / "_spark_metadata"
    if not log.is_dir():
        return files
    for entry in log.iterdir():
        if entry.name.startswith("."):
            continue  # a checksum file
        if not entry.name.isdigit():
            raise AssertionError(f"a compacted sink log ({entry.name}) hides batch numbers")
        for line in entry.read_text().splitlines()[1:]:  # the first line is the version
            item: dict[str, Any] = json.loads(line)
            path = Path(str(item["path"]).removeprefix("file://"))
            files[path] = int(entry.name)
    return files


def main() -> None:
    options, output, checkpoint, mode = json.loads(sys.argv[1]), *sys.argv[2:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_bridge

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # One sink log entry per micro-batch, never compacted: the order checks need to know
        # which batch wrote each row.
        .config("spark.sql.streaming.fileSink.log.compactInterval", "1000000")
        .getOrCreate()
    )
    spark_bridge.register(spark)
    frame = spark.readStream.format("kinesis").options(**options).load()
    writer = (
        frame.select("shardId", "sequenceNumber", "subSequenceNumber", "data")
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
