"""The README's and docs' Python blocks are the files under ``examples/``.

Every ```python block of ``README.md`` and ``docs/*.md`` sits right under a marker naming the
example it shows::

    <!-- example: examples/consumer_group.py -->          the whole file
    <!-- example: examples/runtime_tour.py#mailbox -->     one region of it

A region is the lines between ``# [name]`` and ``# [/name]`` (dedented; several spans of one
name are joined by a blank line). A whole file is shown without those marker lines and
without ``# isort: off`` / ``# isort: on``. ``tests/test_examples.py`` fails when a block and
its file differ, or a block has no marker; ``python -m tests.docs_examples`` rewrites every
marked block from its file (edit the example, then run it).
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- example: (?P<path>examples/[\w./-]+\.py)(?:#(?P<region>[\w-]+))? -->$")
REGION_LINE = re.compile(r"^\s*# \[(?P<end>/?)(?P<name>[\w-]+)\]\s*$")
HIDDEN = re.compile(r"^\s*# isort: (off|on)\s*$")


@dataclass(frozen=True)
class Block:
    """One ```python block of a document: where it is, what it shows, what it holds."""

    doc: Path
    line: int  # 1-based line of the opening fence
    source: str | None  # "examples/x.py" or "examples/x.py#region"; None without a marker
    text: str  # the block's content, ending with a newline
    start: int  # offsets of the content in the document
    end: int


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    found = []
    for fence in re.finditer(r"^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE):
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.match(before)
        source = None
        if marker is not None:
            source = marker["path"] + (f"#{marker['region']}" if marker["region"] else "")
        found.append(
            Block(
                doc,
                text.count("\n", 0, fence.start()) + 1,
                source,
                fence.group(1),
                fence.start(1),
                fence.end(1),
            )
        )
    return found


def render(source: str) -> str:
    """What a block showing ``source`` must hold."""
    path, _, region = source.partition("#")
    lines = (ROOT / path).read_text().splitlines()
    if not region:
        kept = [line for line in lines if not REGION_LINE.match(line) and not HIDDEN.match(line)]
        return "\n".join(kept).strip("\n") + "\n"
    spans: list[list[str]] = []
    inside: list[str] | None = None
    for line in lines:
        mark = REGION_LINE.match(line)
        if mark is not None and mark["name"] == region:
            if mark["end"]:
                if inside is None:
                    raise ValueError(f"{path}: '# [/{region}]' without its start")
                spans.append(inside)
                inside = None
            else:
                inside = []
        elif inside is not None and not REGION_LINE.match(line):
            inside.append(line)
    if inside is not None or not spans:
        raise ValueError(f"{path}: no closed region '# [{region}]' ... '# [/{region}]'")
    shown = [textwrap.dedent("\n".join(span)).strip("\n") for span in spans]
    return "\n\n".join(shown) + "\n"


def write() -> int:
    """Rewrite every marked block from its example; return how many changed."""
    changed = 0
    for doc in documents():
        text = doc.read_text()
        for block in reversed(blocks(doc)):  # from the end: earlier offsets stay valid
            if block.source is None:
                continue
            wanted = render(block.source)
            if wanted != block.text:
                text = text[: block.start] + wanted + text[block.end :]
                changed += 1
        doc.write_text(text)
    return changed


if __name__ == "__main__":
    count = write()
    print(f"{count} block(s) rewritten from examples/")
    sys.exit(0)
