"""The wheel ships the library and nothing else (issue 16, "The wheel").

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
    home = tmp_path_factory.mktemp("fresh")
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
    (site / "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return home / "bin"


def _site_packages(python: Path) -> Path:
    where = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(where.stdout.strip())


def _run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``bin_dir/args[0]`` in ``cwd`` (outside the checkout, so that neither the working
    directory on ``sys.path`` nor ``PYTHONPATH`` can find the checkout's packages)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
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
