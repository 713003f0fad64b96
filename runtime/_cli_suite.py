"""``agentledger check`` and ``agentledger diff``: recorded runs as a regression suite.

``check`` selects a store's top-level runs (the ``runs`` filters), replays each run tree against
the agent's current code and gives each a verdict: passed, drift accepted, diverged, drift,
could not replay (with why) or damaged (a stream of the store that is no readable run: it is in
every selection, since what it holds cannot be filtered, unless ``--skip-unreadable``). Runs of
agents other than the one given are skipped and counted. Each verdict says how the replay
answered the run tree's tool calls: run, run by a double, or answered from the log. ``diff``
lines two runs up by iteration and call and lists every difference.
"""

from __future__ import annotations

import sys
import time
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio
import msgspec

from ._cli_replay import AgentSource
from .errors import LogCorruptError, UnreadableStreamWarning
from .listing import DamagedStream, RunQuery, RunSummary, damaged_streams
from .logs import warn
from .replay import Finding, ReplayReport, describe_input, load, replay
from .store import EventStore, list_runs

__all__ = ("RunVerdict", "check_runs", "print_diff", "print_verdicts", "write_junit")

Verdict = Literal["passed", "drift_accepted", "diverged", "drift", "could_not_replay", "damaged", "skipped"]


class RunVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """What ``check`` found for one run."""

    run_id: str
    agent: str
    input: str
    """The start of the run's input, to know the run by."""
    verdict: Verdict
    summary: str
    """One line: the first finding, why the run could not be replayed, or why it was skipped."""
    findings: tuple[dict[str, Any], ...] = ()
    seconds: float = 0.0
    calls: tuple[dict[str, str], ...] = ()
    """Each tool call of the run tree and how the replay answered it (``ReplayedCall``): ``ran``
    (its current code), ``double``, ``recorded`` (from the log) or ``refused``."""

    @property
    def failed(self) -> bool:
        return self.verdict in ("diverged", "drift", "could_not_replay", "damaged")


def _verdict(report: ReplayReport, accept_drift: bool) -> tuple[Verdict, str]:
    if report.cannot_replay:
        return "could_not_replay", report.cannot_replay[0].describe()
    if report.divergences:
        return "diverged", report.divergences[0].describe()
    if report.drift:
        return ("drift_accepted" if accept_drift else "drift"), report.drift[0].describe()
    return "passed", ""


ToolsMode = Literal["recorded", "live", "test"]


class _Gate:
    """What every run of one check is replayed with."""

    def __init__(
        self,
        source: AgentSource,
        named: str,
        tools: ToolsMode,
        accept_drift: bool,
        listing: Sequence[RunSummary],
    ) -> None:
        self.source = source
        self.named = named
        """The agent as the command line gave it, for a line that says whose runs were skipped."""
        self.tools = tools
        self.accept_drift = accept_drift
        self.listing = listing


async def _check_one(store: EventStore, summary: RunSummary, gate: _Gate) -> RunVerdict:
    started = time.perf_counter()
    shown = ""

    def verdict(kind: Verdict, line: str, report: ReplayReport | None = None) -> RunVerdict:
        return RunVerdict(
            run_id=summary.run_id,
            agent=summary.agent,
            input=shown,
            verdict=kind,
            summary=line,
            findings=tuple(f.to_dict() for f in report.findings) if report is not None else (),
            seconds=time.perf_counter() - started,
            calls=tuple(msgspec.to_builtins(c) for c in report.calls) if report is not None else (),
        )

    try:
        try:
            recorded = await load(store, summary.run_id, listing=gate.listing)
        except LogCorruptError as exc:  # read past its first and last record, it does not decode
            reason = "its log does not decode: " + " ".join(str(exc).split())
            return _damaged(DamagedStream(stream=summary.run_id, reason=reason))
        shown = describe_input(recorded.started.messages, 40)
        if not recorded.ended:
            why = "the run is incomplete (interrupted, or still running): no outcome to compare with"
            return verdict("could_not_replay", why)
        agent = gate.source.build(recorded)
        name = agent.name or agent.id
        if name != summary.agent:
            return verdict("skipped", f"a run of agent {summary.agent!r}, not of {gate.named} ({name!r})")
        agent.store = None
        report = await replay(recorded, agent, tools=gate.tools)
    except (Exception, SystemExit) as exc:  # one run that cannot replay does not stop the others
        return verdict("could_not_replay", f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    kind, line = _verdict(report, gate.accept_drift)
    return verdict(kind, line, report)


def _damaged(stream: DamagedStream) -> RunVerdict:
    return RunVerdict(
        run_id=stream.stream,
        agent="?",
        input="",
        verdict="damaged",
        summary=f"stream {stream.stream!r} is no readable run: {stream.reason}",
    )


async def check_runs(
    store: EventStore,
    query: RunQuery,
    source: AgentSource,
    *,
    named: str = "the agent given",
    tools: ToolsMode = "test",
    accept_drift: bool = False,
    skip_unreadable: bool = False,
    jobs: int = 1,
    on_verdict: Callable[[int, RunVerdict], None] | None = None,
    on_selected: Callable[[int], None] | None = None,
) -> list[RunVerdict]:
    """Replay the top-level runs ``query`` selects (newest first), ``jobs`` at a time; the
    verdicts in selection order. ``on_verdict(index, verdict)`` is told of each as it comes.

    A stream that is no readable run is a ``damaged`` verdict in its place (newest first), in
    any selection, unless ``skip_unreadable`` (then it is skipped with a warning, as listings do)."""
    with warnings.catch_warnings():
        if not skip_unreadable:  # each is a verdict of its own, not a warning besides
            warnings.simplefilter("ignore", UnreadableStreamWarning)
        # One listing of every run: it selects, and every load finds its session's runs in it.
        listing = await list_runs(store, RunQuery(limit=None))
        damaged = await damaged_streams(store, listing)
        if skip_unreadable:
            for stream in damaged:
                skipped = UnreadableStreamWarning(f"skipped stream {stream.stream!r}: {stream.reason}")
                warn(skipped, part="stores", stacklevel=2)
            damaged = []
        selected = _selection(listing, damaged, query, await store.streams())
        if on_selected is not None:
            on_selected(len(selected))
        gate = _Gate(source, named, tools, accept_drift, listing)
        verdicts: list[RunVerdict | None] = [None] * len(selected)
        limiter = anyio.CapacityLimiter(max(1, jobs))

        async def one(index: int, entry: RunSummary | DamagedStream) -> None:
            if isinstance(entry, DamagedStream):
                verdict = _damaged(entry)
            else:
                async with limiter:
                    verdict = await _check_one(store, entry, gate)
            verdicts[index] = verdict
            if on_verdict is not None:
                on_verdict(index, verdict)

        async with anyio.create_task_group() as group:
            for index, entry in enumerate(selected):
                group.start_soon(one, index, entry)
    return [v for v in verdicts if v is not None]


def _selection(
    listing: Sequence[RunSummary], damaged: Sequence[DamagedStream], query: RunQuery, streams: Sequence[str]
) -> list[RunSummary | DamagedStream]:
    """The top-level runs ``query`` selects and the damaged streams, newest first, at most
    ``query.limit`` of them."""
    runs: dict[str, RunSummary | DamagedStream] = {
        run.run_id: run for run in listing if run.parent_run_id is None and query.matches(run)
    }
    runs.update((stream.stream, stream) for stream in damaged)
    order = {name: index for index, name in enumerate(reversed(streams))}
    selected = sorted(runs.values(), key=lambda e: order.get(_name(e), -1))
    return selected[: query.limit] if query.limit is not None else selected


def _name(entry: RunSummary | DamagedStream) -> str:
    return entry.stream if isinstance(entry, DamagedStream) else entry.run_id


_LABEL = {
    "passed": "passed",
    "drift_accepted": "drift accepted",
    "diverged": "diverged",
    "drift": "drift",
    "could_not_replay": "could not replay",
    "damaged": "damaged",
    "skipped": "skipped",
}
_COUNTED = ("passed", "drift_accepted", "diverged", "drift", "could_not_replay", "damaged")


def row(verdict: RunVerdict) -> str:
    """One run's line: run, agent, input, verdict (and the first finding or why), and how its
    tool calls were answered."""
    line = f"{verdict.run_id}  {verdict.agent}  {verdict.input!r}  {_LABEL[verdict.verdict]}"
    if verdict.summary and verdict.verdict != "passed":
        line = f"{line}: {verdict.summary}"
    calls = _calls_line(verdict.calls)
    return f"{line} [{calls}]" if calls else line


_SAID = (("ran", "ran"), ("double", "by a double"), ("recorded", "from the log"), ("refused", "refused"))


def _calls_line(calls: Sequence[dict[str, str]]) -> str:
    """``3 calls ran, 1 from the log (pay)``: how many of each, the tools answered otherwise
    than by running named."""
    parts = []
    for how, said in _SAID:
        tools = [c["tool"] for c in calls if c["how"] == how]
        if tools:
            count = f"{len(tools)} call{'s' if len(tools) != 1 else ''} {said}"
            named = "" if how == "ran" else f" ({', '.join(dict.fromkeys(tools))})"
            parts.append(count + named)
    return ", ".join(parts)


def counts(verdicts: Sequence[RunVerdict]) -> dict[str, int]:
    """How many runs got each verdict."""
    return {name: sum(v.verdict == name for v in verdicts) for name in _LABEL}


def totals(verdicts: Sequence[RunVerdict]) -> str:
    found = counts(verdicts)
    checked = len(verdicts) - found["skipped"]
    parts = [f"{found[name]} {_LABEL[name]}" for name in _COUNTED]
    skipped = found["skipped"]
    others = f"; {_runs(skipped)} of other agents skipped" if skipped else ""
    return f"{_runs(checked)} checked: " + ", ".join(parts) + others


def _runs(count: int) -> str:
    return "1 run" if count == 1 else f"{count} runs"


def summary(verdicts: Sequence[RunVerdict]) -> dict[str, Any]:
    """The closing object of ``check --json``: the counts, and whether the gate passed."""
    found = counts(verdicts)
    checked = len(verdicts) - found["skipped"]
    calls = [call for v in verdicts for call in v.calls]
    return {
        "kind": "summary",
        "checked": checked,
        **found,
        "calls": {how: sum(c["how"] == how for c in calls) for how, _ in _SAID},
        "passed": checked > 0 and not any(v.failed for v in verdicts),
    }


def print_verdicts(verdicts: Sequence[RunVerdict], *, as_json: bool) -> None:
    if as_json:
        for verdict in verdicts:
            document = {"kind": "run", **msgspec.to_builtins(verdict)}
            print(msgspec.json.encode(document).decode())
        print(msgspec.json.encode(summary(verdicts)).decode())
        return
    for verdict in verdicts:
        print(row(verdict))
    print(totals(verdicts))


def write_junit(path: str, verdicts: Sequence[RunVerdict]) -> None:
    """A JUnit XML file: one test case per run, a difference as the failure's text, a damaged
    stream or a run that cannot replay as an error; accepted drift passes with its findings in
    ``<system-out>`` and a ``verdict`` property; every case says how its calls were answered."""
    failures = sum(v.verdict in ("diverged", "drift") for v in verdicts)
    errors = sum(v.verdict in ("could_not_replay", "damaged") for v in verdicts)
    skipped = sum(v.verdict == "skipped" for v in verdicts)
    suite = ET.Element(
        "testsuite",
        name="agentledger check",
        tests=str(len(verdicts)),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=f"{sum(v.seconds for v in verdicts):.3f}",
    )
    for verdict in verdicts:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"agentledger.{verdict.agent}",
            name=f"{verdict.run_id}: {verdict.input}",
            time=f"{verdict.seconds:.3f}",
        )
        properties = ET.SubElement(case, "properties")
        ET.SubElement(properties, "property", name="verdict", value=verdict.verdict)
        for how in ("ran", "double", "recorded", "refused"):
            number = sum(c["how"] == how for c in verdict.calls)
            ET.SubElement(properties, "property", name=f"calls.{how}", value=str(number))
        if verdict.verdict in ("diverged", "drift"):
            failure = ET.SubElement(case, "failure", message=verdict.summary, type=verdict.verdict)
            failure.text = "\n".join(_finding_lines(verdict.findings))
        elif verdict.verdict in ("could_not_replay", "damaged"):
            ET.SubElement(case, "error", message=verdict.summary, type=verdict.verdict)
        elif verdict.verdict == "skipped":
            ET.SubElement(case, "skipped", message=verdict.summary)
        out = []
        if verdict.verdict == "drift_accepted":
            out = ["drift accepted (--accept-drift):", *_finding_lines(verdict.findings)]
        out.extend(f"{c['call_id']} {c['tool']}: {_HOW[c['how']]}" for c in verdict.calls)
        if out:
            ET.SubElement(case, "system-out").text = "\n".join(out)
    ET.indent(suite)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


_HOW = {"ran": "ran", "double": "its double ran", "recorded": "from the log", "refused": "refused"}


def _finding_lines(findings: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for data in findings:
        finding = msgspec.convert({k: v for k, v in data.items() if k != "where"}, Finding)
        lines.append(finding.describe())
        if finding.detail and finding.kind != "cannot_replay":
            lines.extend("    " + line for line in finding.detail.splitlines())
    return lines


def print_diff(first: str, second: str, found: Sequence[Finding], *, as_json: bool) -> int:
    """Print the differences between two runs; 0 when there are none, 1 otherwise."""
    if as_json:
        for finding in found:
            data = finding.to_dict()
            data["a"], data["b"] = data.pop("recorded"), data.pop("rerun")
            data["a_seq"], data["b_seq"] = data.pop("seq"), data.pop("rerun_seq")
            print(msgspec.json.encode(data).decode())
        return 1 if found else 0
    if not found:
        print(f"runs {first} and {second}: no difference")
        return 0
    print(f"runs {first} and {second}: {len(found)} differences")
    for finding in found:
        at = f"seq {finding.seq}" if finding.seq is not None else "-"
        other = f"seq {finding.rerun_seq}" if finding.rerun_seq is not None else "-"
        if finding.seq is None:
            what = f"only in {second}"
        elif finding.rerun_seq is None:
            what = f"only in {first}"
        elif finding.field == "type" and isinstance(finding.rerun, dict):
            what = f"{second} has {finding.rerun.get('type')}"
        else:
            what = f"{_short(finding.recorded)} -> {_short(finding.rerun)}"
        field = f".{finding.field}" if finding.field else ""
        print(f"  {at} / {other}  {finding.event_type}{field}: {what}")
    return 1


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value) if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."


Progress = tuple[Callable[[int], None], Callable[[int, RunVerdict], None], Any]


def progress_printer(total_hint: list[int]) -> Progress:
    """A progress bar on a terminal: (on_selected, on_verdict, the bar to stop), or plain lines
    on a pipe (each run's row as soon as it and the runs before it are done)."""
    if sys.stdout.isatty():
        from rich.progress import Progress

        bar = Progress(transient=True)
        task = bar.add_task("replaying", total=None)

        def selected(count: int) -> None:
            total_hint.append(count)
            bar.update(task, total=count)
            bar.start()

        def done(index: int, verdict: RunVerdict) -> None:
            bar.advance(task)

        return selected, done, bar
    waiting: dict[int, RunVerdict] = {}
    shown = [0]

    def plain_done(index: int, verdict: RunVerdict) -> None:
        waiting[index] = verdict
        while shown[0] in waiting:
            print(row(waiting.pop(shown[0])), flush=True)
            shown[0] += 1

    return total_hint.append, plain_done, None
