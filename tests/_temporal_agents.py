"""The agents the Temporal tests run, registered by name so that every worker process builds them.

Their scripted models answer from the request (how many tool results the run has seen, what the
user asked), never from a position in a script: a worker builds each agent once and serves many
runs, and a run's model calls may land on different workers. Call ids are fixed per step, so the
idempotency key of a call (run, iteration, call id) is the same on whichever worker makes it.

Every tool execution is counted in ``EXECUTED`` and, when ``EXECUTIONS`` names a file, appended
there as ``pid run_id call_id tool`` (the end-to-end test counts executions across processes).
``GATE``, when a worker process sets it, holds ``lookup`` calls until it is opened; ``ARRIVED``,
when set, is set by the first call that reaches the gate.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from agentledger import (
    Agent,
    AgentContext,
    ChatContext,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    Message,
    MiddlewareFailure,
    chat_middleware,
    function_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.adapters.temporal import AgentRegistry
from agentledger.demo import book_hotel, build_demo_agent

__all__ = ("EXECUTED", "REGISTRY", "key_of", "tool_turns")

REGISTRY = AgentRegistry()
EXECUTED: list[tuple[str, str, str]] = []
EXECUTIONS: Path | None = None
GATE: anyio.Event | None = None
ARRIVED: anyio.Event | None = None
BULKY_SIZE = 5_000


def _executed(ctx: FunctionInvocationContext) -> None:
    row = (ctx.run_id or "", ctx.call_id or "", ctx.function.name)
    EXECUTED.append(row)
    if EXECUTIONS is not None:
        with EXECUTIONS.open("a") as file:
            file.write(f"{os.getpid()} {' '.join(row)}\n")


def key_of(request: ScriptedRequest) -> str:
    """The text of the last user message (the run's own input, not its history)."""
    users = [m.text for m in request.messages if m.role == "user"]
    return users[-1] if users else ""


def tool_turns(request: ScriptedRequest) -> list[Any]:
    """The tool results since the last user message, one list per tool message."""
    messages = list(request.messages)
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    return [[c.result for c in m.contents] for m in messages[last_user + 1 :] if m.role == "tool"]


@tool
async def lookup(key: str, ctx: FunctionInvocationContext) -> str:
    """Look a key up (held at the gate while a test holds it)."""
    _executed(ctx)
    if ARRIVED is not None:
        ARRIVED.set()
    if GATE is not None:
        await GATE.wait()
    return f"value of {key}"


@tool
def remember(key: str, value: str, ctx: FunctionInvocationContext) -> str:
    """Keep a value in session state."""
    _executed(ctx)
    if ctx.session is not None:
        ctx.session.state[key] = value
    return "remembered"


@tool
def bulky(ctx: FunctionInvocationContext) -> str:
    """A result larger than a small payload budget."""
    _executed(ctx)
    return "x" * BULKY_SIZE


@tool(approval_mode="always_require")
def pay(amount: int, ctx: FunctionInvocationContext) -> str:
    """Pay (a person approves first)."""
    _executed(ctx)
    return f"paid {amount}"


def _scripted(answer: Callable[[ScriptedRequest], Any]) -> ScriptedChatClient:
    return ScriptedChatClient([answer], repeat=True)


def _ledger(request: ScriptedRequest) -> Any:
    key, turns = key_of(request), tool_turns(request)
    if not turns:
        return Call("lookup", {"key": key}, call_id="c1")
    if len(turns) == 1:
        return [
            Call("lookup", {"key": f"{key}-b"}, call_id="c2"),
            Call("remember", {"key": key, "value": str(turns[0][0])}, call_id="c3"),
        ]
    return f"{key}: " + "; ".join(str(r) for turn in turns for r in turn)


@REGISTRY.register("ledger")
def ledger_agent() -> Agent:
    """A lookup, then a lookup and a session write in parallel, then an answer."""
    return Agent(client=_scripted(_ledger), name="Ledger", tools=[lookup, remember])


def _long(request: ScriptedRequest) -> Any:
    turns = tool_turns(request)
    if len(turns) < 4:
        return Call("lookup", {"key": f"step {len(turns)}"}, call_id=f"s{len(turns)}")
    return f"{len(turns)} steps done"


@REGISTRY.register("long")
def long_agent() -> Agent:
    """Four sequential tool iterations, then an answer."""
    return Agent(client=_scripted(_long), name="Long", tools=[lookup])


def _memo(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return Call("remember", {"key": "last", "value": key_of(request)}, call_id="m1")
    return f"{len(request.messages)} messages seen"


@REGISTRY.register("memo")
def memo_agent() -> Agent:
    """Remembers the request in session state and says how much conversation it saw."""
    return Agent(client=_scripted(_memo), name="Memo", tools=[remember])


def _bulky(request: ScriptedRequest) -> Any:
    return Call("bulky", call_id="b1") if not tool_turns(request) else "done"


@REGISTRY.register("bulky")
def bulky_agent() -> Agent:
    """One call whose result is large."""
    return Agent(client=_scripted(_bulky), name="Bulky", tools=[bulky])


def _pay(request: ScriptedRequest) -> Any:
    return Call("pay", {"amount": 5}, call_id="p1") if not tool_turns(request) else "Paid."


@REGISTRY.register("cashier")
def cashier_agent() -> Agent:
    """A payment that waits for approval."""
    return Agent(client=_scripted(_pay), name="Cashier", tools=[pay])


def _unreachable(request: ScriptedRequest) -> str:
    raise ConnectionError("model unreachable")


@REGISTRY.register("broken")
def broken_agent() -> Agent:
    """A model that cannot be reached."""
    return Agent(client=_scripted(_unreachable), name="Broken")


def _research(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return Call("remember", {"key": "findings", "value": "sunny all week"}, call_id="f1")
    return "Stored the findings."


def _lead(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return Call("research", {"task": "Lisbon weather"}, call_id="r1")
    return f"Research says: {tool_turns(request)[0][0]}"


@REGISTRY.register("lead")
def lead_agent() -> Agent:
    """A lead agent whose research sub-agent writes to the shared session."""
    researcher = Agent(client=_scripted(_research), name="Researcher", tools=[remember])
    research = researcher.as_tool(name="research", description="Research a task.", propagate_session=True)
    return Agent(client=_scripted(_lead), name="Lead", tools=[research])


async def _brief(context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:
    await call_next()


@REGISTRY.register("guarded")
def guarded_agent() -> Agent:
    """An agent with agent middleware, which a distributed run refuses."""
    return Agent(client=_scripted(lambda request: "hi"), name="Guarded", middleware=[_brief])


@REGISTRY.register("demo", extra_tools=[book_hotel])
def demo_agent() -> Agent:
    """The demo trip planner (it adds book_hotel at run time)."""
    return build_demo_agent(store=False)


# -- agents whose runs are compared with local runs of the same agent ------------------------------


def _gate(request: ScriptedRequest) -> Any:
    turns = tool_turns(request)
    if turns:
        return "Settled: " + "; ".join(str(r) for turn in turns for r in turn)
    return [
        Call("pay", {"amount": 5}, call_id="g1"),
        Call("pay", {"amount": "lots"}, call_id="g2"),
        Call("lookup", {"key": "rate"}, call_id="g3"),
    ]


@REGISTRY.register("gate")
def gate_agent() -> Agent:
    """A batch with a gated call, a gated call whose arguments cannot run, and a free call."""
    return Agent(client=_scripted(_gate), name="Gate", tools=[pay, lookup])


@tool
def broken_tool(ctx: FunctionInvocationContext) -> str:
    """Always fails."""
    _executed(ctx)
    raise RuntimeError("out of order")


def _stubborn(request: ScriptedRequest) -> Any:
    step = len(tool_turns(request))
    return Call("lookup", {"key": f"again {step}"}, call_id=f"l{step}")


@REGISTRY.register("stubborn")
def stubborn_agent() -> Agent:
    """Keeps calling a tool, also on the final call the iteration limit allows."""
    return Agent(client=_scripted(_stubborn), name="Stubborn", tools=[lookup], max_iterations=2)


def _failing(request: ScriptedRequest) -> Any:
    return Call("broken_tool", call_id=f"e{len(tool_turns(request))}")


@REGISTRY.register("failing")
def failing_agent() -> Agent:
    """A tool that always fails, until the streak of erroring batches stops the loop."""
    return Agent(client=_scripted(_failing), name="Failing", tools=[broken_tool], max_consecutive_errors=2)


@function_middleware
async def _cached(context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
    if context.arguments.get("key") == "cached":
        context.result = "from the cache"  # answers in the tool's place
        return
    await call_next()


@chat_middleware
async def _cool(context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
    context.options["temperature"] = 0.0
    await call_next()


def _cache(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return [
            Call("lookup", {"key": "cached"}, call_id="k1"),
            Call("lookup", {"key": "fresh"}, call_id="k2"),
        ]
    return "; ".join(str(r) for r in tool_turns(request)[0])


@REGISTRY.register("cache")
def cache_agent() -> Agent:
    """Function middleware answers one call itself; chat middleware changes each request."""
    return Agent(client=_scripted(_cache), name="Cache", tools=[lookup], middleware=[_cached, _cool])


def _kept(request: ScriptedRequest) -> Any:
    """A lookup for each new question, then the answer; the response id follows the chain."""
    previous = request.options.get("conversation_id") or "new"
    last = request.messages[-1]
    if last.role == "tool":
        message = Message("assistant", [f"noted: {last.contents[0].result}"])
    else:
        call = Content.from_function_call("k1", "lookup", arguments={"key": last.text})
        message = Message("assistant", (call,))
    return ChatResponse(message, response_id=f"resp_{len(request.messages)}_{previous}")


@REGISTRY.register("kept")
def kept_agent() -> Agent:
    """A conversation the service keeps: each call sends only what it does not hold."""
    client = ScriptedChatClient([_kept], repeat=True, keeps_conversations=True)
    return Agent(client=client, name="Kept", tools=[lookup], default_options={"store": True})


# -- approvals that must run once: a failed, a cancelled and a concurrent resume ---------------------

MODEL_GATE: anyio.Event | None = None
"""When set, the model call after a tool result waits for it (a test cancels the run there)."""
MODEL_ARRIVED: anyio.Event | None = None


@tool(approval_mode="always_require")
def wire(amount: int, ctx: FunctionInvocationContext) -> str:
    """Send money (a person approves first)."""
    _executed(ctx)
    return f"sent {amount}"


def _wire(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return Call("wire", {"amount": 7}, call_id="w1")
    return "Sent: " + "; ".join(str(r) for turn in tool_turns(request) for r in turn)


def _wire_then_down(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return Call("wire", {"amount": 7}, call_id="w1")
    raise RuntimeError("the model is down")


@chat_middleware
async def _held_after_tools(context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
    if MODEL_GATE is not None and any(m.role == "tool" for m in context.messages):
        if MODEL_ARRIVED is not None:
            MODEL_ARRIVED.set()
        await MODEL_GATE.wait()
    await call_next()


@REGISTRY.register("wire")
def wire_agent() -> Agent:
    """One gated call; the model call after its result waits at MODEL_GATE when a test sets it."""
    return Agent(client=_scripted(_wire), name="Wire", tools=[wire], middleware=[_held_after_tools])


TOOL_GATE: anyio.Event | None = None
"""When set, ``slow_wire`` waits for it after it started (a test cancels the run there)."""
TOOL_ARRIVED: anyio.Event | None = None


@tool(approval_mode="always_require")
async def slow_wire(amount: int, ctx: FunctionInvocationContext) -> str:
    """Send money slowly (a person approves first)."""
    _executed(ctx)
    if TOOL_GATE is not None:
        if TOOL_ARRIVED is not None:
            TOOL_ARRIVED.set()
        await TOOL_GATE.wait()
    return f"sent {amount}"


def _slow_wire(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return Call("slow_wire", {"amount": 7}, call_id="w1")
    return "Sent."


@REGISTRY.register("slow_wire")
def slow_wire_agent() -> Agent:
    """One gated call whose tool waits at TOOL_GATE when a test sets it."""
    return Agent(client=_scripted(_slow_wire), name="SlowWire", tools=[slow_wire])


@REGISTRY.register("wire_down")
def wire_down_agent() -> Agent:
    """One gated call; the model call after its result fails."""
    return Agent(client=_scripted(_wire_then_down), name="WireDown", tools=[wire])


@function_middleware
async def _deny_secret(context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
    if context.arguments.get("key") == "secret":
        raise MiddlewareFailure("the secret is not to be looked up")
    await call_next()


def _nosy(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return [Call("lookup", {"key": "secret"}, call_id="s1")]
    return "unreachable"


@REGISTRY.register("nosy")
def nosy_agent() -> Agent:
    """Function middleware that fails closed on one call: the run fails, nothing answers it."""
    return Agent(client=_scripted(_nosy), name="Nosy", tools=[lookup], middleware=[_deny_secret])


@REGISTRY.register("brief")
def brief_agent() -> Agent:
    """The memo agent with instructions of its own, which a run's instructions follow."""
    return Agent(client=_scripted(_memo), name="Brief", tools=[remember], instructions="Be brief.")


@tool(approval_mode="always_require")
async def approved_lookup(key: str, ctx: FunctionInvocationContext) -> str:
    """Look a key up once a person approved it (held at the gate while a test holds it)."""
    _executed(ctx)
    if GATE is not None:
        await GATE.wait()
    return f"value of {key}"


@chat_middleware
async def _model_held_after_tools(context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
    """The model call after a tool's result waits at MODEL_GATE when a worker process sets it,
    and says where it waits in EXECUTIONS (``pid - - model``)."""
    if MODEL_GATE is not None and any(m.role == "tool" for m in context.messages):
        if EXECUTIONS is not None:
            with EXECUTIONS.open("a") as file:
                file.write(f"{os.getpid()} - - model\n")
        await MODEL_GATE.wait()
    await call_next()


def _approved_lookup(request: ScriptedRequest) -> Any:
    if not tool_turns(request):
        return Call("approved_lookup", {"key": key_of(request) or "k"}, call_id="a1")
    return "Looked up: " + "; ".join(str(r) for turn in tool_turns(request) for r in turn)


@REGISTRY.register("approved")
def approved_agent() -> Agent:
    """One gated lookup held at GATE; the model call after its result held at MODEL_GATE."""
    return Agent(
        client=_scripted(_approved_lookup),
        name="Approved",
        tools=[approved_lookup],
        middleware=[_model_held_after_tools],
    )
