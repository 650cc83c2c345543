"""Without the ``otel`` extra nothing changes: the library imports, and only the export says why."""

from __future__ import annotations

import subprocess
import sys


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_without_opentelemetry_the_library_imports_and_the_export_names_the_extra() -> None:
    result = run(
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the extra were not installed\n"
        "import kinesis_actors, kinesis_actors.metrics, kinesis_actors.cli, spark_bridge\n"
        "from kinesis_actors import Producer, Consumer, KinesisClient\n"
        "print(len(kinesis_actors.metrics.INSTRUMENTS))\n"
        "try:\n"
        "    import kinesis_actors.metrics.otel\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    count, message = result.stdout.splitlines()
    assert int(count) > 40
    assert "pip install 'kinesis-actors[otel]'" in message


def test_importing_the_library_never_loads_opentelemetry() -> None:
    result = run(
        "import sys\n"
        "import kinesis_actors, kinesis_actors.metrics, kinesis_actors.cli\n"
        "print(sorted(name for name in sys.modules if name.startswith('opentelemetry')))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
