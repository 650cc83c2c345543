"""The wheel ships the library and nothing else.

Built from this checkout with pip and the dev extra's hatchling (no build isolation, so no
network), then installed into a fresh virtual environment. The wheel is installed without
its dependencies, which the fresh environment borrows read-only from the test's own
environment through a path entry; that path entry does not run the test environment's
``.pth`` files, so the editable checkout (and its ``benchmarks`` and ``tests`` folders) stays
out of the fresh environment's imports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = {"kinesis_actors", "spark_bridge"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"),
            *("--quiet", "--wheel-dir", str(out), str(ROOT)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (found,) = out.glob("kinesis_actors-*.whl")
    return found


@pytest.fixture(scope="module")
def fresh(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with only the wheel installed in it; returns its bin/."""
    return _environment(wheel, tmp_path_factory.mktemp("fresh"), sysconfig.get_paths()["purelib"])


@pytest.fixture(scope="module")
def without_spark(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Like :func:`fresh`, but its dependencies lack PySpark, as for a person who installed
    ``kinesis-actors`` without the ``spark`` extra: they come from a folder of links to the
    test environment's packages, PySpark's left out."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    borrowed = tmp_path_factory.mktemp("no-spark-packages")
    for entry in purelib.iterdir():
        if not entry.name.lower().startswith("pyspark"):
            (borrowed / entry.name).symlink_to(entry)
    return _environment(wheel, tmp_path_factory.mktemp("fresh-no-spark"), str(borrowed))


def _environment(wheel: Path, home: Path, dependencies: str) -> Path:
    """A virtual environment in ``home`` with the wheel installed and ``dependencies`` (a
    folder) on its path; returns its bin/."""
    venv.create(home, with_pip=False, symlinks=True)
    python = home / "bin" / "python"
    installed = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"),
            *("--no-deps", "--no-index", str(wheel)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    site = _site_packages(python)
    # The dependencies (anyio, httpx, pyarrow, ...) come from the test environment.
    (site / "_dependencies.pth").write_text(dependencies + "\n")
    return home / "bin"


def _site_packages(python: Path) -> Path:
    where = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(where.stdout.strip())


def _run(
    bin_dir: Path, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``bin_dir/args[0]`` in ``cwd`` (outside the checkout, so that neither the working
    directory on ``sys.path`` nor ``PYTHONPATH`` can find the checkout's packages), without
    the checkout's local servers unless ``env`` points at them."""
    hidden = {"PYTHONPATH", "KINESIS_LOCAL_DIR", "DYNALITE_DIR"}
    environment = {key: value for key, value in os.environ.items() if key not in hidden}
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**environment, **(env or {})},
        timeout=timeout,
        check=False,
    )


def test_the_wheel_holds_the_two_packages_and_their_py_typed(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    metadata = {top for top in tops if top.endswith(".dist-info")}
    assert tops - metadata == LIBRARY
    assert "kinesis_actors/py.typed" in names
    assert not [name for name in names if "/tests/" in name or name.startswith("benchmarks")]


def test_installed_into_a_fresh_environment_it_imports_and_runs_help(
    fresh: Path, tmp_path: Path
) -> None:
    site = _site_packages(fresh / "python")
    imported = _run(
        fresh,
        "python",
        "-c",
        "import kinesis_actors, spark_bridge; print(kinesis_actors.__file__); "
        "print(spark_bridge.__file__)",
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    assert all(line.startswith(str(site)) for line in imported.stdout.splitlines())
    # Nothing but the library (and its metadata and our path entry) went into site-packages.
    tops = {entry.name for entry in site.iterdir()}
    assert {top for top in tops if not top.endswith((".dist-info", ".pth"))} == LIBRARY
    assert not {"benchmarks", "tests"} & tops
    for name in ("benchmarks", "tests"):
        absent = _run(fresh, "python", "-c", f"import {name}", cwd=tmp_path)
        assert absent.returncode == 1 and "ModuleNotFoundError" in absent.stderr, name

    helped = _run(fresh, "kinesis-actors", "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "tail" in helped.stdout and "bench" in helped.stdout


def test_bench_outside_a_checkout_says_where_the_suite_is(fresh: Path, tmp_path: Path) -> None:
    ran = _run(fresh, "kinesis-actors", "bench", "--quick", cwd=tmp_path)
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1
    assert "source checkout" in ran.stderr and "make bench" in ran.stderr


def _one_line(ran: subprocess.CompletedProcess[str]) -> str:
    assert ran.returncode == 2, (ran.stdout, ran.stderr)
    assert ran.stderr.count("\n") == 1 and "Traceback" not in ran.stderr, ran.stderr
    return ran.stderr


def test_the_demo_without_pyspark_says_how_to_get_it_before_any_stage(
    without_spark: Path, tmp_path: Path
) -> None:
    ran = _run(without_spark, "kinesis-actors", "demo", cwd=tmp_path)
    said = _one_line(ran)
    assert "pip install 'kinesis-actors[spark]'" in said and "--no-spark" in said
    assert ran.stdout == ""  # no stage started: no server, no stream


def test_the_demo_without_the_local_server_names_its_install_command(
    without_spark: Path, tmp_path: Path
) -> None:
    said = _one_line(_run(without_spark, "kinesis-actors", "demo", "--no-spark", cwd=tmp_path))
    assert "npm install --prefix .tools kinesis-local@" in said and "KINESIS_LOCAL_DIR" in said


# The demo's first stages on the local server: ~15 s on two idle cores, more when busy.
@pytest.mark.slow
def test_the_demo_without_spark_or_dynalite_runs_and_skips_the_group_stage_in_one_line(
    without_spark: Path, tmp_path: Path
) -> None:
    """Installed from the wheel, with the local Kinesis installed where KINESIS_LOCAL_DIR says
    (as the README's Install section tells) and no dynalite: the consumer-group stage is
    skipped with one line naming what to install, and the rest runs and holds."""
    server = ROOT / ".tools" / "node_modules" / "kinesis-local"
    ran = _run(
        without_spark,
        *("kinesis-actors", "demo", "--no-spark", "--records", "2000", "--shards", "2"),
        cwd=tmp_path,
        env={"KINESIS_LOCAL_DIR": str(server)},
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert "consumer-group stage is skipped" in ran.stderr
    assert "npm install --prefix .tools dynalite@" in ran.stderr
    assert "every record exactly once, in order per key: yes" in ran.stdout
    assert "consumer group" not in ran.stdout
