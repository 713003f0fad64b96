"""Rerun and fork: the agent's current code against a recorded run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..agent import Agent
from ..chat import ChatClient
from ..context import replaying
from ..core.errors import TransitionError
from ..core.events import (
    Event,
    SessionUpdated,
)
from ..errors import AgentLedgerError, RunError
from ..response import AgentResponse
from ..run.lifecycle import AgentRun
from ..session import AgentSession
from ..structured import schema_option
from ..testing import capture_events
from .client import ReplayClient
from .compare import compare
from .stand_ins import RecordedTools
from .state import RecordedRun

__all__ = ("fork", "rerun")


def _session_for(recorded: RecordedRun) -> AgentSession | None:
    if recorded.session_id is None:
        return None
    session = AgentSession.from_events(recorded.prior, recorded.session_id)
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


async def _drive(
    recorded: RecordedRun,
    agent: Agent,
    client: ChatClient,
    tools: Literal["recorded", "live"],
    upto: int | None,
    run_id: str | None,
    function_invocation_kwargs: Mapping[str, Any] | None,
) -> tuple[AgentResponse | None, list[Event]]:
    started = recorded.started
    spec = agent.run_spec(
        function_invocation_kwargs=started.function_invocation_kwargs
        if function_invocation_kwargs is None
        else function_invocation_kwargs,
        client_kwargs=dict.fromkeys(started.client_kwargs_keys),  # the values were never recorded
    )
    options = dict(started.options)
    if started.instructions is not None:
        options["instructions"] = started.instructions
    live_format = spec.options.get("response_format")
    if live_format is not None and schema_option(live_format) == options.get("response_format"):
        options["response_format"] = live_format  # the same schema: ``value`` parses as the type again
    # A rerun is not a new run: no store, and live exporters must not see it.
    spec = spec.replace(client=client, options=options, store=None, sinks=())
    if tools == "recorded" or upto is not None:
        # The live tools always lend their argument types (defaults, coercion, rejection); their
        # bodies run only where the log has no outcome and the caller asked for live tools.
        helper = RecordedTools(recorded, upto, agent.tools, run_live=tools == "live" or upto is not None)
        spec = spec.replace(tools=tuple(helper.stand_in(t.name) for t in agent.tools))
    run = AgentRun(spec, _session_for(recorded), run_id=run_id or agent.ids("run"))
    token = replaying.set(True)
    with capture_events() as events:
        try:
            response: AgentResponse | None = await run.execute(list(started.messages))
        except (RunError, TransitionError):
            response = None
        finally:
            replaying.reset(token)
    own = [e for e in events if e.run_id == run.run_id]
    return response, own


async def rerun(
    recorded: RecordedRun,
    agent: Agent,
    *,
    tools: Literal["recorded", "live"] = "recorded",
    function_invocation_kwargs: Mapping[str, Any] | None = None,
) -> AgentResponse | None:
    """Run ``agent``'s code against the recorded model output; raise at the first divergence.

    With ``tools="recorded"`` no tool runs: each call returns (or raises) what it recorded and
    repeats its recorded effects (session writes, tool list changes). With ``tools="live"`` the
    tools run for real; pass ``function_invocation_kwargs`` when the recorded ones were redacted.
    """
    client = ReplayClient(recorded.model_outcomes(), provider_name=recorded.started.provider_name)
    response, events = await _drive(
        recorded, agent, client, tools, None, recorded.run_id, function_invocation_kwargs
    )
    compare(recorded.events, events)
    return response


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
    was recorded at or before ``at``; everything later is live (``agent``'s tools, ``client``).
    """
    if not 0 <= at < len(recorded.events):
        raise IndexError(f"run {recorded.run_id} has events 0..{len(recorded.events) - 1}, not {at}")
    responses = [e for e in recorded.model_outcomes() if e.seq <= at]
    replay = ReplayClient(responses, live=client)
    response, _ = await _drive(recorded, agent, replay, "live", at, None, function_invocation_kwargs)
    if response is None:
        raise AgentLedgerError(f"the fork of run {recorded.run_id} at seq {at} failed")
    return response
