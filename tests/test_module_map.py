"""The module map in ``docs/architecture.md`` is the code's: every module, with what its own
docstring says it is (``tests/module_map.py`` makes it; ``python -m tests.module_map``
rewrites it)."""

from __future__ import annotations

from .module_map import documented, module_map


def test_the_module_map_in_the_docs_is_the_code_s() -> None:
    assert documented() == module_map(), (
        "docs/architecture.md's module map is stale: run python -m tests.module_map"
    )


def test_every_module_says_what_it_is() -> None:
    empty = [line for line in module_map().splitlines() if line.endswith("|  |")]
    assert not empty, f"modules without a docstring: {empty}"
