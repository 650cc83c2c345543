"""What the demo needs beyond the wheel, checked before any stage runs.

The wheel carries the library, not the servers nor Spark: the local Kinesis and the local
DynamoDB are npm packages (under ``.tools/`` in a checkout, by ``make setup``), and the Spark
stage needs the ``spark`` extra and a Java runtime. A missing piece the run cannot do without
is one line naming what to install (exit 2), said before the first stage rather than as a
traceback half-way; the consumer-group stage, the one extra a run can go without, is skipped
with a one-line note instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from ..local import DYNALITE_INSTALL_COMMAND, LocalDynamoDBError, find_dynalite_dir
from ._common import UsageError

__all__ = ["SPARK_EXTRA_COMMAND", "check_spark", "group_note"]

SPARK_EXTRA_COMMAND = "pip install 'kinesis-actors[spark]'"


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def check_spark() -> None:
    """A usage error unless PySpark can be imported and a ``java`` can be found."""
    try:
        found = importlib.util.find_spec("pyspark") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UsageError(
            f"the demo's Spark stage needs PySpark: {SPARK_EXTRA_COMMAND} (and Java 17), or "
            "skip the stage with --no-spark"
        )
    if _java() is None:
        raise UsageError(
            "the demo's Spark stage needs Java 17 (no java on PATH or in JAVA_HOME): install "
            "it, or skip the stage with --no-spark"
        )


def group_note() -> str | None:
    """Why the consumer-group stage cannot run here (its local DynamoDB is not installed), or
    None when it can."""
    try:
        find_dynalite_dir()
    except LocalDynamoDBError:
        return (
            "the consumer-group stage is skipped: it needs the local DynamoDB (npm package "
            f"dynalite, Node.js 20+): `{DYNALITE_INSTALL_COMMAND}` here, or set DYNALITE_DIR"
        )
    return None
