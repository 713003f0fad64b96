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
import contextlib
import contextvars
import os
import sys
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec

from ._cli_approvals import add_approvals
from ._cli_checks import (
    UsageError,
    check_agent,
    check_complete,
    check_path,
    check_schema,
    check_url,
    output_name,
)
from ._cli_cost import add_cost
from ._cli_decide import add_decisions
from ._cli_runs import list_entries, parse_since, print_runs, resolve_run
from ._cli_serve import add_serve
from ._version import __version__
from .core.events import ChildRunStarted, Event, encode_event
from .errors import AgentLedgerError, RunNotFoundError
from .listing import OUTCOMES, RunQuery
from .redaction import redact_events
from .runtree import check_run_tree
from .store import EventStore, SupportsAclose

__all__ = ("DEFAULT_AGENT", "DEFAULT_STORE", "main", "open_store")

DEFAULT_STORE = "agentledger.db"
DEFAULT_AGENT = "agentledger.demo:build_demo_agent"
T = TypeVar("T")

_OPENED: contextvars.ContextVar[list[EventStore] | None] = contextvars.ContextVar(
    "agentledger_cli_stores", default=None
)
"""The stores the running command opened, for ``main`` to close when it is done."""


def open_store(spec: str | None, *, create: bool = False) -> EventStore:
    """The store ``spec`` names: a ``postgresql://`` URL, a ``.jsonl`` path or a directory
    (JSONL), anything else a SQLite file. Without ``create``, the store must exist and is opened
    read-only (reading never changes it, and a read-only file can be read)."""
    spec = check_path(spec or os.environ.get("AGENTLEDGER_STORE") or DEFAULT_STORE, "the store")
    if spec.startswith(("postgresql://", "postgres://")):
        from agentledger.adapters.stores.postgres import PostgresEventStore

        return _opened(PostgresEventStore(spec, read_only=not create))
    path = Path(spec)
    if not create and not path.exists():
        raise UsageError(f"no event store at {path} (run `agentledger demo` first, or pass --store)")
    if path.suffix == ".jsonl" or path.is_dir():
        from agentledger.adapters.stores.jsonl import JsonlEventStore

        return _opened(JsonlEventStore(path, read_only=not create))
    from agentledger.adapters.stores.sqlite import SqliteEventStore

    return _opened(SqliteEventStore(path, read_only=not create))


def _opened(store: EventStore) -> EventStore:
    """``store``, closed when the command ``main`` runs is over (inside ``main``)."""
    opened = _OPENED.get()
    if opened is not None:
        opened.append(store)
    return store


def _close(stores: list[EventStore]) -> None:
    """Close what a command opened, each once, the last opened first: its connections and
    threads are released and a writable store commits what it holds."""
    seen: set[int] = set()
    while stores:
        store = stores.pop()
        if id(store) not in seen and isinstance(store, SupportsAclose):
            seen.add(id(store))
            _run(store.aclose)


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
    print_runs(_run(lambda: list_entries(store, query)), as_json=args.json, console=_console())
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
    events = redact_events(_run(lambda: _with_children(store, args.run)))
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
    from .replay import RecordedRun, load

    store = open_store(args.store)
    _resolve(store, args)
    loaded = _run(lambda: load(store, args.run))
    check_schema(loaded.events, args.run)
    recorded = RecordedRun(redact_events(loaded.events), prior=redact_events(loaded.prior))
    last = len(recorded.events) - 1
    seq = last if args.at is None else args.at
    if not 0 <= seq <= last:
        raise UsageError(f"run {args.run} has events 0..{last}; --at {seq} is outside")
    encoded = msgspec.json.encode(recorded.state_at(seq))
    print((encoded if args.json else msgspec.json.format(encoded, indent=2)).decode())
    return 0


def _replay(args: argparse.Namespace) -> int:
    from ._cli_replay import CANNOT_REPLAY, AgentUnavailable, load_agent, print_report
    from .replay import RecordedRun, load, replay

    warnings.simplefilter("ignore", FutureWarning)
    store = open_store(args.store)
    _resolve(store, args)

    async def go() -> int:
        recorded: RecordedRun = await load(store, args.run)
        check_schema(recorded.events, args.run)
        check_complete(recorded.events, args.run)
        try:
            agent = load_agent(args.agent or DEFAULT_AGENT, recorded)
        except AgentUnavailable as exc:  # this code cannot replay at all: `git bisect run` skips it
            print(f"agentledger: {_one_line(exc)}", file=sys.stderr)
            return CANNOT_REPLAY
        agent.store = None
        if not args.force:
            check_agent(recorded.started, agent, args.agent)
        report = await replay(recorded, agent, tools=args.tools)
        return print_report(report, as_json=args.json, accept_drift=args.accept_drift)

    return _run(go)


def _check(args: argparse.Namespace) -> int:
    from ._cli_replay import resolve_agent
    from ._cli_suite import check_runs, print_verdicts, progress_printer, totals, write_junit

    warnings.simplefilter("ignore", FutureWarning)
    if args.limit < 0:
        raise UsageError(f"--limit must be 0 (every run) or more, not {args.limit}")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be 1 or more, not {args.jobs}")
    if args.junit is not None:  # before any run is replayed, not after
        check_path(args.junit, "--junit")
        folder = Path(args.junit).resolve().parent
        if not folder.is_dir():
            raise UsageError(f"--junit {args.junit}: there is no folder {folder}")
    query = RunQuery(
        limit=args.limit or None,
        session=args.session,
        outcome=args.outcome,
        since=parse_since(args.since) if args.since is not None else None,
    )
    store = open_store(args.store)
    # The agent once, before any run: what cannot give one is a usage error, said once.
    source = resolve_agent(args.agent or DEFAULT_AGENT)
    agent = source.check()
    named = f"--agent {args.agent}" if args.agent else "the demo agent (no --agent given)"
    selected: list[int] = []
    on_selected, on_verdict, bar = progress_printer(selected) if not args.json else (None, None, None)
    try:
        verdicts = _run(
            lambda: check_runs(
                store,
                query,
                source,
                named=named,
                tools=args.tools,
                accept_drift=args.accept_drift,
                skip_unreadable=args.skip_unreadable,
                jobs=args.jobs,
                on_verdict=on_verdict,
                on_selected=on_selected,
            )
        )
    finally:
        if bar is not None:
            bar.stop()
    if args.json:
        print_verdicts(verdicts, as_json=True)
    elif bar is not None:  # a terminal: the rows once the bar is gone
        print_verdicts(verdicts, as_json=False)
    else:  # a pipe: the rows went out as they came
        print(totals(verdicts))
    if args.junit is not None:
        write_junit(args.junit, verdicts)
    if all(v.verdict == "skipped" for v in verdicts):  # a gate that checked nothing does not pass
        whose = f", not of {named} ({agent.name or agent.id!r})" if agent is not None else ""
        print(
            f"agentledger: no run was checked (none selected, or all of other agents{whose})", file=sys.stderr
        )
        return 1
    return 1 if any(v.failed for v in verdicts) else 0


def _diff(args: argparse.Namespace) -> int:
    from ._cli_suite import print_diff
    from .replay import diff_runs

    first_store = open_store(args.store)
    second_store = open_store(args.store_b) if args.store_b else first_store
    first = _run(lambda: resolve_run(first_store, args.run_a))
    second = _run(lambda: resolve_run(second_store, args.run_b))
    a = _run(lambda: _read(first_store, first))
    b = _run(lambda: _read(second_store, second))
    status: int = print_diff(first, second, diff_runs(a, b), as_json=args.json)
    return status


def _export(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    _resolve(store, args)
    if args.cassette:
        from .replay import load
        from .replay.cassette import tree_events, write_cassette

        check_path(args.cassette, "--cassette")
        folder = Path(args.cassette).resolve().parent
        if not folder.is_dir():  # like --output: the folder is the user's to make
            raise UsageError(f"--cassette {args.cassette}: there is no folder {folder}")
        tree = _run(lambda: load(store, args.run))  # with its session's earlier runs
        check_complete(tree.events, args.run)
        for _, run in tree.walk():
            missing = [e.child_run_id for e in run.child_links() if e.call_id not in run.children]
            if missing:
                raise AgentLedgerError(
                    f"sub-agent run {missing[0]} of run {run.run_id} is not in the store: "
                    "a cassette without it would not replay"
                )
        events = tree_events(tree, with_prior=True)
        written = write_cassette(args.cassette, events)
        runs = len(list(tree.walk()))
        earlier = len({e.run_id for e in tree.prior})
        session = (
            f", and {earlier} earlier run{'s' if earlier != 1 else ''} of its session" if earlier else ""
        )
        print(f"wrote {written} ({len(events)} events, {runs} run{'s' if runs != 1 else ''}{session})")
        return 0
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
        for event in redact_events(events):
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


_Command = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]
"""How a command is added: its name, its handler and its help (``--store`` comes with it)."""


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
    add_approvals(command, lambda args: open_store(args.store), _console)
    add_cost(command, lambda args: open_store(args.store))
    add_decisions(command, open_store, DEFAULT_AGENT)
    add_serve(command, open_store, DEFAULT_AGENT)
    show = command("show", _show, "show a run's timeline: iterations, tools offered, calls, session changes")
    show.add_argument("run", help=_RUN_HELP)
    show.add_argument("--json", action="store_true", help="one JSON document: the runs and their events")
    state = command("state", _state, "print a run's state (tools, session, transcript) at an event")
    state.add_argument("run", help=_RUN_HELP)
    state.add_argument("--at", type=int, help="the event's seq (default: the last)")
    state.add_argument("--json", action="store_true", help="one compact JSON document on one line")
    _add_replay(command)
    _add_check(command)
    diff = command("diff", _diff, "list every difference between two runs; exit 1 if they differ")
    diff.add_argument("run_a", help=_RUN_HELP)
    diff.add_argument("run_b", help=_RUN_HELP)
    diff.add_argument("--store-b", help="the store of RUN_B, when it is another one")
    diff.add_argument("--json", action="store_true", help="one JSON object per difference")
    view = command("view", _view, "write a self-contained HTML page to explore a run (no network needed)")
    view.add_argument("run", help=_RUN_HELP)
    view.add_argument("--output", "-o", help="file to write (default: RUN.html)")
    view.add_argument("--no-content", action="store_true", help="hide message, argument and result content")
    _add_export(command)
    return parser


def _add_replay(command: _Command) -> None:
    """``replay``: one run tree against the agent's code."""
    replay = command(
        "replay", _replay, "rerun a run tree against the agent's code; exit 1 on a difference or drift"
    )
    replay.add_argument("run", help=_RUN_HELP)
    replay.add_argument(
        "--agent", help=f"module:name of the Agent or its factory (default: the demo, {DEFAULT_AGENT})"
    )
    replay.add_argument(
        "--tools",
        choices=("recorded", "live", "test"),
        default="recorded",
        help=(
            "recorded: tools return what the log says; live: tool bodies run "
            "(models never do, nor calls a human approved); test: every tool body runs, approved "
            "calls included. A tool marked @tool(replay='recorded') never runs"
        ),
    )
    replay.add_argument(
        "--force", action="store_true", help="replay even if the run was recorded by an agent of another name"
    )
    replay.add_argument(
        "--accept-drift", action="store_true", help="exit 0 when only the agent's configuration changed"
    )
    replay.add_argument("--json", action="store_true", help="one JSON object per finding, then a summary")


def _add_check(command: _Command) -> None:
    """``check``: recorded runs replayed as a regression suite."""
    check = command("check", _check, "replay recorded runs as a regression suite; exit 1 if any differs")
    check.add_argument(
        "--agent", help=f"module:name of the Agent or its factory (default: the demo, {DEFAULT_AGENT})"
    )
    check.add_argument(
        "--tools",
        choices=("test", "live", "recorded"),
        default="test",
        help=(
            "test (default): every tool runs its current code, calls a human approved included; "
            "live: the same but for approved calls; recorded: no tool body runs. A tool marked "
            "@tool(replay='recorded') is answered from the log in every mode"
        ),
    )
    check.add_argument(
        "--accept-drift",
        action="store_true",
        help="a run whose only finding is drift passes, as 'drift accepted'",
    )
    check.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="skip streams that are no readable run with a warning, instead of failing the check",
    )
    check.add_argument("--limit", type=int, default=0, help="at most this many runs, newest first (0: all)")
    check.add_argument("--session", help="only runs of this session")
    check.add_argument("--outcome", choices=OUTCOMES, help="only runs that ended so")
    check.add_argument("--since", help="only runs started since: a duration (2h, 7d) or a UTC date or time")
    check.add_argument("--jobs", type=int, default=1, help="replay this many runs side by side")
    check.add_argument("--junit", metavar="PATH", help="write a JUnit XML file: one test case per run")
    check.add_argument("--json", action="store_true", help="one JSON object per run")


def _add_export(command: _Command) -> None:
    """``export``: a run's events as JSONL, a cassette, or OTLP traces."""
    export = command("export", _export, "write a run's events, or send them as OTLP traces")
    export.add_argument("run", help=_RUN_HELP)
    export.add_argument("--format", choices=("jsonl",), default="jsonl")
    export.add_argument("--output", "-o", help="file to write (default: stdout)")
    export.add_argument(
        "--cassette", metavar="PATH", help="write the run tree as a cassette for agent_cassette tests"
    )
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
    opened: list[EventStore] = []
    token = _OPENED.set(opened)
    try:
        try:
            code = int(args.handler(args))
        except BaseException:
            with contextlib.suppress(Exception):  # what the command raised is the error to show
                _close(opened)
            raise
        _close(opened)  # a store that cannot commit what it holds fails the command
        return code
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
        _OPENED.reset(token)
        warnings.showwarning = shown


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
