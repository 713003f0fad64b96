"""The documentation is executable: its complete examples run and print what the pages say.

A ```python block that contains ``asyncio.run(`` is a complete program. Each one runs in a fresh
interpreter with every warning turned into an error, as the test suite runs; a page that wants a
warning silenced says so in the block itself (``warnings.filterwarnings("ignore",
category=FutureWarning)``). When the block is followed by a line ``Output:`` and a ```text block,
the program's stdout must equal that text. Every other python block is a fragment and must at least
compile. The parts of docs/events.md generated from the code must match the code.

A program whose first line is ``# Needs a running server`` is type checked here and run by the
test that starts that server (tests/e2e/test_llama_server.py).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import msgspec
import pytest

from agentledger.core import events as core_events
from agentledger.core.machine import DERIVED, transition_table

ROOT = Path(__file__).resolve().parent.parent
PAGES = (*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md")
FENCE = re.compile(r"^```(\w*)\s*$")
START, END = "<!-- transitions:start -->", "<!-- transitions:end -->"
NEEDS_SERVER = "# Needs a running server"


class Block(NamedTuple):
    """One fenced block of a page, and the ```text block announced by ``Output:`` after it."""

    page: str
    line: int
    lang: str
    code: str
    output: str | None

    @property
    def complete(self) -> bool:
        return self.lang == "python" and "asyncio.run(" in self.code

    @property
    def needs_server(self) -> bool:
        return self.code.startswith(NEEDS_SERVER)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _fences(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first line, closing line, language) of every fenced block, in order."""
    found: list[tuple[int, int, str]] = []
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        close = index + 1
        while close < len(lines) and lines[close].rstrip() != "```":
            close += 1
        found.append((index, close, match.group(1)))
        index = close + 1
    return found


def _announced_output(lines: list[str], after: int, fences: dict[int, tuple[int, str]]) -> str | None:
    """The ```text block that follows ``Output:`` right after line ``after``, if there is one."""
    index = after + 1
    while index < len(lines) and not lines[index].strip():
        index += 1
    if index >= len(lines) or lines[index].strip() != "Output:":
        return None
    index += 1
    while index < len(lines) and not lines[index].strip():
        index += 1
    close, lang = fences.get(index, (-1, ""))
    assert lang == "text", f"'Output:' after line {after + 1} is not followed by a ```text block"
    return "\n".join(lines[index + 1 : close]) + "\n"


def _blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    fences = _fences(lines)
    by_start = {start: (close, lang) for start, close, lang in fences}
    name = str(page.relative_to(ROOT))
    return [
        Block(
            name,
            start + 1,
            lang,
            "\n".join(lines[start + 1 : close]) + "\n",
            _announced_output(lines, close, by_start) if lang == "python" else None,
        )
        for start, close, lang in fences
    ]


ALL_BLOCKS = [block for page in PAGES for block in _blocks(page)]
PROGRAMS = [block for block in ALL_BLOCKS if block.complete]
FRAGMENTS = [block for block in ALL_BLOCKS if block.lang == "python" and not block.complete]


def _run(block: Block) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env.pop("PYTHONWARNINGS", None)
    with tempfile.TemporaryDirectory() as workdir:
        script = Path(workdir) / "example.py"
        script.write_text(block.code, encoding="utf-8")
        return subprocess.run(
            [sys.executable, "-W", "error", str(script)],
            capture_output=True,
            text=True,
            encoding="utf-8",
            cwd=workdir,
            env=env,
            timeout=120,
            check=False,
        )


def test_the_pages_have_examples() -> None:
    """Every docs page exists and the pages hold complete programs to run."""
    names = {page.name for page in PAGES}
    assert {"quickstart.md", "api.md", "events.md", "differences.md", "tools.md", "README.md"} <= names
    assert len(PROGRAMS) >= 10


@pytest.mark.parametrize("block", [b for b in PROGRAMS if not b.needs_server], ids=str)
def test_example_runs_and_prints_what_the_page_says(block: Block) -> None:
    """A complete example exits cleanly, warnings as errors, and prints its Output: block."""
    result = _run(block)
    assert result.returncode == 0, f"{block} failed:\n{result.stderr}"
    if block.output is not None:
        assert result.stdout == block.output, f"{block} printed:\n{result.stdout}"


def test_examples_type_check() -> None:
    """Every complete example passes mypy (default settings), as a user's copy of it would."""
    from mypy import api

    with tempfile.TemporaryDirectory() as workdir:
        for block in PROGRAMS:
            name = f"{block.page.replace('/', '_').replace('.', '_')}_{block.line}.py"
            (Path(workdir) / name).write_text(block.code, encoding="utf-8")
        options = ["--config-file", "", "--no-incremental", "--ignore-missing-imports", workdir]
        report, errors, status = api.run(options)  # mypy defaults, not this project's strict settings
    assert status == 0, report + errors


@pytest.mark.parametrize("block", FRAGMENTS, ids=str)
def test_fragment_compiles(block: Block) -> None:
    """A python fragment is valid Python (a top-level await is allowed)."""
    compile(block.code, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_output_blocks_belong_to_programs() -> None:
    """Every Output: block follows a complete program, so no printed claim goes unchecked."""
    text_blocks = sum(
        1
        for page in PAGES
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.strip() == "Output:"
    )
    checked = sum(1 for block in PROGRAMS if block.output is not None)
    assert checked == text_blocks
    assert not [str(b) for b in FRAGMENTS if b.output is not None]


def _events_page() -> str:
    return (ROOT / "docs" / "events.md").read_text(encoding="utf-8")


def test_transition_table_is_current() -> None:
    """docs/events.md embeds exactly transition_table() between its markers."""
    text = _events_page()
    assert text.count(START) == 1
    assert text.count(END) == 1
    embedded = text.split(START, 1)[1].split(END, 1)[0]
    assert embedded.strip("\n") == transition_table()


def _event_types() -> list[type[msgspec.Struct]]:
    return [getattr(core_events, name) for name in core_events.__all__ if _is_event(name)]


def _is_event(name: str) -> bool:
    value = getattr(core_events, name)
    return (
        isinstance(value, type)
        and issubclass(value, core_events.EventBase)
        and value is not core_events.EventBase
    )


def _section(text: str, name: str) -> str | None:
    match = re.search(rf"^### `{name}`.*?$(.*?)(?=^#{{2,3}} |\Z)", text, re.M | re.S)
    return match.group(0) if match else None


@pytest.mark.parametrize("event_type", _event_types(), ids=lambda t: t.__name__)
def test_event_is_catalogued(event_type: type[msgspec.Struct]) -> None:
    """Each event type has a section in docs/events.md naming every field and whether it is derived."""
    section = _section(_events_page(), event_type.__name__)
    assert section is not None, f"no '### `{event_type.__name__}`' section"
    heading = section.splitlines()[0]
    assert ("(derived)" in heading) == (event_type in DERIVED), heading
    envelope = set(core_events.EventBase.__struct_fields__)
    missing = [f for f in event_type.__struct_fields__ if f not in envelope and f"`{f}`" not in section]
    assert missing == []
