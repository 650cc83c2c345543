"""No package of ours imports another's private modules.

A private module is one with a path segment starting with ``_`` (``__init__`` and ``__main__``
excepted). Inside one package its modules import each other freely; across a boundary only
public modules and the names their ``__all__`` exports may be imported. The boundaries:

* each layer of ``kinesis_actors``: the subpackages (``client``, ``consumer``, ``producer``,
  ``records``, ``runtime``, ``metrics``, ``cli``) and the top-level modules (``errors``,
  ``_validate``, ``_deprecated``, ``sync``, ``local``), plus ``kinesis_actors/__init__.py``
  itself;
* ``spark_bridge``, and each package under ``benchmarks`` (``benchmarks`` and
  ``benchmarks.loadtarget``).

``kinesis_actors._validate`` is private to the ``kinesis_actors`` package as a whole: the
configuration checks every layer shares, so that a ``ConfigError`` reads the same wherever it
is raised. Layers may import it; ``spark_bridge`` and ``benchmarks`` may not (they check their
own options, or pass them to the public constructors that check them). ``_deprecated`` is the
same kind of module: how every layer says that an old name was replaced.

The walk is of the AST, so imports inside functions and under ``TYPE_CHECKING`` count too, as
do ``importlib.import_module("...")`` calls with a literal name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("kinesis_actors", "spark_bridge", "benchmarks")

# Modules private to the whole kinesis_actors package, importable by any of its layers.
PACKAGE_PRIVATE = {"kinesis_actors._validate", "kinesis_actors._deprecated"}

# Known violations in files this change could not edit, each with its follow-up. An entry is
# (importing file, imported module); the test fails if an entry is no longer needed, so the list
# only shrinks.
#: Imports of another package's private modules allowed, each with its reason: none now.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    file: str
    line: int
    module: str  # absolute dotted name of the module imported from (or imported)
    name: str | None  # for ``from module import name``: the name; else None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(path: Path) -> str:
    """The package a relative import in ``path`` is relative to."""
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def resolve(path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = package_of(path).split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(path: Path) -> list[Import]:
    return imports_in(path.read_text(encoding="utf-8"), path)


def imports_in(source: str, path: Path) -> list[Import]:
    """Every import in ``source``, read as the file at ``path`` (which need not exist)."""
    rel = str(path.relative_to(ROOT))
    found: list[Import] = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend(Import(rel, node.lineno, alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = resolve(path, node)
            found.extend(Import(rel, node.lineno, module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Call) and is_import_module(node):
            found.append(Import(rel, node.lineno, node.args[0].value, None))  # type: ignore[attr-defined]
    return found


def is_import_module(call: ast.Call) -> bool:
    """``importlib.import_module("absolute.name")`` or ``import_module(...)``, literal name."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return (
        called == "import_module"
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
        and not call.args[0].value.startswith(".")
    )


def is_private(segment: str) -> bool:
    """``_x`` is private; dunders (``__init__``, ``__main__``, ``__version__``) are not."""
    return segment.startswith("_") and not (segment.startswith("__") and segment.endswith("__"))


def boundary(module: str) -> str:
    """The package or layer that owns ``module``."""
    parts = module.split(".")
    if parts[0] == "kinesis_actors":
        return ".".join(parts[:2])
    if parts[0] == "benchmarks":
        # benchmarks.loadtarget is a package of its own; benchmarks' plain modules are one.
        if len(parts) > 1 and (ROOT / "benchmarks" / parts[1]).is_dir():
            return ".".join(parts[:2])
        return "benchmarks"
    return parts[0]


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def exported(module: str) -> set[str] | None:
    """The ``__all__`` of one of our public modules, or None when it declares none."""
    path = ROOT.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(t, ast.Name) and t.id == "__all__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
            and node.value is not None
        ):
            return set(ast.literal_eval(node.value))
    return None


def violation(imp: Import, importer: str) -> str | None:
    """Why ``imp`` crosses a boundary into something private, or None if it does not."""
    if imp.module.split(".")[0] not in SCANNED:
        return None
    target = imp.module
    # ``from pkg import _mod`` imports a module as surely as ``import pkg._mod``.
    if imp.name is not None and is_module(f"{target}.{imp.name}"):
        target = f"{target}.{imp.name}"
        name = None
    else:
        name = imp.name
    owner = boundary(target)
    if owner == boundary(importer):
        return None
    if target in PACKAGE_PRIVATE and importer.startswith("kinesis_actors."):
        return None
    segments = target.split(".")
    if any(is_private(s) for s in segments):
        what = f"{name} from " if name not in (None, "*") else ""
        return f"imports {what}the private module {target}"
    if name is not None and name != "*" and not (name.startswith("__") and name.endswith("__")):
        if is_private(name):
            return f"imports the private name {name} from {target}"
        public = exported(target)
        if public is not None and name not in public and target.startswith("kinesis_actors"):
            return f"imports {name} from {target}, which does not export it (__all__)"
    return None


def all_modules() -> list[Path]:
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py"))


def violations() -> list[tuple[str, str, str]]:
    """(location, imported module, why) for every crossing import, allowed ones included."""
    found = []
    for path in all_modules():
        importer = module_name(path)
        for imp in imports_of(path):
            why = violation(imp, importer)
            if why is not None:
                found.append((f"{imp.file}:{imp.line}", imp.module, why))
    return found


def test_no_package_imports_another_packages_private_modules() -> None:
    unexpected = [
        f"{where}: {why}"
        for where, module, why in violations()
        if (where.partition(":")[0], module) not in ALLOWED
    ]
    assert not unexpected, "private imports across package boundaries:\n" + "\n".join(unexpected)


def test_allowed_exceptions_are_still_needed() -> None:
    seen = {(where.partition(":")[0], module) for where, module, _ in violations()}
    stale = [f"{file} → {module}" for file, module in ALLOWED if (file, module) not in seen]
    assert not stale, "remove these from ALLOWED, they are fixed:\n" + "\n".join(stale)


@pytest.mark.parametrize(
    ("importer", "source", "expected"),
    [
        # spark_bridge reaching into the consumer: private.
        ("spark_bridge._x", "from kinesis_actors.consumer._positions import ShardKey", True),
        ("spark_bridge._x", "from kinesis_actors.consumer import _positions", True),
        ("spark_bridge._x", "import kinesis_actors.consumer._positions", True),
        ("spark_bridge._x", "from kinesis_actors._validate import check_type", True),
        ("spark_bridge._x", "from kinesis_actors.consumer import Consumer", False),
        ("spark_bridge._x", "from kinesis_actors.consumer import NotExported", True),
        ("spark_bridge._x", "from kinesis_actors import Producer", False),
        ("spark_bridge._x", "from ._range import ShardRange", False),
        # Between layers, relative: private unless shared package infrastructure.
        ("kinesis_actors.producer._x", "from ..client._retry import RetryPolicy", True),
        ("kinesis_actors.producer._x", "from ..client import RetryPolicy", False),
        ("kinesis_actors.producer._x", "from .._validate import check_type", False),
        ("kinesis_actors.producer._x", "from ._config import ProducerConfig", False),
        ("kinesis_actors.cli._x", "from ..consumer._reader import PollingReader", True),
        ("benchmarks.x", "from kinesis_actors.client._h2stream import H2Stream", True),
        ("benchmarks.x", "from benchmarks.loadtarget._config import Limits", True),
        ("benchmarks.loadtarget.x", "from ._config import Limits", False),
        ("benchmarks.x", "import importlib; importlib.import_module('kinesis_actors._v')", True),
        ("kinesis_actors.metrics.otel", "from .. import __version__", False),
    ],
)
def test_the_check_itself(importer: str, source: str, expected: bool) -> None:
    path = ROOT.joinpath(*importer.split(".")).with_suffix(".py")
    reasons = [violation(imp, importer) for imp in imports_in(source, path)]
    assert any(why is not None for why in reasons) is expected, reasons
