"""How long an open against an endpoint that cannot be reached takes to say so.

For a Producer, a Consumer, a lease group (its DynamoDB endpoint unreachable, Kinesis fine)
and a Spark streaming query (the source), against a port that refuses connections and a
blackhole (a listener that accepts and never answers): the seconds to the first WARNING that
names the endpoint, and to the error (or ``None`` if there was none within the limit). Each
run is a process of its own, with the library's defaults (no ``open_timeout`` given), so the
same file measures any checkout: ``PYTHONPATH=<checkout> python benchmarks/open_bench.py``
(each run starts in the temporary folder, so that Spark's Python workers import that checkout).

Self-contained on purpose (it runs against checkouts that predate it); the tests have their
own unreachable endpoints in ``tests/unreachable.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
from pyspark.sql import SparkSession

import spark_bridge
from kinesis_actors import Consumer, ConsumerConfig, KinesisClient, LocalKinesis, Producer

CASES = ("producer", "consumer", "group", "spark")
FAULTS = ("refusing_port", "blackhole")


@contextmanager
def _endpoint(fault: str) -> Iterator[str]:
    """The URL of a refusing port or of a blackhole, for the block."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        if fault == "refusing_port":
            yield url
            return
        sock.listen(128)
        held: list[socket.socket] = []

        def accept() -> None:
            while True:
                try:
                    held.append(sock.accept()[0])
                except OSError:
                    return

        threading.Thread(target=accept, daemon=True).start()
        try:
            yield url
        finally:
            sock.shutdown(socket.SHUT_RDWR)
            for connection in held:
                connection.close()


class _FirstWarning(logging.Handler):
    """When (monotonic) the first WARNING naming ``url`` came, and what it said."""

    def __init__(self, url: str) -> None:
        super().__init__(logging.WARNING)
        self.url = url
        self.at: float | None = None
        self.message = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.at is None and self.url in message:
            self.at, self.message = time.monotonic(), message


async def _open(case: str, url: str) -> None:
    credentials = ("local", "local")
    if case == "group":
        with LocalKinesis() as local:
            async with KinesisClient(
                endpoint_url=local.endpoint_url, credentials=credentials
            ) as client:
                await client.create_stream("bench", 1)
                config = ConsumerConfig(lease_table="bench-leases", dynamodb_endpoint_url=url)
                async with Consumer(client, "bench", config):
                    return
    async with KinesisClient(endpoint_url=url, credentials=credentials) as client:
        if case == "producer":
            async with Producer(client, "bench"):
                return
        async with Consumer(client, "bench"):
            return


class _StderrWatch:
    """When a line containing ``words`` first reached this process's standard error (fd 2),
    which Spark's JVM and its Python workers inherit: the workers' warnings come this way."""

    def __init__(self, words: str) -> None:
        self.words = words
        self.at: float | None = None
        self.line = ""
        self._original = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        threading.Thread(target=self._pump, args=(read,), daemon=True).start()

    def _pump(self, read: int) -> None:
        with os.fdopen(read, "rb") as pipe:
            for raw in pipe:
                os.write(self._original, raw)
                line = raw.decode(errors="replace")
                if self.at is None and self.words in line:
                    self.at, self.line = time.monotonic(), line.strip()


def _spark(url: str, limit: float) -> tuple[float, str | None]:
    """(when the query started, its error or None) for a source query against ``url``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    spark_bridge.register(spark)
    options = {"streamName": "bench", "endpointUrl": url}
    options |= {"awsAccessKeyId": "local", "awsSecretKey": "local"}
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.monotonic()
        frame = spark.readStream.format("kinesis").options(**options).load()
        query = (
            frame.writeStream.format("memory")
            .queryName("bench")
            .option("checkpointLocation", checkpoint)
            .start()
        )
        error: str | None = None
        try:
            query.awaitTermination(max(1, round(limit - (time.monotonic() - started))))
        except Exception as exc:
            lines = [line for line in str(exc).splitlines() if "cannot reach" in line]
            error = lines[-1].strip() if lines else str(exc).splitlines()[0]
        query.stop()
    spark.stop()
    return started, error


def run_one(case: str, fault: str, limit: float) -> dict[str, Any]:
    """One measurement, in this process."""
    with _endpoint(fault) as url:
        warned = _FirstWarning(url)
        logging.getLogger().addHandler(warned)
        logging.getLogger().setLevel(logging.WARNING)
        error: str | None = None
        if case == "spark":
            watch = _StderrWatch(f"cannot reach Kinesis at {url}")  # before Spark starts
            started, error = _spark(url, limit)
            if watch.at is not None and warned.at is None:
                warned.at, warned.message = watch.at, watch.line
        else:
            started = time.monotonic()

            async def bounded() -> None:
                with anyio.fail_after(limit):
                    await _open(case, url)

            try:
                anyio.run(bounded)
            except TimeoutError:
                error = None
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        ended = time.monotonic()
    return {
        "case": case,
        "fault": fault,
        "first_warning_s": None if warned.at is None else round(warned.at - started, 1),
        "warning": warned.message[:200],
        "error_s": None if error is None else round(ended - started, 1),
        "error": (error or "")[:300],
        "limit_s": limit,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES)
    parser.add_argument("--fault", choices=FAULTS)
    parser.add_argument("--limit", type=float, default=180.0, help="seconds per run at most")
    args = parser.parse_args()
    if args.case and args.fault:
        print(json.dumps(run_one(args.case, args.fault, args.limit)))
        return
    for case in (args.case,) if args.case else CASES:
        for fault in (args.fault,) if args.fault else FAULTS:
            command = [sys.executable, os.path.abspath(__file__), "--case", case, "--fault", fault]
            # In a folder of no checkout: Spark's Python workers start with ``-m``, which puts
            # their folder first on sys.path, before PYTHONPATH's checkout.
            done = subprocess.run(
                [*command, "--limit", str(args.limit)],
                capture_output=True,
                text=True,
                check=False,
                cwd=tempfile.gettempdir(),
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            print(lines[-1] if lines else json.dumps({"case": case, "fault": fault}), flush=True)


if __name__ == "__main__":
    main()
