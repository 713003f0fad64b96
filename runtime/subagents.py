"""Sub-agents: an agent run as a tool call of another agent's run.

The child's run is a run of its own, with its own log whose ``RunStarted`` names the parent run
and call. ``ctx.kwargs`` of the call become the child's ``function_invocation_kwargs``. With
``propagate_session=True`` the child reads and writes the caller's session state (its writes are
``SessionUpdated`` events of that session, in the child's log) but keeps its own conversation
history; otherwise it runs in a new session of its own. A child failure reaches the parent as the
call's error result.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from typing_extensions import Unpack

from ._sources import IdSource
from .context import FunctionInvocationContext, SessionSink, current_run_context
from .core.events import APPROVAL_MODES, ChildRunStarted
from .errors import AgentLedgerError, RunIdTakenError
from .response import AgentResponse, AgentResponseUpdate
from .run.spec import RunArguments, RunSpec, SpecArguments
from .session import AgentSession
from .store import EventStore
from .streaming import RunStream
from .tools import ApprovalMode, FunctionTool

StreamCallback = Callable[[AgentResponseUpdate], Awaitable[None] | None]
"""Called with each update of a sub-agent's streamed run (a plain or an async function)."""


class ChildLink(NamedTuple):
    """How a sub-agent's next run is tied to the call that starts it (read by ``Agent.run``)."""

    agent: object
    parent: tuple[str, str] | None
    share_history: bool
    run_id: str
    parent_sink: SessionSink | None
    store: EventStore | None
    """The store the child run records to (``SubAgent.child_store`` of the caller's store)."""


_link: contextvars.ContextVar[ChildLink | None] = contextvars.ContextVar("agentledger_child", default=None)


class ChildRunner(Protocol):
    """Runs the child of a sub-agent call in place of a live run (a replay answers it from the
    child's own log). Installed for a block with ``running_children_with``."""

    def child_ids(self, parent: tuple[str, str] | None) -> tuple[str, str | None] | None:
        """The run id and (for a child with a session of its own) the session id the child of
        the call ``parent`` (run id, call id) takes; None: run this child live, as usual."""
        ...

    async def run_child(
        self,
        tool: AgentTool,
        task: str,
        session: AgentSession | None,
        kwargs: dict[str, Any],
        link: ChildLink,
    ) -> AgentResponse | str:
        """The child's run: ``tool.agent``'s current code, answered however the runner chooses;
        or the call's result as text, standing in for a run the runner cannot make."""
        ...


_runner: contextvars.ContextVar[ChildRunner | None] = contextvars.ContextVar(
    "agentledger_child_runner", default=None
)


@contextlib.contextmanager
def running_children_with(runner: ChildRunner | None) -> Iterator[None]:
    """Inside the block, sub-agent calls run their children through ``runner`` (None: live,
    as outside any replay)."""
    token = _runner.set(runner)
    try:
        yield
    finally:
        _runner.reset(token)


def take_child_link(agent: object) -> ChildLink | None:
    """The link of the sub-agent call about to run ``agent``, once: a run the child starts itself
    is a run of its own."""
    link = _link.get()
    if link is None or link.agent is not agent:
        return None
    _link.set(None)
    return link


class SubAgent(Protocol):
    """What a sub-agent tool needs of the agent it runs (``Agent`` is one)."""

    name: str | None
    description: str
    ids: IdSource
    store: EventStore | None
    tools: list[FunctionTool]

    def child_store(self, caller: EventStore | None) -> EventStore | None:
        """The store a run of this agent started by another run's call records to, given the
        store that run records to (``Agent``: the caller's when it kept the default store)."""
        ...

    def create_session(self, *, session_id: str | None = None) -> AgentSession: ...

    def run(self, messages: Any = None, *, stream: Any = False, **arguments: Unpack[RunArguments]) -> Any:
        """One run of the agent (``Agent.run``): awaited, or iterated with ``stream=True``."""
        ...

    def run_spec(
        self,
        *,
        parent: tuple[str, str] | None = None,
        share_history: bool = True,
        **arguments: Unpack[SpecArguments],
    ) -> RunSpec: ...


__all__ = (
    "MAX_AGENT_DEPTH",
    "AgentTool",
    "ChildLink",
    "ChildRunner",
    "StreamCallback",
    "SubAgent",
    "SubAgentApprovalError",
    "SubAgentDepthError",
    "agent_tool",
    "running_children_with",
    "take_child_link",
)

MAX_AGENT_DEPTH = 8
"""How deep sub-agents may nest (``MAX_DEPTH`` is how deep a recorded JSON value may nest)."""
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("agentledger_depth", default=0)
_lineage: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("agentledger_lineage", default=())


class SubAgentDepthError(AgentLedgerError):
    """Sub-agents called each other deeper than ``MAX_AGENT_DEPTH`` (usually unbounded recursion)."""


class SubAgentApprovalError(AgentLedgerError):
    """A sub-agent's run paused for a human's approval, which its caller cannot pass on."""


class AgentTool(FunctionTool):
    """A ``FunctionTool`` whose call runs a child agent."""

    def __init__(
        self,
        agent: SubAgent,
        *,
        name: str,
        description: str,
        arg_name: str,
        arg_description: str,
        approval_mode: ApprovalMode,
        propagate_session: bool,
        stream_callback: StreamCallback | None = None,
    ) -> None:
        self.agent = agent
        self.arg_name = arg_name
        self.propagate_session = propagate_session
        self.stream_callback = stream_callback
        schema = {
            "type": "object",
            "properties": {arg_name: {"type": "string", "description": arg_description}},
            "required": [arg_name],
        }

        async def run_child(ctx: FunctionInvocationContext, arguments: Mapping[str, Any]) -> str:
            return await self._run_child(ctx, arguments)

        super().__init__(
            run_child, name=name, description=description, approval_mode=approval_mode, schema=schema
        )
        self.context_param = None
        self.needs_context = True

    def bind_call(self, arguments: Mapping[str, Any], context: Any) -> Any:
        if self._body is not None:  # a stand-in made by with_body: its body, not the child
            return super().bind_call(arguments, context)
        return lambda: self._run_child(context, arguments)

    async def _run_child(self, ctx: FunctionInvocationContext, arguments: Mapping[str, Any]) -> str:
        depth = _depth.get() + 1
        if depth > MAX_AGENT_DEPTH:
            raise SubAgentDepthError(
                f"sub-agent {self.name!r} would nest {depth} levels deep (limit {MAX_AGENT_DEPTH})"
            )
        runner = _runner.get()
        parent = (ctx.run_id, ctx.call_id) if ctx.run_id and ctx.call_id else None
        planned = runner.child_ids(parent) if runner is not None else None
        if planned is None:
            runner = None  # this child runs live
        run_id, session_id = planned if planned is not None else (self.agent.ids("run"), None)
        own = None if self.propagate_session else self.agent.create_session(session_id=session_id)
        session = ctx.session if own is None else own
        caller = current_run_context()
        store = self.agent.child_store(caller.store if caller is not None else None)
        lineage = (*_lineage.get(), *((ctx.run_id,) if ctx.run_id else ()))
        if runner is None:  # a replay reuses the recorded ids, and writes nothing
            await self._check_free(store, run_id, lineage)
        parent_sink = None
        if caller is not None and caller.recorder is not None and ctx.call_id:
            caller.record(
                ChildRunStarted,
                call_id=ctx.call_id,
                child_run_id=run_id,
                agent_name=self.agent.name,
                propagate_session=self.propagate_session,
            )
            if self.propagate_session and caller.session is session:
                parent_sink = caller.session_sink
        link = ChildLink(self.agent, parent, not self.propagate_session, run_id, parent_sink, store)
        depth_token, link_token = _depth.set(depth), _link.set(link)
        lineage_token = _lineage.set(lineage)
        try:
            task = str(arguments.get(self.arg_name, ""))
            if runner is not None:
                answered = await runner.run_child(self, task, session, dict(ctx.kwargs), link)
                if isinstance(answered, str):
                    return answered
                response = answered
            else:
                response = await self._execute(task, session, dict(ctx.kwargs))
        finally:
            _lineage.reset(lineage_token)
            _link.reset(link_token)
            _depth.reset(depth_token)
        if response.user_input_requests:
            names = sorted({c.name or "" for c in response.user_input_requests})
            raise SubAgentApprovalError(
                f"sub-agent {self.name!r} paused for approval of {names} (run {response.run_id}); "
                "approvals inside sub-agents cannot be answered through the caller: give the tool "
                "to the calling agent, or approve it there with approval_mode on as_tool()"
            )
        return response.text

    @staticmethod
    async def _check_free(store: EventStore | None, run_id: str, lineage: tuple[str, ...]) -> None:
        """Refuse a child run id that a calling run has, or that the store the child records to
        holds, before the caller's log links to it: a link to a run that is not the child would
        make the run tree lie, or loop back to the caller."""
        held = await store.read(run_id) if store is not None else []
        if held or run_id in lineage:
            raise RunIdTakenError(run_id, len(held))

    async def _execute(
        self, task: str, session: AgentSession | None, kwargs: dict[str, Any]
    ) -> AgentResponse:
        """The child's run, through the agent's own ``run`` (a subclass's override included);
        streamed to ``stream_callback`` update by update when there is one."""
        callback, agent = self.stream_callback, self.agent
        if callback is None:
            response: AgentResponse = await agent.run(
                task, session=session, function_invocation_kwargs=kwargs
            )
            return response
        stream: RunStream = agent.run(task, stream=True, session=session, function_invocation_kwargs=kwargs)
        async with stream:
            async for update in stream:
                handled = callback(update)
                if inspect.isawaitable(handled):
                    await handled
            return await stream.get_final_response()


def agent_tool(
    agent: SubAgent,
    *,
    name: str | None,
    description: str | None,
    arg_name: str,
    arg_description: str | None,
    approval_mode: str,
    propagate_session: bool,
    stream_callback: StreamCallback | None = None,
) -> FunctionTool:
    """Build the tool behind ``Agent.as_tool``."""
    tool_name = name or re.sub(r"[^A-Za-z0-9_-]", "_", agent.name or "agent")[:64]
    if approval_mode not in APPROVAL_MODES:
        raise ValueError(f"approval_mode must be 'always_require' or 'never_require', not {approval_mode!r}")
    return AgentTool(
        agent,
        name=tool_name,
        description=description or agent.description or f"Ask the {tool_name} agent.",
        arg_name=arg_name,
        arg_description=arg_description or f"The {arg_name} for the agent.",
        approval_mode=approval_mode,  # type: ignore[arg-type]
        propagate_session=propagate_session,
        stream_callback=stream_callback,
    )
