"""The ``agentledger`` command: run the demo, list, show, inspect, replay and export runs.

Runs are read from an event store: ``--store PATH`` or ``$AGENTLEDGER_STORE``, by default the
SQLite file ``agentledger.db`` in the current directory. A path ending in ``.jsonl`` (or an
existing directory) is a JSONL store; a ``postgresql://`` URL is a PostgreSQL store.
Problems with the store or the log are reported in one line on stderr, never as a traceback.
Reading commands open SQLite stores read-only; outputs go where the user said, or into the
current directory under a name made safe from the run id (see ``_cli_checks``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec

from ._cli_checks import (
    UsageError,
    check_agent,
    check_complete,
    check_path,
    check_schema,
    check_url,
    output_name,
)
from ._cli_runs import parse_since, print_runs, resolve_run
from ._version import __version__
from .core.events import ChildRunStarted, Event, encode_event
from .errors import AgentLedgerError, ReplayDivergence, RunNotFoundError
from .listing import OUTCOMES, RunQuery
from .runtree import check_run_tree
from .store import EventStore, list_runs

__all__ = ("DEFAULT_AGENT", "DEFAULT_STORE", "main", "open_store")

DEFAULT_STORE = "agentledger.db"
DEFAULT_AGENT = "agentledger.demo:build_demo_agent"
T = TypeVar("T")


def open_store(spec: str | None, *, create: bool = False) -> EventStore:
    """The store ``spec`` names: a ``postgresql://`` URL, a ``.jsonl`` path or a directory
    (JSONL), anything else a SQLite file. Without ``create``, the store must exist and is opened
    read-only (reading never changes it, and a read-only file can be read)."""
    spec = check_path(spec or os.environ.get("AGENTLEDGER_STORE") or DEFAULT_STORE, "the store")
    if spec.startswith(("postgresql://", "postgres://")):
        from agentledger.adapters.stores.postgres import PostgresEventStore

        return PostgresEventStore(spec, read_only=not create)
    path = Path(spec)
    if not create and not path.exists():
        raise UsageError(f"no event store at {path} (run `agentledger demo` first, or pass --store)")
    if path.suffix == ".jsonl" or path.is_dir():
        from agentledger.adapters.stores.jsonl import JsonlEventStore

        return JsonlEventStore(path, read_only=not create)
    from agentledger.adapters.stores.sqlite import SqliteEventStore

    return SqliteEventStore(path, read_only=not create)


def _run(func: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(func)


async def _read(store: EventStore, run_id: str) -> list[Event]:
    events = await store.read(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    return check_schema(events, run_id)


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 200  # piped output: keep lines whole rather than cropped to 80 columns
    return console


# -- commands -------------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from ._sources import RandomIds, SystemClock
    from .demo import run_demo
    from .timeline import timeline

    warnings.simplefilter("ignore", FutureWarning)  # the demo uses experimental add_tools
    store: EventStore | bool = False if args.no_store else open_store(args.store, create=True)
    response, session = _run(lambda: run_demo(store, RandomIds(), clock=SystemClock()))
    print(response.text)
    print()
    print(f"run {response.run_id}: {len(response.events)} events")
    print(timeline(response.events))
    print()
    print(f"session {session.session_id} state: {session.state.snapshot()}")
    if not args.no_store:
        where = args.store or os.environ.get("AGENTLEDGER_STORE") or DEFAULT_STORE
        print(f"recorded in {where}: try `agentledger show {response.run_id}`")
    return 0


def _runs(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise UsageError(f"--limit must be 0 (every run) or more, not {args.limit}")
    query = RunQuery(
        limit=args.limit or None,
        agent=args.agent,
        session=args.session,
        outcome=args.outcome,
        since=parse_since(args.since) if args.since is not None else None,
    )
    store = open_store(args.store)
    print_runs(_run(lambda: list_runs(store, query)), as_json=args.json, console=_console())
    return 0


def _resolve(store: EventStore, args: argparse.Namespace) -> str:
    """The run ``args.run`` names (a whole id, or a unique prefix of one)."""
    args.run = _run(lambda: resolve_run(store, args.run))
    return str(args.run)


async def _with_children(store: EventStore, run_id: str) -> list[Event]:
    """A run's events followed by those of its sub-agent runs, at any depth."""
    events = await _read(store, run_id)
    read = {run_id: events[:]}
    for event in events:  # grows as children are read, so grandchildren are read too
        if isinstance(event, ChildRunStarted):
            child = event.child_run_id
            if child in read:  # each run is read once; a link back to one is a cycle, refused below
                continue
            read[child] = await store.read(child)
            events.extend(read[child])
    check_run_tree(read)
    return events


def _show(args: argparse.Namespace) -> int:
    from .render import plain_run, render_run, run_document

    store = open_store(args.store)
    _resolve(store, args)
    events = _run(lambda: _with_children(store, args.run))
    console = _console()
    if args.json:
        print(msgspec.json.encode(run_document(events)[0]).decode())
    elif console.is_terminal:
        console.print(render_run(events))
    else:
        print(plain_run(events))
    return 0


def _view(args: argparse.Namespace) -> int:
    from agentledger.adapters.export.html import write_html

    from .replay import load

    store = open_store(args.store)
    _resolve(store, args)

    async def collect() -> tuple[list[Event], list[Event]]:
        prior = (await load(store, args.run)).prior
        return await _with_children(store, args.run), prior

    target = Path(check_path(args.output, "--output") if args.output else output_name(args.run, ".html"))
    events, prior = _run(collect)
    write_html(events, target, include_content=not args.no_content, prior=prior)
    print(f"wrote {target} ({target.stat().st_size:,} bytes): open it in a browser")
    return 0


def _state(args: argparse.Namespace) -> int:
    from .replay import load

    store = open_store(args.store)
    _resolve(store, args)
    recorded = _run(lambda: load(store, args.run))
    check_schema(recorded.events, args.run)
    last = len(recorded.events) - 1
    seq = last if args.at is None else args.at
    if not 0 <= seq <= last:
        raise UsageError(f"run {args.run} has events 0..{last}; --at {seq} is outside")
    encoded = msgspec.json.encode(recorded.state_at(seq))
    print((encoded if args.json else msgspec.json.format(encoded, indent=2)).decode())
    return 0


def _load_agent(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise UsageError(f"--agent must look like package.module:name, not {spec!r}")
    if os.getcwd() not in sys.path:  # a module in the current directory, as `python -m` finds it
        sys.path.insert(0, os.getcwd())
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load the agent {spec!r}: {exc}") from exc
    from .agent import Agent

    try:
        agent = target if isinstance(target, Agent) else target()
    except Exception as exc:  # a function that is no agent factory
        raise UsageError(f"cannot build the agent {spec!r}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(agent, Agent):
        raise UsageError(f"{spec!r} is not an Agent or a function returning one")
    return agent


def _replay(args: argparse.Namespace) -> int:
    from .replay import load, rerun

    warnings.simplefilter("ignore", FutureWarning)
    store = open_store(args.store)
    _resolve(store, args)
    agent = _load_agent(args.agent or DEFAULT_AGENT)
    agent.store = None

    async def go() -> None:
        recorded = await load(store, args.run)
        check_schema(recorded.events, args.run)
        check_complete(recorded.events, args.run)
        if not args.force:
            check_agent(recorded.started, agent, args.agent)
        await rerun(recorded, agent, tools=args.tools)

    try:
        _run(go)
    except ReplayDivergence as exc:
        print(f"run {args.run} diverged at seq {exc.seq}", file=sys.stderr)
        print(exc.diff, file=sys.stderr)
        return 1
    print(f"run {args.run}: no divergence")
    return 0


def _export(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    _resolve(store, args)
    if args.otlp:
        check_url(args.otlp)
    for given, what in ((args.output, "--output"), (args.otlp_file, "--otlp-file")):
        if given is not None:
            check_path(given, what)
    if args.otlp or args.otlp_file:
        return _export_otlp(args, _run(lambda: _with_children(store, args.run)))
    events = _run(lambda: _read(store, args.run))
    out = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
    try:
        for event in events:
            out.write(encode_event(event) + b"\n")
    finally:
        if args.output:
            out.close()
        else:
            out.flush()
    return 0


def _export_otlp(args: argparse.Namespace, events: list[Event]) -> int:
    """The run and its sub-agent runs as OTLP traces: to a receiver or a Collector JSON file."""
    from agentledger.adapters.export.otlp import export_otlp, write_otlp_json_file

    resource = {"openinference.project.name": args.project} if args.project else None
    options: dict[str, Any] = {
        "include_content": args.include_content,
        "provider_name": args.provider,
        "resource": resource,
    }
    if args.otlp_file:
        count = write_otlp_json_file(events, args.otlp_file, **options)
        print(f"wrote {count} spans to {args.otlp_file}")
        return 0
    headers = dict(_header(h) for h in args.header)
    result = _run(
        lambda: export_otlp(events, args.otlp, encoding=args.otlp_encoding, headers=headers, **options)
    )
    rejected = f", {result.rejected_spans} rejected" if result.rejected_spans else ""
    print(f"exported {result.spans} spans to {args.otlp} ({result.attempts} attempt(s){rejected})")
    return 0


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise UsageError(f"--header must look like 'Name: value', not {text!r}")
    return name.strip(), value.strip()


_RUN_HELP = "the run's id, or a unique prefix of it"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentledger", description="Event-sourced LLM agent runs.")
    parser.add_argument("--version", action="version", version=f"agentledger {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, handler: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument(
            "--store", help=f"event store path (default ${{AGENTLEDGER_STORE}} or {DEFAULT_STORE})"
        )
        sub.set_defaults(handler=handler)
        return sub

    demo = command("demo", _demo, "run a scripted agent, print its answer and events, and record them")
    demo.add_argument("--no-store", action="store_true", help="do not record the run")
    runs = command("runs", _runs, "list the recorded runs, newest first")
    runs.add_argument("--limit", type=int, default=50, help="at most this many runs (0: all; default 50)")
    runs.add_argument("--agent", help="only runs of the agent with this name")
    runs.add_argument("--session", help="only runs of this session")
    runs.add_argument("--outcome", choices=OUTCOMES, help="only runs that ended so (or have not ended)")
    runs.add_argument("--since", help="only runs started since: a duration (2h, 7d) or a UTC date or time")
    runs.add_argument("--json", action="store_true", help="one JSON object per run, one per line")
    show = command("show", _show, "show a run's timeline: iterations, tools offered, calls, session changes")
    show.add_argument("run", help=_RUN_HELP)
    show.add_argument("--json", action="store_true", help="one JSON document: the runs and their events")
    state = command("state", _state, "print a run's state (tools, session, transcript) at an event")
    state.add_argument("run", help=_RUN_HELP)
    state.add_argument("--at", type=int, help="the event's seq (default: the last)")
    state.add_argument("--json", action="store_true", help="one compact JSON document on one line")
    replay = command("replay", _replay, "rerun a recorded run against the agent's code; exit 1 on divergence")
    replay.add_argument("run", help=_RUN_HELP)
    replay.add_argument(
        "--agent", help=f"module:name of the Agent or its factory (default: the demo, {DEFAULT_AGENT})"
    )
    replay.add_argument("--tools", choices=("recorded", "live"), default="recorded")
    replay.add_argument(
        "--force", action="store_true", help="replay even if the run was recorded by an agent of another name"
    )
    view = command("view", _view, "write a self-contained HTML page to explore a run (no network needed)")
    view.add_argument("run", help=_RUN_HELP)
    view.add_argument("--output", "-o", help="file to write (default: RUN.html)")
    view.add_argument("--no-content", action="store_true", help="hide message, argument and result content")
    export = command("export", _export, "write a run's events, or send them as OTLP traces")
    export.add_argument("run", help=_RUN_HELP)
    export.add_argument("--format", choices=("jsonl",), default="jsonl")
    export.add_argument("--output", "-o", help="file to write (default: stdout)")
    export.add_argument("--otlp", metavar="URL", help="send the run as traces to an OTLP/HTTP receiver")
    export.add_argument(
        "--otlp-file", metavar="PATH", help="write the traces in the Collector's OTLP JSON file format"
    )
    export.add_argument("--otlp-encoding", choices=("protobuf", "json"), default="protobuf")
    export.add_argument(
        "--header", action="append", default=[], help="an HTTP header 'Name: value' (repeatable)"
    )
    export.add_argument(
        "--include-content", action="store_true", help="include messages, arguments and results"
    )
    export.add_argument("--provider", help="gen_ai.provider.name when the log does not record it")
    export.add_argument("--project", help="the receiver's project (openinference.project.name)")
    return parser


def _warn(message: Warning | str, category: type[Warning], *rest: Any, **kwargs: Any) -> None:
    """Warnings (a torn log record cut off...) as one line, like errors."""
    print(f"agentledger: warning: {message}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text.encode("utf-8", "backslashreplace").decode()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    shown = warnings.showwarning
    warnings.showwarning = _warn
    try:
        return int(args.handler(args))
    except (UsageError, RunNotFoundError) as exc:
        print(f"agentledger: {_one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the output was piped into a reader that stopped early
        sys.stderr.close()
        return 0
    except OSError as exc:  # a file the command was told to write or read
        print(f"agentledger: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except AgentLedgerError as exc:
        print(f"agentledger: {_one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug or a case nothing above expected: still one line, not a traceback
        print(f"agentledger: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 1
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
