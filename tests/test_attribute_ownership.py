"""Every attribute of an object is written from one module: its fields have one owner.

A class cut into files along inheritance lines (``class Producer(Intake)`` in one module,
``class Intake(Ledger)`` in another) shares one ``self`` between them: a field declared in one
file and assigned in another has two owners, whatever the docs say. This walks the AST of
``kinesis_actors`` and ``spark_bridge``: for each class, the attributes its methods assign on
``self`` (plain, augmented and annotated assignments, tuple targets included), joined over
its bases in the package; an attribute assigned from more than one module is a violation.
A component (``self._room = WaitingRoom(...)``) written through its owner (``self._room.count
= 0``, or through a local ``room = self._room``), public fields included, counts as a write of
the component's class from the owner's module: composition that writes its parts' fields is
no better.

Known violations are listed by class below; the test fails when a listed class has none left,
so the list only shrinks. A test on a tiny package of two files shows the check finds one.

An object a method names by its class (a parameter annotated ``slot: Slot[Any]``, a local
annotated so or built there, ``slot = Slot(...)``) is that class's too: a field written
through it from another module while the class itself changes it after ``__init__`` has two
owners (the supervisor set its children's slots' states while each slot's task set them
too). A class that only builds a plain record in ``__init__`` and leaves every later write
to one other module is one owner.

A class that owns a component (``Mailbox`` and its ``Room``) must not write the component's
fields either: a private attribute (``_name``) assigned on anything but ``self`` is a
violation unless a class of the same module assigns it on ``self`` (or lists it in
``__slots__``), as a classmethod building its own class's object does.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("kinesis_actors", "spark_bridge")

# Classes whose fields are written from two modules today, each to become one owner's.
ALLOWED: dict[str, str] = {
    "Entry": "producer plain state: refilled by fill(), stamped by intake, ledger, retries",
}


@dataclass
class _Class:
    module: str
    name: str
    bases: list[str]
    assigned: set[str] = field(default_factory=set)
    # assigned on self by a method other than __init__: what the class changes in its life
    changed: set[str] = field(default_factory=set)
    # self attributes holding a component built here: attribute -> the component's class
    components: dict[str, str] = field(default_factory=dict)
    # fields written through those attributes: attribute -> fields
    through: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def _self_targets(target: ast.expr, self_name: str) -> list[str]:
    if isinstance(target, ast.Attribute):
        value = target.value
        if isinstance(value, ast.Name) and value.id == self_name:
            return [target.attr]
        return []
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _self_targets(element, self_name)]
    if isinstance(target, ast.Starred):
        return _self_targets(target.value, self_name)
    return []


def _assigned_on_self(method: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """What the method assigns on its first argument (inner functions that close over it
    included: they write the same object)."""
    if not method.args.args:
        return set()
    self_name = method.args.args[0].arg
    names: set[str] = set()
    for node in ast.walk(method):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(_self_targets(target, self_name))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            names.update(_self_targets(node.target, self_name))
    return names


def _components(method: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """``self.attr = ClassName(...)`` in the method: attribute -> class name."""
    if not method.args.args:
        return {}
    self_name = method.args.args[0].arg
    found: dict[str, str] = {}
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = node.value.func
            if isinstance(called, ast.Name):
                for target in node.targets:
                    for name in _self_targets(target, self_name):
                        found[name] = called.id
    return found


def _written_through(method: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, set[str]]:
    """Fields assigned on ``self.attr`` (or on a local bound to ``self.attr``) in the method:
    attribute -> fields."""
    if not method.args.args:
        return {}
    self_name = method.args.args[0].arg
    aliases: dict[str, str] = {}
    for node in ast.walk(method):
        if isinstance(node, ast.Assign):
            value = node.value
            if (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id == self_name
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        aliases[target.id] = value.attr

    def owner_of(target: ast.expr) -> str | None:
        if not isinstance(target, ast.Attribute):
            return None
        value = target.value
        if (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id == self_name
        ):
            return value.attr
        if isinstance(value, ast.Name) and value.id in aliases:
            return aliases[value.id]
        return None

    def targets(node: ast.AST) -> list[ast.expr]:
        if isinstance(node, ast.Assign):
            out: list[ast.expr] = []
            for target in node.targets:
                out += target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            return out
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            return [node.target]
        return []

    written: dict[str, set[str]] = defaultdict(set)
    for node in ast.walk(method):
        for target in targets(node):
            owner = owner_of(target)
            if owner is not None and isinstance(target, ast.Attribute):
                written[owner].add(target.attr)
    return written


def _class_named(annotation: ast.expr | None) -> str | None:
    """The class an annotation names (``Slot[Any]``, ``"Slot"``, ``Slot | None``), if one."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        named = [_class_named(side) for side in (annotation.left, annotation.right)]
        real = [name for name in named if name not in (None, "None")]
        return real[0] if len(real) == 1 else None
    return _base_name(annotation) if annotation is not None else None


def typed_writes(tree: ast.AST, known: set[str], real: dict[str, str]) -> dict[str, set[str]]:
    """Fields written on names a function binds to a class of ``known`` (an annotated
    parameter or local, or a local built by calling the class): class -> fields."""

    def known_class(name: str | None) -> str | None:
        name = real.get(name, name) if name is not None else None
        return name if name in known else None

    written: dict[str, set[str]] = defaultdict(set)
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bound: dict[str, str] = {}
        arguments = function.args
        for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs:
            if cls := known_class(_class_named(argument.annotation)):
                bound[argument.arg] = cls
        for node in ast.walk(function):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if cls := known_class(_class_named(node.annotation)):
                    bound[node.target.id] = cls
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and (cls := known_class(node.value.func.id))
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound[target.id] = cls
        for node in ast.walk(function):
            for target in _targets(node):
                for attribute in _attributes(target):
                    value = attribute.value
                    if isinstance(value, ast.Name) and value.id in bound:
                        written[bound[value.id]].add(attribute.attr)
    return written


@functools.cache
def _modules(
    root: Path, packages: tuple[str, ...]
) -> tuple[tuple[str, ast.Module, dict[str, str]], ...]:
    """Every module of ``packages`` under ``root``, parsed once: its dotted name, its tree,
    and the names it imports a class under (``import Supervisor as _S``: ``_S`` -> its
    name), so that such a class is the class."""
    modules = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            aliases = {
                alias.asname: alias.name
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
                if alias.asname
            }
            modules.append((".".join(path.relative_to(root).with_suffix("").parts), tree, aliases))
    return tuple(modules)


def _base_name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Subscript):  # Generic[T], Room[T]
        base = base.value
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None


def collect(root: Path, packages: tuple[str, ...]) -> list[_Class]:
    """Every class of ``packages`` under ``root``, with the attributes its methods assign."""
    classes: list[_Class] = []
    for module, tree, real in _modules(root, packages):
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [real.get(b, b) for b in map(_base_name, node.bases) if b]
            found = _Class(module, node.name, bases)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    static = any(
                        isinstance(d, ast.Name) and d.id == "staticmethod"
                        for d in item.decorator_list
                    )
                    if not static:
                        assigned = _assigned_on_self(item)
                        found.assigned |= assigned
                        if item.name != "__init__":
                            found.changed |= assigned
                        found.components |= {
                            attr: real.get(name, name) for attr, name in _components(item).items()
                        }
                        for attr, names in _written_through(item).items():
                            found.through[attr] |= names
            classes.append(found)
    return classes


def typed_owners(
    root: Path, packages: tuple[str, ...], classes: list[_Class]
) -> dict[str, dict[str, set[str]]]:
    """Fields written through names bound to a class (see :func:`typed_writes`), from the
    modules other than the class's own: class name -> field -> modules. Classes whose name
    is not unique in the packages are left out (which one is meant is not known)."""
    counts: dict[str, int] = defaultdict(int)
    for found in classes:
        counts[found.name] += 1
    home = {found.name: found.module for found in classes if counts[found.name] == 1}
    owners: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for module, tree, real in _modules(root, packages):
        for name, fields in typed_writes(tree, set(home), real).items():
            if home[name] != module:
                for attr in fields:
                    owners[name][attr].add(module)
    return owners


def shared_owners(
    classes: list[_Class], typed: dict[str, dict[str, set[str]]] | None = None
) -> dict[str, dict[str, set[str]]]:
    """Per class (by name): its attributes assigned from more than one module, joined over
    its bases in the scanned packages (a base named by several classes is not followed);
    with ``typed`` (:func:`typed_owners`), also those written through names bound to the
    class from another module while it changes them itself, or from two other modules."""
    by_name: dict[str, list[_Class]] = defaultdict(list)
    for found in classes:
        by_name[found.name].append(found)

    def lineage(found: _Class, seen: set[int]) -> list[_Class]:
        out = [found]
        for base in found.bases:
            candidates = by_name.get(base, [])
            same_module = [c for c in candidates if c.module == found.module]
            chosen = same_module or candidates
            if len(chosen) == 1 and id(chosen[0]) not in seen:
                seen.add(id(chosen[0]))
                out += lineage(chosen[0], seen)
        return out

    # Fields written through an owner's component: class name -> field -> modules.
    from_owners: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for found in classes:
        components: dict[str, str] = {}
        for member in lineage(found, {id(found)}):  # a base's components are the class's too
            components = member.components | components
        for attr, names in found.through.items():
            component = components.get(attr)
            if component is not None and len(by_name.get(component, [])) == 1:
                for name in names:
                    from_owners[component][name].add(found.module)

    violations: dict[str, dict[str, set[str]]] = {}
    for found in classes:
        writers: dict[str, set[str]] = defaultdict(set)
        for member in lineage(found, {id(found)}):
            for name in member.assigned:
                writers[name].add(member.module)
            for name, modules in from_owners.get(member.name, {}).items():
                if len(by_name[member.name]) == 1:
                    writers[name] |= modules
        shared = {name: modules for name, modules in writers.items() if len(modules) > 1}
        for name, modules in (typed or {}).get(found.name, {}).items():
            owners = modules | ({found.module} if name in found.changed else set())
            if len(owners) > 1:
                shared[name] = shared.get(name, set()) | owners
        if shared:
            violations[found.name] = shared
    return violations


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _attributes(target: ast.expr) -> list[ast.Attribute]:
    if isinstance(target, ast.Attribute):
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [found for element in target.elts for found in _attributes(element)]
    if isinstance(target, ast.Starred):
        return _attributes(target.value)
    return []


def _slots(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
        ):
            for element in ast.walk(item.value):
                if isinstance(element, ast.Constant) and isinstance(element.value, str):
                    names.add(element.value)
    return names


def foreign_writes(root: Path, packages: tuple[str, ...]) -> list[str]:
    """Assignments to a private attribute of an object other than ``self`` (``self._room._x``,
    ``room._x``) in a module none of whose classes owns that attribute, as ``module: code``."""
    found: list[str] = []
    for module, tree, _ in _modules(root, packages):
        owned: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                owned |= _slots(node)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        owned |= _assigned_on_self(item)
        selves: set[int] = set()  # the targets `self.x` of methods, by node id
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.args.args:
                self_name = node.args.args[0].arg
                for inner in ast.walk(node):
                    for target in _targets(inner):
                        for attribute in _attributes(target):
                            value = attribute.value
                            if isinstance(value, ast.Name) and value.id == self_name:
                                selves.add(id(attribute))
        for node in ast.walk(tree):
            for target in _targets(node):
                for attribute in _attributes(target):
                    if (
                        _private(attribute.attr)
                        and id(attribute) not in selves
                        and attribute.attr not in owned
                    ):
                        found.append(f"{module}: {ast.unparse(attribute)}")
    return found


def _package(tmp_path: Path, files: dict[str, str]) -> None:
    """A tiny package ``pkg`` under ``tmp_path`` of ``files`` (name -> source)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in files.items():
        (package / name).write_text(source)


def test_no_module_writes_the_private_fields_of_another_modules_object() -> None:
    assert not foreign_writes(ROOT, SCANNED)


def test_the_check_finds_a_field_of_a_component_written_by_its_owner(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "_part.py": (
                "class Part:\n    def __init__(self):\n        self._count = 0\n\n"
                "    @classmethod\n    def make(cls):\n"
                "        part = cls()\n        part._count = 1\n"
            ),
            "_whole.py": (
                "from ._part import Part\n\n"
                "class Whole:\n"
                "    def __init__(self):\n"
                "        self._part = Part()\n"
                "    def bump(self):\n"
                "        self._part._count += 1\n"
            ),
        },
    )
    assert foreign_writes(tmp_path, ("pkg",)) == ["pkg._whole: self._part._count"]


def test_every_attribute_is_written_from_one_module() -> None:
    classes = collect(ROOT, SCANNED)
    violations = shared_owners(classes, typed_owners(ROOT, SCANNED, classes))
    new = {name: shared for name, shared in violations.items() if name not in ALLOWED}
    assert not new, "fields written from two modules: " + "; ".join(
        f"{name}: " + ", ".join(f"{attr} in {sorted(mods)}" for attr, mods in sorted(s.items()))
        for name, s in sorted(new.items())
    )
    gone = sorted(set(ALLOWED) - set(violations))
    assert not gone, f"no longer violations, remove from ALLOWED: {gone}"


def test_the_check_finds_a_field_a_subclass_in_another_module_writes(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "_base.py": (
                "class Base:\n    def __init__(self):\n"
                "        self.count = 0\n        self.own = 1\n"
            ),
            "_derived.py": (
                "from ._base import Base\n\n"
                "class Derived(Base):\n"
                "    def bump(self):\n"
                "        self.count += 1\n"
                "        self.mine, (self.other, _) = 1, (2, 3)\n"
            ),
        },
    )
    violations = shared_owners(collect(tmp_path, ("pkg",)))
    assert violations == {"Derived": {"count": {"pkg._base", "pkg._derived"}}}


def test_the_check_sees_through_a_base_imported_under_another_name(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "_base.py": "class Base:\n    def __init__(self):\n        self.count = 0\n",
            "_derived.py": (
                "from ._base import Base as _B\n\n"
                "class Derived(_B):\n"
                "    def bump(self):\n"
                "        self.count += 1\n"
            ),
        },
    )
    violations = shared_owners(collect(tmp_path, ("pkg",)))
    assert violations == {"Derived": {"count": {"pkg._base", "pkg._derived"}}}


def test_the_check_finds_a_field_an_owner_writes_through_its_component(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "_part.py": (
                "class Part:\n    def __init__(self):\n"
                "        self.count = 0\n        self.size = 0\n"
            ),
            "_whole.py": (
                "from ._part import Part\n\n"
                "class Whole:\n"
                "    def __init__(self):\n"
                "        self._part = Part()\n"
                "    def bump(self):\n"
                "        self._part.count += 1\n"
                "        part = self._part\n"
                "        part.size = 2\n"
            ),
        },
    )
    violations = shared_owners(collect(tmp_path, ("pkg",)))
    assert violations == {
        "Part": {"count": {"pkg._part", "pkg._whole"}, "size": {"pkg._part", "pkg._whole"}}
    }


def test_the_check_finds_a_field_written_through_a_typed_name_and_by_its_class(
    tmp_path: Path,
) -> None:
    """The supervisor's case: it set ``slot.state`` on its children's slots (a parameter
    annotated ``Slot[Any]``) while each slot's own task set ``self.state`` too. A record
    built in ``__init__`` and written by one other module is one owner."""
    _package(
        tmp_path,
        {
            "_slot.py": (
                "class Slot:\n"
                "    def __init__(self):\n        self.state = 0\n        self.due = None\n"
                "    def ready(self):\n        self.state = 1\n"
            ),
            "_boss.py": (
                "from ._slot import Slot as _Slot\n\n"
                "class Boss:\n"
                "    def down(self, slot: '_Slot[int]') -> None:\n"
                "        slot.state = 2\n"
                "        slot.due = 5.0\n"
                "    def add(self) -> None:\n"
                "        made = _Slot()\n"
                "        made.state = 3\n"
            ),
        },
    )
    classes = collect(tmp_path, ("pkg",))
    assert shared_owners(classes) == {}
    violations = shared_owners(classes, typed_owners(tmp_path, ("pkg",), classes))
    assert violations == {"Slot": {"state": {"pkg._slot", "pkg._boss"}}}
