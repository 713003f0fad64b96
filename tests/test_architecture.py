"""The package's shape: no import cycles, and no module reaching into another's private names.

Every ``.py`` file under ``runtime/`` (``agentledger``) and ``adapters/`` (``agentledger.adapters``)
is parsed, not imported. An import, wherever it sits (top level, inside a function, under
``TYPE_CHECKING``), is an edge from the importing module to the module it names; ``from pkg
import name`` counts as importing ``pkg.name`` when that is a module. A private name is one with a
single leading underscore. Within one package (a folder: ``agentledger.core``, ``agentledger.run``,
the top-level modules of ``agentledger``, ...) its modules may share private names: that is what
keeps a package's helpers out of its public face. Across packages, importing a private name, or
reading ``obj._name`` (``obj`` not ``self``, ``cls`` or ``super()``) where no class or function
of the reading module's package defines ``_name``, is a reach-in.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"agentledger": ROOT / "runtime", "agentledger.adapters": ROOT / "adapters"}
ALLOWED_PRIVATE = {"_getframe", "_exit"}  # sys._getframe, os._exit: documented standard library API


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    found: dict[str, Path] = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            if package == "agentledger" and parts[:1] == ["adapters"]:
                continue
            found[name] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module if _is_package(module) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{node.module}" if node.module else base


def _imports(module: str) -> Iterator[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import in ``module``."""
    tree = ast.parse(MODULES[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            names = [alias.name for alias in node.names]
            taken = [n for n in names if f"{target}.{n}" not in MODULES]
            if taken or target not in MODULES or not _is_package(target):
                yield target, taken  # ``from . import sibling`` takes nothing of the package's own
            for name in names:
                if f"{target}.{name}" in MODULES:
                    yield f"{target}.{name}", []


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        graph[module] = {target for target, _ in _imports(module) if target in MODULES and target != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _owned(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, their attributes and slots."""
    owned: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            owned.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _own(node.value):
            owned.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            owned.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            owned.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value):
            owned.add(node.value)  # __slots__ entries
    return owned


def _own(value: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: an object's own members, inherited ones included."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def _package(module: str) -> str:
    """The package a module belongs to: itself for a package's ``__init__``, else its parent."""
    return module if _is_package(module) else module.rpartition(".")[0]


def _owned_by_package() -> dict[str, set[str]]:
    owned: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        owned.setdefault(_package(module), set()).update(_owned(ast.parse(path.read_text())))
    return owned


OWNED = _owned_by_package()


def _reach_ins(module: str) -> list[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = _package(module)
    owned = OWNED[package]
    found = []
    for target, names in _imports(module):
        if target in MODULES and _package(target) == package:
            continue  # a sibling's private names are the package's own
        found += [f"{path.name}: from {target} import {n}" for n in names if _private(n)]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        if node.attr not in owned and node.attr not in ALLOWED_PRIVATE and not _own(node.value):
            found.append(f"{path.name}:{node.lineno}: .{node.attr}")
    return found


def _room(module: str) -> str:
    """What the module map names a module by: a package's folder (``core/``), else its file."""
    parts = module.split(".")
    depth = 3 if module.startswith("agentledger.adapters.") else 2
    head = ".".join(parts[:depth])
    if len(parts) >= depth and head in MODULES and _is_package(head):
        return head
    return module


def _room_name(room: str) -> str:
    path = MODULES[room].relative_to(ROOT)
    if path.name == "__init__.py" and room not in ("agentledger", "agentledger.adapters"):
        return f"`{path.parent.as_posix()}/`"
    return f"`{path.as_posix()}`"


def floors() -> dict[str, int]:
    """Each room's floor in the import graph: 1 + the highest floor of what it imports."""
    rooms: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        rooms.setdefault(_room(module), set()).update(_room(t) for t in targets)
    found: dict[str, int] = {}

    def floor(room: str) -> int:
        if room not in found:
            found[room] = 0  # a circle would read as floor 0 here; test_no_import_cycles refuses one
            found[room] = 1 + max((floor(t) for t in rooms[room] - {room}), default=0)
        return found[room]

    for room in rooms:
        floor(room)
    return found


def _members(room: str) -> list[str]:
    """The files a room holds, by name: a package's modules (its ``__init__.py`` first), else
    the room's own file."""
    if not _is_package(room) or room in ("agentledger", "agentledger.adapters"):
        return []
    folder = MODULES[room].parent
    inside = sorted(
        MODULES[m].relative_to(folder).as_posix()
        for m in MODULES
        if _room(m) == room and MODULES[m] != MODULES[room]
    )
    return ["__init__.py", *inside]


def module_map() -> str:
    """The module map docs/architecture.md embeds: every room by floor, the top floor first, a
    package's room with every file it holds."""
    by_floor = floors()
    rows = ["| floor | room | its files |", "|---|---|---|"]
    for level in sorted(set(by_floor.values()), reverse=True):
        for room in sorted(by_floor, key=_room_name):
            if by_floor[room] == level:
                files = ", ".join(f"`{f}`" for f in _members(room))
                rows.append(f"| {level} | {_room_name(room)} | {files} |")
    return "\n".join(rows)


MAP_START, MAP_END = "<!-- modules:start -->", "<!-- modules:end -->"


def test_the_module_map_is_drawn_from_the_import_graph() -> None:
    """docs/architecture.md embeds exactly ``module_map()``: every module, on its import floor."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    embedded = page.split(MAP_START, 1)[1].split(MAP_END, 1)[0]
    assert embedded.strip("\n") == module_map()


def test_every_file_of_the_tree_is_on_the_map() -> None:
    """Each ``.py`` file under ``runtime/`` and ``adapters/`` is named on the embedded map, as a
    room of its own or as a file of its package's room."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    embedded = page.split(MAP_START, 1)[1].split(MAP_END, 1)[0]
    named: set[Path] = set()
    for row in embedded.strip().splitlines()[2:]:
        _, _, room, files, _ = (cell.strip() for cell in row.split("|"))
        path = ROOT / room.strip("`")
        if files:
            named.update(path / f.strip().strip("`") for f in files.split(","))
        else:
            named.add(path)
    tree = {p for folder in SOURCES.values() for p in folder.rglob("*.py")}
    assert tree - named == set()
    assert len(tree) > 100  # the walk saw the package


def test_modules_are_found() -> None:
    """The walk sees the package's modules (a broken walk would pass everything below)."""
    expected = {"agentledger.core.machine", "agentledger.run.spec", "agentledger.adapters.temporal"}
    assert expected <= set(MODULES)
    assert "agentledger.run.spec" in _graph()["agentledger.agent"]


def test_no_import_cycles() -> None:
    """No two modules of the package import each other, directly or around a circle."""
    assert _cycles(_graph()) == []


def test_a_cycle_is_found() -> None:
    """The cycle finder reports a circle (so an empty answer above means something)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_reaches_into_another_packages_private_names() -> None:
    """No ``from x import _name`` across packages, no ``obj._name`` the module's package does not define."""
    found = {module: _reach_ins(module) for module in MODULES}
    assert {module: names for module, names in found.items() if names} == {}


def test_core_imports_nothing_above_it() -> None:
    """``agentledger.core`` imports only itself (the sans-IO rule, in the import graph)."""
    graph = _graph()
    core = [m for m in graph if m.startswith("agentledger.core")]
    assert {(m, t) for m in core for t in graph[m] if not t.startswith("agentledger.core")} == set()


def test_the_private_rule_is_per_package() -> None:
    """Siblings share private names; a module of another package may not take them."""
    assert _package("agentledger.core.machine") == _package("agentledger.core") == "agentledger.core"
    assert _package("agentledger.session") == "agentledger"
    assert "_answered_calls" in OWNED["agentledger.core"]
    assert "_answered_calls" not in OWNED["agentledger.run"]
