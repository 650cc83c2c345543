"""The demo's Spark session keeps the terminal to the demo: Spark's output goes to its log.

Before, ``make demo`` showed the JVM's startup warnings, "Using Spark's default log4j
profile", Spark's WARN lines and its console stage bars (``[Stage 5:====>  (1 + 2) / 3]``)
between the demo's own progress bars.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# A job of several stages (a shuffle), long enough for the console progress bar to show if it
# were on (it appears after 500 ms of a stage).
SCRIPT = """
import sys, time
from pathlib import Path
from kinesis_actors.cli._demo_spark import start_spark

spark = start_spark(Path(sys.argv[1]))
frame = spark.range(0, 2_000_000, numPartitions=4).selectExpr("id % 7 AS k", "id")
rows = frame.groupBy("k").count().collect()
print("groups", len(rows))
spark.stop()
"""


def test_spark_writes_nothing_to_the_terminal_and_everything_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "spark.log"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log)],
        capture_output=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode() == "groups 7\n"
    assert done.stderr.decode() == ""
    text = log.read_text()
    assert "INFO SparkContext: Running Spark version" in text
    assert re.search(r"INFO DAGScheduler: Job \d+ finished: collect", text)
    assert "Setting default log level" in text  # the JVM's own stderr went to the log too
