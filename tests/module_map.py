"""The module map in ``docs/architecture.md``, made from the code: every module of
``kinesis_actors`` and ``spark_bridge`` with the first paragraph of its docstring.

``tests/test_module_map.py`` fails when the map in the docs differs from this; rewrite it with
``python -m tests.module_map``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
START = "<!-- module-map:start (python -m tests.module_map rewrites it) -->"
END = "<!-- module-map:end -->"
PACKAGES = ("kinesis_actors", "spark_bridge")


def _summary(path: Path) -> str:
    """The docstring's first paragraph on one line (``|`` escaped for the table)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or ""
    paragraph = doc.strip().split("\n\n")[0]
    return " ".join(paragraph.split()).replace("|", "\\|")


def module_map() -> str:
    """The map: one table per package folder, modules in name order."""
    out: list[str] = []
    for package in PACKAGES:
        folders = sorted({path.parent for path in (ROOT / package).rglob("*.py")})
        for folder in folders:
            modules = sorted(
                path
                for path in folder.glob("*.py")
                if path.name not in ("__init__.py", "__main__.py")
            )
            if not modules:
                continue
            name = folder.relative_to(ROOT).as_posix()
            out += [f"**`{name}/`**", "", "| module | what it is |", "| --- | --- |"]
            out += [f"| `{path.name}` | {_summary(path)} |" for path in modules]
            out.append("")
    return "\n".join(out).rstrip("\n")


def documented() -> str:
    """The map as ``docs/architecture.md`` has it now."""
    text = DOC.read_text()
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def rewrite() -> None:
    text = DOC.read_text()
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{START}\n{module_map()}\n{END}{tail}")


if __name__ == "__main__":
    rewrite()
    sys.exit(0)
