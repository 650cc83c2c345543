"""The README's and docs' Python examples are files under ``examples/``, and they run.

Each example starts its own embedded local servers, so it runs as a person would run it:
``python examples/x.py`` in a subprocess, with a deadline, its output checked. The docs'
blocks are those files (``tests/docs_examples.py``): a block that drifts from its file, or a
Python block that names no file, fails here.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import docs_examples

ROOT = docs_examples.ROOT
EXAMPLES = ROOT / "examples"
#: Far above an example's run (measured at a load average of 13-20 on 2 cores: 3-16 s each,
#: the Spark one 212 s), for a machine shared with other test runs; a hung example still
#: fails instead of hanging.
DEADLINE = 300.0
SPARK_DEADLINE = 900.0

#: What each example must print, line by line (regular expressions, matched in order).
EXPECTED: dict[str, list[str]] = {
    "producer.py": [
        r"PutResult\(shard_id='shardId-\d+', sequence_number='\d+', sub_sequence_number=0\)",
        r"1000 records sent",
    ],
    "producer_failures.py": [
        r"parked 3 records: ResourceNotFoundError; the block left quietly",
        r"unretrieved: producer for 'payments' failed: 3 record\(s\) could not be written",
    ],
    "consumer.py": [
        r"shardId-\d+: \d+ records from b'order \d+'",
        r"resumed: \[b'order 100'\]",
    ],
    "consumer_group.py": [r"shardId-\d+: \d+ records", r"read 100 records"],
    "consumer_tour.py": [
        r"iterated: 200 records; positions saved for \['orders', 'payments'\]",
        r"run\(handler\): 100 records",
        r"efo: 100 records through consumer 'orders-app'",
    ],
    "metrics.py": [r'kinesis_actors_producer_records_sent_total\{.*stream="orders"\} 1000\.0'],
    "dynamodb_client.py": [
        r"table my-app: ACTIVE",
        r"someone else renewed the lease first",
        r"shardId-000000000000: counter 8",
    ],
    "runtime_tour.py": [
        r"mailbox: accepted=True, first out 'record'",
        r"^5 500 0 0\.0$",  # occupied, weight, senders waiting, longest wait
        r"supervisor: the processor summed 55",
        r"unwrap_sole: the block's KeyError\('region'\) left as itself",
        r"BlockingRuntime: the sink got 2500 rows",
    ],
    "spark_streaming.py": [r"100 records through Spark; first: 'ORDER 0'"],
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_example(name: str, deadline: float) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),  # this tree's packages, whatever the venv points at
        "METRICS_PORT": str(free_port()),
        "PYSPARK_PYTHON": sys.executable,
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=deadline,
        check=False,
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done.stdout


def check_output(name: str, output: str) -> None:
    lines = output.splitlines()
    at = 0
    for pattern in EXPECTED[name]:
        while at < len(lines) and not re.search(pattern, lines[at]):
            at += 1
        assert at < len(lines), (
            f"{name} did not print {pattern!r} (in order); it printed:\n{output}"
        )
        at += 1


def test_every_python_block_of_the_docs_is_an_example_file() -> None:
    unmarked, drifted = [], []
    for doc in docs_examples.documents():
        for block in docs_examples.blocks(doc):
            where = f"{doc.relative_to(ROOT)}:{block.line}"
            if block.source is None:
                unmarked.append(where)
            elif docs_examples.render(block.source) != block.text:
                drifted.append(f"{where} ({block.source})")
    assert not unmarked, f"python blocks without '<!-- example: examples/... -->': {unmarked}"
    assert not drifted, (
        f"blocks that differ from their example: {drifted}; edit the example, then run "
        "`python -m tests.docs_examples`"
    )


def test_every_example_is_shown_and_checked() -> None:
    shown = {
        block.source.partition("#")[0].removeprefix("examples/")
        for doc in docs_examples.documents()
        for block in docs_examples.blocks(doc)
        if block.source is not None
    }
    files = {path.name for path in EXAMPLES.glob("*.py")}
    assert files == shown == set(EXPECTED)


def test_a_drifted_block_is_told_from_its_file(tmp_path: Path) -> None:
    """The check can fail: a block one character off its file differs from its rendering."""
    block = next(b for b in docs_examples.blocks(ROOT / "README.md") if b.source)
    assert block.source is not None
    assert docs_examples.render(block.source) == block.text
    assert docs_examples.render(block.source) != block.text.replace("orders", "order", 1)


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {"spark_streaming.py"}))
def test_the_example_runs_and_prints_what_it_says(name: str) -> None:
    check_output(name, run_example(name, DEADLINE))


@pytest.mark.slow
def test_the_spark_example_runs_in_local_mode() -> None:
    """README's and docs/spark.md's queries: orders -> orders-upper -> parquet."""
    check_output("spark_streaming.py", run_example("spark_streaming.py", SPARK_DEADLINE))
