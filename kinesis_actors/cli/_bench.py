"""``kinesis-actors bench``: run the benchmark suite of a source checkout.

The suite (``benchmarks/`` in the repository: the scenarios, the peers it compares against,
a load-target server) is not part of the installed package: a top-level ``benchmarks``
package in site-packages would collide with any other wheel that ships one, and the library
has no use for it. So this command finds a checkout (the working directory or one of its
parents, else the folder the library itself was loaded from, which is the checkout for an
editable install) and runs ``python -m benchmarks.suite`` there in a process of its own,
passing every flag through: the suite owns its flags and its ``--help``. The library never
imports the suite, so the two cannot import each other in a cycle.

Without a checkout, or without the ``bench`` extra (the peers, and matplotlib for the
plots), the command says so in one line and exits 2 instead of failing half-way.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["BENCH_MODULES", "find_checkout", "run_bench"]

#: Import names of the bench extra's packages (async-kinesis installs ``kinesis``).
BENCH_MODULES = {
    "matplotlib": "matplotlib",
    "aiokpl": "aiokpl",
    "kinesis": "async-kinesis",
    "boto3": "boto3",
    "aws_kinesis_agg": "aws-kinesis-agg",
    "aiobotocore": "aiobotocore",
}
#: How long a suite interrupted by Ctrl-C (it got the signal too) may take to stop its
#: load targets before this command stops waiting for it.
_INTERRUPT_GRACE = 15.0


def find_checkout(start: Path | None = None) -> Path | None:
    """The root of a kinesis-actors source checkout holding the benchmark suite, or None.

    Looked for in ``start`` (default: the working directory) and its parents, then in the
    folder above the imported ``kinesis_actors`` package (an editable install's checkout).
    """
    here = (start or Path.cwd()).resolve()
    library = Path(__file__).resolve().parents[2]
    for candidate in (here, *here.parents, library):
        if (candidate / "benchmarks" / "suite.py").is_file() and (
            candidate / "kinesis_actors"
        ).is_dir():
            return candidate
    return None


def _missing() -> list[str]:
    missing = []
    for module, distribution in BENCH_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(distribution)
    return missing


def run_bench(argv: Sequence[str]) -> int:
    """Run the checkout's suite with ``argv``; returns its exit status, or 2 with one line
    on standard error when there is no checkout or the bench extra is missing."""
    checkout = find_checkout()
    if checkout is None:
        print(
            "kinesis-actors: error: the benchmark suite is not part of the installed package; "
            "it runs from a source checkout of kinesis-actors: run `make bench` (or "
            "`kinesis-actors bench`) inside the checkout",
            file=sys.stderr,
        )
        return 2
    missing = _missing()
    if missing:
        print(
            "kinesis-actors: error: bench needs the bench extra "
            f"(missing: {', '.join(missing)}); install it with: "
            "pip install 'kinesis-actors[bench]' (in the checkout: make setup)",
            file=sys.stderr,
        )
        return 2
    path = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(checkout), path] if path else [str(checkout)]),
    }
    suite = subprocess.Popen([sys.executable, "-m", "benchmarks.suite", *argv], env=env)
    try:
        return suite.wait()
    except KeyboardInterrupt:  # the suite got the same Ctrl-C: let it stop its targets
        try:
            suite.wait(timeout=_INTERRUPT_GRACE)
        except subprocess.TimeoutExpired:
            suite.kill()
            suite.wait()
        raise
