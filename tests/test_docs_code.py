"""docs/api.md says what the code is: its error tree is the classes' tree, and its signature
blocks match the functions and classes they name.

The error tree is the ```text block under "### Errors": a name's parent is the name it hangs
under, ``(also X)`` its other bases, ``(a X)`` a warning's base. A signature block is a ```python
block of stubs (bodies ``...``): each ``def`` and each ``class`` with methods is looked up in the
public modules and its parameters (names, kinds, which have defaults) compared with the code's.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentledger
import agentledger.errors

API = Path(__file__).resolve().parent.parent / "docs" / "api.md"
TREE_LINE = re.compile(
    r"^(?P<lead>[│ ]*(?:[├└]── )?)(?P<name>[A-Z]\w+)(?: \((?:also|an?) (?P<bases>[\w, ]+)\))?"
)


def _blocks(language: str) -> Iterator[tuple[str, str]]:
    """(heading, text) of every fenced block of ``language`` in docs/api.md."""
    heading, inside = "", False
    lines: list[str] = []
    for line in API.read_text(encoding="utf-8").splitlines():
        if not inside and line.startswith("#"):
            heading = line.lstrip("# ")
        elif not inside and line == f"```{language}":
            inside, lines = True, []
        elif inside and line == "```":
            inside = False
            yield heading, "\n".join(lines)
        elif inside:
            lines.append(line)


def documented_tree() -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """The error tree of docs/api.md: name -> (parent, other bases)."""
    text = next(text for heading, text in _blocks("text") if heading == "Errors")
    tree: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    path: list[str] = []
    for line in text.splitlines():
        match = TREE_LINE.match(line)
        if match is None:
            continue
        depth = len(match["lead"]) // 4
        path[depth:] = [match["name"]]
        bases = tuple(b.strip() for b in match["bases"].split(",")) if match["bases"] else ()
        if depth == 0 and bases:  # a warning: "(a RuntimeWarning)" is its base
            tree[match["name"]] = (bases[0], ())
        else:
            tree[match["name"]] = (path[depth - 1] if depth else None, bases)
    return tree


def code_tree() -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """The same tree from the classes: every error and warning of agentledger.errors, and those
    the package exports."""
    classes = {
        getattr(module, name)
        for module in (agentledger.errors, agentledger)
        for name in module.__all__
        if isinstance(getattr(module, name), type) and issubclass(getattr(module, name), BaseException)
    }
    tree: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for cls in classes:
        bases = [b.__name__ for b in cls.__bases__]
        if issubclass(cls, agentledger.AgentLedgerError) and cls is not agentledger.AgentLedgerError:
            tree[cls.__name__] = (bases[0], tuple(bases[1:]))
        elif issubclass(cls, Warning):
            tree[cls.__name__] = (bases[0], ())
        else:
            tree[cls.__name__] = (None, ())
    return tree


def test_the_error_tree_is_the_classes_tree() -> None:
    """Every documented error hangs where its class does, with the same other bases, and every
    error and warning the package has is in the tree."""
    assert documented_tree() == code_tree()


# -- signatures ---------------------------------------------------------------------------------

MODULES = (
    "agentledger",
    "agentledger.core",
    "agentledger.run",
    "agentledger.replay",
    "agentledger.session",
    "agentledger.store",
    "agentledger.chat",
    "agentledger.subagents",
    "agentledger.structured",
    "agentledger.testing",
    "agentledger.testing.stores",
    "agentledger.testing.clients",
    "agentledger.runtree",
    "agentledger.cost",
    "agentledger.redaction",
    "agentledger.adapters.mcp",
    "agentledger.adapters.chat.scripted",
    "agentledger.replay.cassette",
)


def _lookup(name: str) -> Any:
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        if name in getattr(module, "__all__", ()):
            return getattr(module, name)
    return None


def _documented(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, str, bool]]:
    """(name, kind, has a default) per parameter of a stub."""
    args = node.args
    found: list[tuple[str, str, bool]] = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        found.append((arg.arg, kind, default))
    if args.vararg is not None:
        found.append((args.vararg.arg, "VAR_POSITIONAL", False))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        found.append((arg.arg, "KEYWORD_ONLY", kw_default is not None))
    if args.kwarg is not None:
        found.append((args.kwarg.arg, "VAR_KEYWORD", False))
    return found


def _actual(function: Callable[..., Any]) -> list[tuple[str, str, bool]] | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    return [
        (p.name, p.kind.name, p.default is not inspect.Parameter.empty) for p in signature.parameters.values()
    ]


def _stubs() -> Iterator[tuple[str, Callable[..., Any], ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """(where, the code's callable, the stub, whether it is a method) per stub whose name a
    public module exports."""
    for heading, text in _blocks("python"):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        if any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) for n in tree.body):
            continue  # a program, not a block of stubs
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                target = _lookup(node.name)
                if callable(target) and not isinstance(target, type):
                    yield f"{heading}: {node.name}", target, node, False
            elif isinstance(node, ast.ClassDef):
                cls = _lookup(node.name)
                if not isinstance(cls, type):
                    continue
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        member = inspect.getattr_static(cls, item.name, None)
                        if isinstance(member, staticmethod | classmethod):
                            member = getattr(cls, item.name)
                        if callable(member):
                            yield f"{heading}: {node.name}.{item.name}", member, item, True


STUBS = list(_stubs())


def test_stubs_are_found() -> None:
    """The walk finds the signature blocks (an empty walk would pass everything below)."""
    names = {where.split(": ", 1)[1] for where, *_ in STUBS}
    assert {"RunMachine.handle", "RunMachine.from_events", "RunLoop.step", "ChatResponse.__init__"} <= names
    assert len(STUBS) > 100


@pytest.mark.parametrize(("where", "code", "stub", "method"), STUBS, ids=[s[0] for s in STUBS])
def test_documented_signatures_match_the_code(
    where: str, code: Callable[..., Any], stub: ast.FunctionDef | ast.AsyncFunctionDef, method: bool
) -> None:
    """A stub in docs/api.md has the parameters of the function it names: names, kinds, defaults."""
    actual = _actual(code)
    if actual is None:
        pytest.skip(f"{where}: no signature to read")
    documented = _documented(stub)
    if method and documented[:1] and documented[0][0] in ("self", "cls") and actual[:1] != documented[:1]:
        documented = documented[1:]  # a bound classmethod has no cls in its signature
    assert documented == actual, where
