"""``agentledger check`` and ``agentledger diff``: recorded runs as a regression suite.

``check`` selects a store's top-level runs (the ``runs`` filters), replays each run tree against
the agent's current code and gives each a verdict: passed, diverged, drift or could not replay
(with why). Runs of agents other than the one given are skipped and counted. ``diff`` lines two
runs up by iteration and call and lists every difference.
"""

from __future__ import annotations

import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio
import msgspec

from ._cli_replay import load_agent
from .listing import RunQuery, RunSummary
from .replay import Finding, RecordedRun, ReplayReport, load, replay
from .store import EventStore, list_runs

__all__ = ("RunVerdict", "check_runs", "print_diff", "print_verdicts", "write_junit")

Verdict = Literal["passed", "diverged", "drift", "could_not_replay", "skipped"]


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

    @property
    def failed(self) -> bool:
        return self.verdict in ("diverged", "drift", "could_not_replay")


def _input_of(recorded: RecordedRun, width: int = 40) -> str:
    text = " ".join(" ".join(m.text for m in recorded.started.messages if m.text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _verdict(report: ReplayReport, accept_drift: bool) -> tuple[Verdict, str]:
    if report.cannot_replay:
        return "could_not_replay", report.cannot_replay[0].describe()
    if report.divergences:
        return "diverged", report.divergences[0].describe()
    if report.drift and not accept_drift:
        return "drift", report.drift[0].describe()
    return "passed", ""


ToolsMode = Literal["recorded", "live"]


async def _check_one(
    store: EventStore,
    summary: RunSummary,
    agent_spec: str,
    tools: ToolsMode,
    accept_drift: bool,
    listing: Sequence[RunSummary],
) -> RunVerdict:
    started = time.perf_counter()
    shown = ""

    def verdict(kind: Verdict, line: str, findings: Sequence[Finding] = ()) -> RunVerdict:
        return RunVerdict(
            run_id=summary.run_id,
            agent=summary.agent,
            input=shown,
            verdict=kind,
            summary=line,
            findings=tuple(f.to_dict() for f in findings),
            seconds=time.perf_counter() - started,
        )

    try:
        recorded = await load(store, summary.run_id, listing=listing)
        shown = _input_of(recorded)
        if not recorded.ended:
            why = "the run is incomplete (interrupted, or still running): no outcome to compare with"
            return verdict("could_not_replay", why)
        agent = load_agent(agent_spec, recorded)
        if (agent.name or agent.id) != summary.agent:
            return verdict("skipped", f"a run of agent {summary.agent!r}")
        agent.store = None
        report = await replay(recorded, agent, tools=tools)
    except (Exception, SystemExit) as exc:  # one run that cannot replay does not stop the others
        return verdict("could_not_replay", f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    kind, line = _verdict(report, accept_drift)
    return verdict(kind, line, report.findings)


async def check_runs(
    store: EventStore,
    query: RunQuery,
    agent_spec: str,
    *,
    tools: Literal["recorded", "live"] = "recorded",
    accept_drift: bool = False,
    jobs: int = 1,
    on_verdict: Callable[[int, RunVerdict], None] | None = None,
    on_selected: Callable[[int], None] | None = None,
) -> list[RunVerdict]:
    """Replay the top-level runs ``query`` selects (newest first), ``jobs`` at a time; the
    verdicts in selection order. ``on_verdict(index, verdict)`` is told of each as it comes."""
    # One listing of every run: it selects, and every load finds its session's runs in it.
    listing = await list_runs(store, RunQuery(limit=None))
    selected = [run for run in listing if run.parent_run_id is None and query.matches(run)]
    if query.limit is not None:
        selected = selected[: query.limit]
    if on_selected is not None:
        on_selected(len(selected))
    verdicts: list[RunVerdict | None] = [None] * len(selected)
    limiter = anyio.CapacityLimiter(max(1, jobs))

    async def one(index: int, summary: RunSummary) -> None:
        async with limiter:
            verdict = await _check_one(store, summary, agent_spec, tools, accept_drift, listing)
        verdicts[index] = verdict
        if on_verdict is not None:
            on_verdict(index, verdict)

    async with anyio.create_task_group() as group:
        for index, summary in enumerate(selected):
            group.start_soon(one, index, summary)
    return [v for v in verdicts if v is not None]


_LABEL = {
    "passed": "passed",
    "diverged": "diverged",
    "drift": "drift",
    "could_not_replay": "could not replay",
    "skipped": "skipped",
}


def row(verdict: RunVerdict) -> str:
    """One run's line: run, agent, input, verdict (and the first finding or why)."""
    line = f"{verdict.run_id}  {verdict.agent}  {verdict.input!r}  {_LABEL[verdict.verdict]}"
    return f"{line}: {verdict.summary}" if verdict.summary and verdict.verdict != "passed" else line


def totals(verdicts: Sequence[RunVerdict]) -> str:
    counts = {name: sum(v.verdict == name for v in verdicts) for name in _LABEL}
    checked = len(verdicts) - counts["skipped"]
    parts = [f"{counts[name]} {_LABEL[name]}" for name in ("passed", "diverged", "drift", "could_not_replay")]
    skipped = counts["skipped"]
    others = f"; {_runs(skipped)} of other agents skipped" if skipped else ""
    return f"{_runs(checked)} checked: " + ", ".join(parts) + others


def _runs(count: int) -> str:
    return "1 run" if count == 1 else f"{count} runs"


def print_verdicts(verdicts: Sequence[RunVerdict], *, as_json: bool) -> None:
    if as_json:
        for verdict in verdicts:
            print(msgspec.json.encode(verdict).decode())
        return
    for verdict in verdicts:
        print(row(verdict))
    print(totals(verdicts))


def write_junit(path: str, verdicts: Sequence[RunVerdict]) -> None:
    """A JUnit XML file: one test case per run, a difference as the failure's text."""
    failures = sum(v.verdict in ("diverged", "drift") for v in verdicts)
    errors = sum(v.verdict == "could_not_replay" for v in verdicts)
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
        if verdict.verdict in ("diverged", "drift"):
            failure = ET.SubElement(case, "failure", message=verdict.summary, type=verdict.verdict)
            failure.text = "\n".join(_finding_lines(verdict.findings))
        elif verdict.verdict == "could_not_replay":
            ET.SubElement(case, "error", message=verdict.summary, type="could_not_replay")
        elif verdict.verdict == "skipped":
            ET.SubElement(case, "skipped", message=verdict.summary)
    ET.indent(suite)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


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
