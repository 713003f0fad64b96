"""Rerun and fork: the agent's current code against a recorded run tree.

A rerun builds the run from the agent as it is now (instructions, options, tools, middleware,
limits), repeats from the log only what the caller gave that one ``run()`` (its options and
tools, the kwargs), and answers every model call from the log. A sub-agent call reruns the
sub-agent's current code (reached through the lead agent's tool) against the child run's own
recorded model answers, in the same tools mode, so the whole tree is checked and no model is
ever called. ``replay`` returns every finding; ``rerun`` raises on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from ..agent import Agent
from ..chat import ChatClient
from ..context import current_run_context, replaying
from ..core.errors import TransitionError
from ..core.events import (
    ChildRunStarted,
    Event,
    ModelCalled,
    ModelResponded,
    SessionUpdated,
    ToolFailed,
    ToolReturned,
)
from ..errors import AgentLedgerError, MiddlewareFailure, ReplayDrift, RunError
from ..providers import HistoryProvider, RecordedContributions, SessionContext, provider_names
from ..response import AgentResponse
from ..run.lifecycle import AgentRun
from ..run.recorder import watching
from ..run.spec import RunSpec, merge_options
from ..session import AgentSession
from ..subagents import AgentTool, ChildLink, running_children_with
from ..tools import normalize_tools
from .client import RecordedOutcome, ReplayClient, ReplayExhausted
from .compare import call_of, differences, divergence
from .findings import Finding, ReplayedCall, ReplayReport
from .stand_ins import RecordedTools, apply_session, approved_calls
from .state import RecordedRun

__all__ = ("fork", "replay", "rerun")

ToolsMode = Literal["recorded", "live", "test"]
"""``recorded``: no tool body runs, every call takes its recorded outcome. ``live``: the bodies
run, but for calls a human approved (their one execution was the recorded run's). ``test``:
every body runs, approved calls included (a regression test of the code). In every mode a tool
marked ``@tool(replay="recorded")`` is answered from the log and one with a double runs the
double instead of its body."""


def _session_for(recorded: RecordedRun, *, keep_conversation: bool = True) -> AgentSession | None:
    if recorded.session_id is None:
        return None
    session = AgentSession.from_events(recorded.prior, recorded.session_id)
    if not keep_conversation:  # a fork: the service holds the conversation as it went on after the point
        session.service_session_id = None
    if not recorded.started.session_history:
        session.history = []
    _pend_caller_writes(session, recorded.events[1:])
    return session


def _pend_caller_writes(session: AgentSession, events: Sequence[Event]) -> None:
    """Writes made between runs open the run's log (``by="caller"``): make them pending again.

    The state takes them without recording, and the rerun records them at its start, as the
    original run did.
    """
    for event in events:
        if type(event) is not SessionUpdated or event.by != "caller":
            break
        session.apply(event)
        session.add_pending(event.by, event.changes)


def _run_options(recorded: RecordedRun, agent: Any, *, keep_conversation: bool = True) -> dict[str, Any]:
    """The options the caller gave the recorded ``run()`` itself: repeated from the log, while
    everything else comes from the agent's current code (and, unless a fork leaves it out, the
    service-side conversation the run continued).

    Older logs do not say which keys the caller gave: there, a recorded option the agent's
    current defaults do not set is taken as the caller's.
    """
    started = recorded.started
    keys = started.run_option_keys
    if keys is None:
        defaults = merge_options(
            getattr(agent, "default_options", {}), getattr(agent, "instructions", None), None
        )
        keys = tuple(k for k in started.options if k not in defaults)
    # The conversation a service keeps is the run's state, never the agent's code.
    keys = (
        (*keys, "conversation_id") if keep_conversation else tuple(k for k in keys if k != "conversation_id")
    )
    options = {k: started.options[k] for k in keys if k in started.options}
    if "instructions" in keys and started.instructions is not None:
        # The run's own instructions, appended to the agent's current ones again; an older log
        # did not record them apart (its run replaced the agent's: ``_replay_spec`` repeats that).
        options["instructions"] = started.run_instructions or started.instructions
    return options


def _replay_spec(
    recorded: RecordedRun,
    agent: Any,
    client: ChatClient,
    tools: ToolsMode,
    upto: int | None,
    *,
    function_invocation_kwargs: Mapping[str, Any] | None,
    parent: tuple[str, str] | None,
    share_history: bool,
    providers: ToolsMode = "recorded",
    caller: _Caller | None = None,
    ledger: list[ReplayedCall] | None = None,
) -> RunSpec:
    """The run ``agent``'s current code makes of the recorded run's call, answered from the log.

    Context providers run for real with ``providers="live"``; otherwise (and in a fork) their
    recorded contributions are repeated without calling them. What ``caller`` gives (a test's
    own ``run()`` arguments) replaces what the log says that ``run()`` was given."""
    started = recorded.started
    run_tools = caller.run_tools if caller is not None else None
    # The live tools always lend their argument types (defaults, coercion, rejection); their
    # bodies run only where the log has no outcome and the caller asked for live tools.
    live = [*agent.tools, *(run_tools or ())]
    helper = RecordedTools(
        recorded,
        upto,
        live,
        run_live=tools != "recorded" or upto is not None,
        run_approved=tools == "test",
        ledger=ledger,
    )
    names = [t.name for t in run_tools] if run_tools is not None else started.run_tool_names
    given = [helper.stand_in(name) for name in names]
    options = _run_options(recorded, agent, keep_conversation=upto is None)
    if caller is not None and caller.options is not None:
        options = {**dict(caller.options), **{k: v for k, v in options.items() if k == "conversation_id"}}
    spec: RunSpec = agent.run_spec(
        options=options or None,
        function_invocation_kwargs=started.function_invocation_kwargs
        if function_invocation_kwargs is None
        else function_invocation_kwargs,
        client_kwargs=dict.fromkeys(started.client_kwargs_keys),  # the values were never recorded
        tools=given or None,
        middleware=caller.middleware if caller is not None else None,
        parent=parent,
        share_history=share_history,
    )
    # A rerun is not a new run: no store, and live exporters must not see it.
    spec = spec.replace(client=client, store=None, sinks=())
    if spec.run_instructions is not None and started.run_instructions is None:
        # An older log: the instructions given to that run() replaced the agent's.
        options = {**spec.options, "instructions": started.instructions}
        spec = spec.replace(options=options, run_instructions=None)
    # Every call goes through a stand-in, in every mode: it decides per call whether the body
    # runs (live tools; in "live" mode never an approved call: whatever approval mode its tool
    # has now, the log says which calls a human approved), a double runs, or the log answers,
    # and notes which it did.
    spec = spec.replace(tools=(*(helper.stand_in(t.name) for t in agent.tools), *given))
    if (providers == "recorded" or upto is not None) and spec.context_providers:
        names = provider_names(spec.context_providers)
        stand_in = RecordedContributions(
            recorded.events, helper.stand_in, names, upto=upto, live=spec.context_providers
        )
        spec = spec.replace(context_providers=(stand_in,))
    elif spec.context_providers:
        # Live providers; the tools they offer are answered as the agent's own are.
        spec = spec.replace(
            context_providers=tuple(
                p if isinstance(p, HistoryProvider) else _ToolsFromLog(p, helper)
                for p in spec.context_providers
            )
        )
    return spec


class _ToolsFromLog:
    """A live context provider whose tools answer from the log: with recorded tools, a tool a
    provider offers is no more run than the agent's own (its live spec and checks are kept)."""

    def __init__(self, provider: Any, helper: RecordedTools) -> None:
        self.provider = provider
        self.source_id = provider.source_id
        self.helper = helper

    async def before_run(self, *, agent: Any, session: Any, context: SessionContext, state: Any) -> None:
        start = len(context.tools)
        await self.provider.before_run(agent=agent, session=session, context=context, state=state)
        context.tools[start:] = [self.helper.stand_in(t.name, live=t) for t in context.tools[start:]]

    async def after_run(self, *, agent: Any, session: Any, context: SessionContext, state: Any) -> None:
        await self.provider.after_run(agent=agent, session=session, context=context, state=state)


def _hop(call_id: str, name: str | None) -> str:
    return f"{call_id} ({name or 'sub-agent'})"


class _TreeReplay:
    """Answers each sub-agent call of a rerun with the child run's own log (``ChildRunner``)."""

    def __init__(
        self,
        root: RecordedRun,
        root_run_id: str,
        tools: ToolsMode,
        upto: int | None,
        providers: ToolsMode = "recorded",
        ledger: list[ReplayedCall] | None = None,
    ) -> None:
        self.root_run_id = root_run_id
        self.ledger = ledger
        self.tools = tools
        self.providers = providers
        self.upto = upto
        self.nodes: dict[str, RecordedRun] = {root_run_id: root}
        self.paths: dict[str, tuple[str, ...]] = {root_run_id: (root.run_id,)}
        self.replayed: dict[str, RecordedRun] = {}
        self.cannot: list[Finding] = []
        self.outcomes = {e.call_id: e.seq for e in root.events if isinstance(e, ToolReturned | ToolFailed)}
        self.approved = approved_calls(root.events)
        self.past: set[str] = set()
        """Reruns whose tools take their recorded outcomes whatever the mode, their sub-agents'
        included: below a call a human approved (its one execution was the recorded one)."""

    def _live(self, parent_run: str, call_id: str) -> bool:
        """Whether a fork runs this call's child live: a call of the forked run past the point,
        unless a human approved it there (its one execution is the recorded child's)."""
        if self.upto is None or parent_run != self.root_run_id or call_id in self.approved:
            return False
        seq = self.outcomes.get(call_id)
        return seq is None or seq > self.upto

    def child_ids(self, parent: tuple[str, str] | None) -> tuple[str, str | None] | None:
        if parent is None:  # a call outside a run: a fork runs it live, a rerun refuses it
            return None if self.upto is not None else ("unlinked", None)
        parent_run, call_id = parent
        if self._live(parent_run, call_id):
            return None
        node = self.nodes.get(parent_run)
        child = node.children.get(call_id) if node is not None else None
        if child is None:  # run_child stands the recorded outcome in, or refuses: no model is called
            recorded_id = (
                next((e.child_run_id for e in node.child_links() if e.call_id == call_id), None)
                if node
                else None
            )
            return (recorded_id or f"{parent_run}/{call_id}", None)
        return child.run_id, child.started.session_id

    async def run_child(
        self,
        tool: AgentTool,
        task: str,
        session: AgentSession | None,
        kwargs: dict[str, Any],
        link: ChildLink,
    ) -> AgentResponse | str:
        parent_run, call_id = link.parent or ("", "")
        node = self.nodes.get(parent_run)
        child = node.children.get(call_id) if node is not None else None
        if child is None:
            return self._unreplayed(tool, node, parent_run, call_id, session)
        path = (*self.paths.get(parent_run, (parent_run,)), _hop(call_id, tool.agent.name), link.run_id)
        self.nodes[link.run_id] = child
        self.paths[link.run_id] = path
        self.replayed[link.run_id] = child
        replay_client = ReplayClient(child.model_outcomes(), provider_name=child.started.provider_name)
        # A fork reruns a child only where the log answers it (recorded before the point, or
        # approved): all of it is the past, so its tools repeat their recorded outcomes. So does
        # the child of an approved call in a live rerun, and everything below either.
        past = (
            self.upto is not None
            or parent_run in self.past
            or (node is not None and call_id in approved_calls(node.events) and self.tools != "test")
        )
        if past:
            self.past.add(link.run_id)
        spec = _replay_spec(
            child,
            tool.agent,
            replay_client,
            "recorded" if past else self.tools,
            None,
            function_invocation_kwargs=kwargs,
            parent=link.parent,
            share_history=link.share_history,
            providers=self.providers,
            ledger=self.ledger,
        )
        run = AgentRun(spec, session, run_id=link.run_id, parent_sink=link.parent_sink)
        return await run.execute(task)

    def _unreplayed(
        self,
        tool: AgentTool,
        node: RecordedRun | None,
        parent_run: str,
        call_id: str,
        session: AgentSession | None,
    ) -> str:
        """A sub-agent call whose child run is not at hand: its recorded outcome stands in, as
        in recorded mode (``_missing_children`` reports it); a call the log does not have at
        all is refused, since a replay never calls a model."""
        outcome = None
        if node is not None:
            outcome = next(
                (e for e in node.events if isinstance(e, ToolReturned | ToolFailed) and e.call_id == call_id),
                None,
            )
        linked = node is not None and any(e.call_id == call_id for e in node.child_links())
        if outcome is not None and linked:
            assert node is not None
            links = {e.child_run_id: e.call_id for e in node.child_links()}
            caller = current_run_context()
            for event in node.events:  # the child's writes to a shared session, as recorded
                if type(event) is SessionUpdated and session is not None and call_of(event, links) == call_id:
                    apply_session(session, event, caller)
            if isinstance(outcome, ToolFailed):
                raise type(outcome.error_type, (RecordedOutcome,), {})(outcome.message)
            return outcome.result if isinstance(outcome.result, str) else str(outcome.result)
        path = (*self.paths.get(parent_run, (parent_run,)), _hop(call_id, tool.agent.name), "(no run)")
        why = (
            f"the log holds no run of sub-agent {tool.agent.name or tool.name!r} for call {call_id}"
            " (the recorded run made no such call): a replay never calls a model"
        )
        if not any(f.path == path for f in self.cannot):
            self.cannot.append(Finding(kind="cannot_replay", run_id=parent_run, path=path, detail=why))
        raise ReplayExhausted(why)


def _missing_children(recorded: RecordedRun) -> list[Finding]:
    """The sub-agent runs the tree links to that were not loaded (not in the store)."""
    found = []
    for path, run in recorded.walk():
        for link in run.child_links():
            if link.call_id not in run.children:
                found.append(
                    Finding(
                        kind="cannot_replay",
                        run_id=run.run_id,
                        path=(*path, _hop(link.call_id, link.agent_name), link.child_run_id),
                        seq=link.seq,
                        event_type="ChildRunStarted",
                        detail=(
                            f"sub-agent run {link.child_run_id} is not loaded (not in the store, or the "
                            "run was built without load()): its recorded result stands in for it"
                        ),
                    )
                )
    return found


def _repeated_call_ids(recorded: RecordedRun) -> list[Finding]:
    """Runs in the tree whose model gave one call id to calls of two model answers. A replay
    matches a call's outcome, approval and sub-agent run by its id, so it cannot tell such calls
    apart: what it finds about them may be about the other one."""
    found = []
    for path, run in recorded.walk():
        first: dict[str, int] = {}  # call id -> the iteration that used it first
        for event in run.events:
            if type(event) is not ModelResponded:
                continue
            for call in event.message.function_calls:
                call_id = call.call_id or ""
                if call_id not in first:
                    first[call_id] = event.iteration
                    continue
                found.append(
                    Finding(
                        kind="cannot_replay",
                        run_id=run.run_id,
                        path=path,
                        seq=event.seq,
                        event_type="ModelResponded",
                        field="message",
                        detail=(
                            f"the model gave call id {call_id!r} again in model call {event.iteration} "
                            f"(first in model call {first[call_id]}): a replay matches calls by their "
                            "id, so it cannot tell these apart"
                        ),
                    )
                )
    return found


def _children_not_rerun(tree: _TreeReplay, by_run: Mapping[str, list[Event]]) -> list[Finding]:
    """Sub-agent runs in the log whose call the rerun made but answered from the log instead of
    rerunning the child: the tool that started it was not the agent's (added during the run, by
    a tool, a provider or ``run(tools=...)``), so the sub-agent's current code never ran."""
    found = []
    for run_id, events in by_run.items():
        node = tree.nodes.get(run_id)
        if node is None:
            continue
        made = {e.call_id for e in events if type(e) is ChildRunStarted}
        for link in node.child_links():
            child = node.children.get(link.call_id)
            if child is None or link.call_id not in made or child.run_id in tree.replayed:
                continue
            hop = _hop(link.call_id, link.agent_name)
            found.append(
                Finding(
                    kind="cannot_replay",
                    run_id=node.run_id,
                    path=(*tree.paths.get(run_id, (run_id,)), hop, link.child_run_id),
                    seq=link.seq,
                    event_type="ChildRunStarted",
                    detail=(
                        f"sub-agent run {link.child_run_id} was not rerun: the tool that started it "
                        "is not among the agent's tools (given to run() or added during the run), so "
                        "its recorded result stands in for it"
                    ),
                )
            )
    return found


def _caught_up(session: AgentSession, recorded: RecordedRun) -> AgentSession:
    """The caller's session, brought to where the recorded run found its own when it is fresh
    and the log holds the session's earlier runs (a cassette of a later turn, given a new
    session): their history, state and paused calls. Fresh: no history and no paused calls; the
    caller's own writes made before the run stay on top, and are the ones the run records (else
    the recorded ones are). A session already in use is left as it is."""
    if session.history or session.paused_runs or not recorded.prior:
        return session
    rebuilt = _session_for(recorded)
    if rebuilt is None:
        return session
    pending = session.pending_changes
    session.history[:] = rebuilt.history
    # The earlier runs' values under the caller's, in their order, recording nothing; the keys
    # the caller wrote keep their values and the in-place edits still to be noticed.
    session.state.settle_under(rebuilt.state.snapshot())
    session.paused_runs.update(rebuilt.paused_runs)
    session.rerun_allowed.update(rebuilt.rerun_allowed)
    if session.service_session_id is None:
        session.service_session_id = rebuilt.service_session_id
    if not pending:
        for by, changes in rebuilt.pending_changes:
            session.add_pending(by, changes)
    return session


class _Caller:
    """What the caller of a replay gives its lead run in place of what the log says that run()
    was given: the session it runs on, its own options, the tools given to it."""

    def __init__(
        self,
        session: AgentSession | Literal[False] | None,
        options: Mapping[str, Any] | None,
        run_tools: Any,
        middleware: Sequence[Any] | None,
    ) -> None:
        self.session = session
        self.options = options
        self.run_tools = normalize_tools(run_tools) if run_tools is not None else None
        self.middleware = middleware


async def _drive(
    recorded: RecordedRun,
    agent: Agent,
    client: ChatClient,
    tools: ToolsMode,
    upto: int | None,
    run_id: str | None,
    function_invocation_kwargs: Mapping[str, Any] | None,
    providers: ToolsMode = "recorded",
    caller: _Caller | None = None,
) -> tuple[AgentResponse | None, dict[str, list[Event]], _TreeReplay]:
    started = recorded.started
    parent = (started.parent_run_id, started.parent_call_id or "") if started.parent_run_id else None
    ledger: list[ReplayedCall] = []
    if recorded.approved_above and tools == "live":  # a human approved the call this run answers
        tools = "recorded"  # its run was the one (a test reruns it like any other)
    spec = _replay_spec(
        recorded,
        agent,
        client,
        tools,
        upto,
        function_invocation_kwargs=function_invocation_kwargs,
        parent=parent,
        share_history=started.session_history,
        providers=providers,
        caller=caller,
        ledger=ledger,
    )
    own_id = run_id or agent.ids("run")
    given = caller.session if caller is not None else None
    if given is False:  # the caller's run has no session
        session: AgentSession | None = None
    elif given is not None:
        session = _caught_up(given, recorded)
    else:
        session = _session_for(recorded, keep_conversation=upto is None)
    run = AgentRun(spec, session, run_id=own_id)
    children = _TreeReplay(recorded, own_id, tools, upto, providers, ledger)
    token = replaying.set(True)
    events: list[Event] = []  # every run's events of the tree, as they are recorded
    with watching(events.append), running_children_with(children):
        try:
            response: AgentResponse | None = await run.execute(list(started.messages))
        except (RunError, MiddlewareFailure, TransitionError):  # the log says how it ended
            response = None
        finally:
            replaying.reset(token)
    by_run: dict[str, list[Event]] = {own_id: []}
    for child_id in children.replayed:
        by_run[child_id] = []
    for event in events:
        if event.run_id in by_run:
            by_run[event.run_id].append(event)
    return response, by_run, children


async def replay(
    recorded: RecordedRun,
    agent: Agent,
    *,
    tools: ToolsMode = "recorded",
    function_invocation_kwargs: Mapping[str, Any] | None = None,
    providers: ToolsMode | None = None,
    session: AgentSession | Literal[False] | None = None,
    options: Mapping[str, Any] | None = None,
    run_tools: Any = None,
    middleware: Sequence[Any] | None = None,
) -> ReplayReport:
    """Rerun the recorded run tree against ``agent``'s current code and report every finding.

    Model answers come from the log, for the lead run and for every sub-agent run (reached through
    the lead agent's sub-agent tools): no model is called. With ``tools="recorded"`` no tool body
    runs; with ``tools="live"`` tool bodies run, sub-agents included, but for calls a human
    approved; with ``tools="test"`` every body runs, approved calls included. A tool marked
    ``@tool(replay="recorded")`` never runs (its calls take their recorded outcomes), one marked
    with a double runs the double; ``ReplayReport.calls`` says how each call was answered.
    Context providers follow
    ``providers`` (by default the same mode as ``tools``): ``"recorded"`` repeats what they
    contributed from the log without calling them, ``"live"`` calls them, and a contribution that
    changed is a divergence. Nothing raises for a difference: the report lists divergences,
    drift and what could not be replayed.

    What that ``run()`` was given is repeated from the log unless given here: ``session``, the
    session the lead run runs on (``False``: none; else one rebuilt from ``recorded.prior``; a
    test running several turns on one session passes it, and a fresh one is first brought to
    where the log's earlier runs leave it); ``options``, its own options (a changed one is
    drift); ``run_tools``, the tools given to it, whose bodies then run in live mode (else they
    are known by their recorded specs and answer from the log); ``middleware``, the middleware
    given to it (else none runs, and what the log names is drift).
    """
    client = ReplayClient(recorded.model_outcomes(), provider_name=recorded.started.provider_name)
    given = None
    if session is not None or options is not None or run_tools is not None or middleware is not None:
        given = _Caller(session, options, run_tools, middleware)
    response, by_run, children = await _drive(
        recorded,
        agent,
        client,
        tools,
        None,
        recorded.run_id,
        function_invocation_kwargs,
        providers or tools,
        given,
    )
    findings = differences(recorded.events, by_run[recorded.run_id], path=(recorded.run_id,))
    for child_id, child in children.replayed.items():
        findings.extend(differences(child.events, by_run[child_id], path=children.paths[child_id]))
    findings.extend(_missing_children(recorded))
    findings.extend(_children_not_rerun(children, by_run))
    findings.extend(_repeated_call_ids(recorded))
    findings.extend(children.cannot)
    return ReplayReport(recorded.run_id, findings, response, by_run, children.ledger or ())


async def rerun(
    recorded: RecordedRun,
    agent: Agent,
    *,
    tools: ToolsMode = "recorded",
    function_invocation_kwargs: Mapping[str, Any] | None = None,
    accept_drift: bool = False,
    providers: ToolsMode | None = None,
) -> AgentResponse | None:
    """Run ``agent``'s code against the recorded run tree; raise if anything differs.

    ``ReplayDivergence`` (with every finding in ``findings``) when the rerun records something
    else than the log or part of the tree cannot be replayed; ``ReplayDrift`` (a
    ``ReplayDivergence``) when only the agent's configuration changed, unless ``accept_drift``.
    With ``tools="recorded"`` no tool runs: each call returns (or raises) what it recorded and
    repeats its recorded effects (session writes, tool list changes). With ``tools="live"`` the
    tools run for real; pass ``function_invocation_kwargs`` when the recorded ones were redacted.
    Context providers follow ``providers`` (see ``replay``).
    """
    report = await replay(
        recorded,
        agent,
        tools=tools,
        function_invocation_kwargs=function_invocation_kwargs,
        providers=providers,
    )
    if report.passed(accept_drift=accept_drift):
        return report.response
    lead = report.events[recorded.run_id]
    error = divergence(report.findings, recorded.events, lead)
    if not report.divergences and not report.cannot_replay:
        raise ReplayDrift(error.seq, error.expected, error.actual, error.diff, findings=report.findings)
    raise error


async def fork(
    recorded: RecordedRun,
    agent: Agent,
    *,
    at: int,
    client: ChatClient,
    function_invocation_kwargs: Mapping[str, Any] | None = None,
) -> AgentResponse:
    """Replay the run up to ``at`` from the log, then continue live with ``client`` as a new run.

    Model calls answered at or before ``at`` come from the log, so do tool calls whose outcome
    was recorded at or before ``at`` (a sub-agent call among them reruns its child against the
    child's recorded answers); everything later is live (``agent``'s tools, ``client``, and
    sub-agents with their own clients). A fork calls models: that is what it is for.
    """
    if not 0 <= at < len(recorded.events):
        raise IndexError(f"run {recorded.run_id} has events 0..{len(recorded.events) - 1}, not {at}")
    repeated = _repeated_call_ids(recorded)
    if repeated:  # which call's outcome is the past cannot be told: a fork could run one again
        raise AgentLedgerError(f"cannot fork run {recorded.run_id}: {repeated[0].detail}")
    for event in (*recorded.prior, *recorded.events):
        if type(event) is ModelCalled and event.conversation_id is not None and event.held == 0:
            # The service held a conversation before a call of this session's runs, and none of
            # the messages the log knows of: its earlier turns are the service's alone.
            raise AgentLedgerError(
                f"cannot fork run {recorded.run_id}: its session continued the service-side "
                f"conversation {event.conversation_id!r}, whose earlier turns the log does not hold; "
                "a fork sends the new client the conversation up to the point in full, and cannot "
                "send those"
            )
    # The answers up to the point, outside any service-side conversation: the service holds the
    # conversation as the recorded run went on past the point, so the fork sends its own in full.
    responses = [
        msgspec.structs.replace(e, conversation_id=None)
        if type(e) is ModelResponded and e.conversation_id
        else e
        for e in recorded.model_outcomes()
        if e.seq <= at
    ]
    live = ReplayClient(responses, live=client)
    response, _, _ = await _drive(recorded, agent, live, "live", at, None, function_invocation_kwargs)
    if response is None:
        raise AgentLedgerError(f"the fork of run {recorded.run_id} at seq {at} failed")
    return response
