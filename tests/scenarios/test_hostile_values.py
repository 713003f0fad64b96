"""Values a run accepts must come back from its log: the gate before every append.

Each case is a value found to be written by a run and then unreadable (or a crash on the way):
a lone surrogate in model text or a tool result, usage numbers of the wrong type, a non-bool
approval flag, nesting deep enough to reach Python's recursion limit. Every run must end with a
typed error or an error result, and its stored log must read back whole, with ``seq`` 0, 1, 2...
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from agentledger import (
    Agent,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    Message,
    ModelResponseError,
    SessionStateError,
    UnrecordableError,
    tool,
)
from agentledger.adapters.chat._openai_chat import chat_response
from agentledger.adapters.chat._openai_responses import responses_response
from agentledger.adapters.chat.openai import MalformedResponseError
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores._codec import encode_records
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core.depth import MAX_DEPTH
from agentledger.core.events import (
    ArgumentsRejected,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelFailed,
    RunCompleted,
    RunFailed,
    ToolCalled,
    ToolFailed,
    ToolReturned,
)
from agentledger.core.limits import check_event, checked_bytes, keep_checked_bytes
from agentledger.core.messages import Usage
from agentledger.store import EventStore
from agentledger.testing import FixedClock, SequentialIds, event_types

pytestmark = pytest.mark.anyio

STORES: dict[str, Callable[[Path], Any]] = {
    "sqlite": lambda d: SqliteEventStore(d / "events.db"),
    "jsonl-directory": lambda d: JsonlEventStore(d / "runs"),
    "jsonl-journal": lambda d: JsonlEventStore(d / "runs.jsonl"),
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    opened = STORES[request.param](tmp_path)
    yield opened
    opened.close()


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def agent(script: list[Any], store: EventStore, tools: list[Any] | None = None) -> Agent:
    client = ScriptedChatClient(script)
    return Agent(client=client, tools=tools or [], store=store, clock=FixedClock(), ids=SequentialIds())


async def stored(store: EventStore) -> list[Any]:
    """The one run's log, read back through a fresh decode, checked contiguous."""
    (stream,) = await store.streams()
    events = await store.read(stream)
    assert [e.seq for e in events] == list(range(len(events)))
    return events


APPROVED_YES = Content("function_approval_response", call_id="c", approved="yes")  # type: ignore[arg-type]

# -- model output ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "why"),
    [
        (ChatResponse(text="bad \ud800 text"), "not UTF-8"),
        (ChatResponse(text="ok", usage=Usage(1.5, 1, 2)), "usage.input_tokens"),  # type: ignore[arg-type]
        (ChatResponse(text="ok", usage=Usage("a", None, 1.5)), "usage.input_tokens"),  # type: ignore[arg-type]
        (ChatResponse(text="ok", usage=Usage(2**63, 0, 0)), "usage.input_tokens"),
        (ChatResponse(text="ok", usage=Usage(-1, 0, 0)), "usage.input_tokens"),
        (ChatResponse(text="ok", usage=Usage(True, 0, 0)), "usage.input_tokens"),
        (ChatResponse(Message("assistant", [APPROVED_YES])), "approved"),
        (ChatResponse(Message("assistant", [Content("text", text="x", result=nested(300))])), "deeper"),
    ],
    ids=["surrogate", "float-usage", "junk-usage", "int64-usage", "negative-usage", "bool-usage",
         "approved-yes", "deep-result"],
)  # fmt: skip
async def test_model_output_the_log_cannot_hold_fails_the_run_with_a_readable_log(
    store: EventStore, response: ChatResponse, why: str
) -> None:
    with pytest.raises(ModelResponseError, match="cannot be recorded"):
        await agent([response], store).run("hi")
    events = await stored(store)
    assert event_types(events) == ["RunStarted", "ModelCalled", "ModelFailed", "RunFailed"]
    failed = events[2]
    assert isinstance(failed, ModelFailed)
    assert why in failed.message
    assert isinstance(events[3], RunFailed)


def test_a_run_with_bad_usage_leaves_the_store_listable(tmp_path: Path, capsys: Any) -> None:
    store = SqliteEventStore(tmp_path / "events.db")
    bad = agent([ChatResponse(text="ok", usage=Usage(1.5, 1, 2))], store)  # type: ignore[arg-type]
    with pytest.raises(ModelResponseError):
        anyio.run(bad.run, "hi")
    store.close()
    assert main(["runs", "--store", str(tmp_path / "events.db")]) == 0
    assert "failed: ModelResponseError" in capsys.readouterr().out


# -- tool results, arguments, session values -----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [("bad \ud800 text", "not UTF-8"), (nested(300), "deeper"), ({"n": 2**64}, "64-bit"),
     ({"n": -(2**63) - 1}, "64-bit")],
    ids=["surrogate", "deep", "uint64", "below-int64"],
)  # fmt: skip
async def test_a_tool_result_the_log_cannot_hold_becomes_an_error_result(
    store: EventStore, value: Any, why: str
) -> None:
    @tool
    def produce() -> Any:
        """Produce a value."""
        return value

    response = await agent([Call("produce"), "done"], store, [produce]).run("go")
    assert response.text == "done"
    events = await stored(store)
    (failed,) = [e for e in events if isinstance(e, ToolFailed)]
    assert failed.error_type == "UnrecordableError"
    assert why in failed.message
    assert not [e for e in events if isinstance(e, ToolReturned)]
    assert isinstance(events[-1], RunCompleted)


async def test_a_tool_error_message_with_a_surrogate_is_recorded_escaped(store: EventStore) -> None:
    @tool
    def explode() -> str:
        """Raise."""
        raise ValueError("bad \ud800 text")

    await agent([Call("explode"), "done"], store, [explode]).run("go")
    (failed,) = [e for e in await stored(store) if isinstance(e, ToolFailed)]
    assert failed.message == "bad \\ud800 text"


async def test_arguments_nested_near_the_recursion_limit_are_rejected(store: EventStore) -> None:
    @tool
    def take(x: Any) -> str:
        """Take anything."""
        return "taken"

    raw = '{"x": ' + "[" * 995 + "]" * 995 + "}"
    response = await agent([Call("take", raw), "done"], store, [take]).run("go")
    assert response.text == "done"
    (rejected,) = [e for e in await stored(store) if isinstance(e, ArgumentsRejected)]
    assert f"deeper than {MAX_DEPTH - 1}" in rejected.reason


@pytest.mark.parametrize("value", [nested(990), nested(254), "bad \ud800", {"\ud800": 1}, 2**64])
async def test_a_session_value_the_log_cannot_hold_is_refused_where_it_is_set(
    store: EventStore, value: Any
) -> None:
    refused: list[BaseException] = []

    @tool
    def keep(ctx: FunctionInvocationContext) -> str:
        """Keep a value in the session."""
        assert ctx.session is not None
        try:
            ctx.session.state["value"] = value
        except SessionStateError as exc:
            refused.append(exc)
            raise
        return "kept"

    run_agent = agent([Call("keep"), "done"], store, [keep])
    await run_agent.run("go", session=run_agent.create_session())
    assert len(refused) == 1
    events = await stored(store)
    assert "ToolFailed" in event_types(events)
    assert isinstance(events[-1], RunCompleted)


async def test_a_session_value_at_the_limit_is_kept(store: EventStore) -> None:
    @tool
    def keep(ctx: FunctionInvocationContext) -> str:
        """Keep a value in the session."""
        assert ctx.session is not None
        ctx.session.state["value"] = nested(MAX_DEPTH - 3)
        return "kept"

    run_agent = agent([Call("keep"), "done"], store, [keep])
    await run_agent.run("go", session=run_agent.create_session())
    assert "SessionUpdated" in event_types(await stored(store))


async def test_an_in_place_change_too_deep_fails_the_run_with_a_readable_log(store: EventStore) -> None:
    @tool
    def grow(ctx: FunctionInvocationContext) -> str:
        """Grow a list in place."""
        assert ctx.session is not None
        ctx.session.state["items"].append(nested(300))
        return "grown"

    run_agent = agent([Call("grow"), "done"], store, [grow])
    session = run_agent.create_session()
    session.state["items"] = []
    with pytest.raises(SessionStateError):
        await run_agent.run("go", session=session)
    events = await stored(store)
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error_type == "SessionStateError"


# -- the gate itself ------------------------------------------------------------------------------


def test_the_gate_refuses_what_the_decoder_would_refuse() -> None:
    good = ToolReturned(run_id="r", seq=0, at=0, call_id="c", name="n", result=nested(MAX_DEPTH - 1))
    assert check_event(good)
    for bad in (
        ToolReturned(run_id="r", seq=0, at=0, call_id="c", name="n", result=nested(MAX_DEPTH)),
        ToolReturned(run_id="r", seq=0, at=0, call_id="c", name="n", result=nested(5000)),
        ToolReturned(run_id="r", seq=0, at=0, call_id="c", name="n", result=object()),
        ToolReturned(run_id="r", seq=0, at=0, call_id="c", name="\udfff"),
        ToolReturned(run_id="r", seq=2**63, at=0, call_id="c", name="n"),
    ):
        with pytest.raises(UnrecordableError):
            check_event(bad)


@pytest.mark.parametrize(
    "bad",
    [
        ToolReturned(run_id="r", seq=0, at=1.5, call_id="c", name="n"),  # type: ignore[arg-type]
        ToolReturned(run_id="r", seq=0, at=2**63, call_id="c", name="n"),
        ToolReturned(run_id="r", seq=0, at=0, call_id="c", name="n", result=2**63),
        ToolReturned(run_id="r", seq=0, at=0, call_id="c", name="n", tool_result={"a": [-(2**63) - 1]}),
        ToolReturned(run_id="r", seq=0, at=0, call_id="c", name="n", result={"a": nested(MAX_DEPTH)}),
        ToolCalled(run_id="r", seq=0, at=0, call_id="c", name="n", arguments=[1, 2]),  # type: ignore[arg-type]
        MiddlewareShortCircuit(run_id="r", seq=0, at=0, call_id="c", middleware="m", result=[2**64]),
        ModelCalled(run_id="r", seq=0, at=0, iteration=1, tool_choice=3),  # type: ignore[arg-type]
    ],
)
def test_events_that_are_not_decoded_are_refused_as_the_decoder_would(bad: Any) -> None:
    with pytest.raises(UnrecordableError):
        check_event(bad)


def test_a_checked_event_hands_its_bytes_to_the_store_that_writes_it() -> None:
    keep_checked_bytes()  # what a durable store's first append does
    checked = ToolReturned(run_id="r", seq=3, at=5, call_id="c", name="n", result={"k": [1, "two"]})
    unchecked = ToolReturned(run_id="r", seq=4, at=6, call_id="c", name="n", result="x")
    data = check_event(checked)
    records = encode_records([checked, unchecked])
    assert records[0] is data  # the bytes of the check, not a second encoding
    assert records == [msgspec.json.encode(checked), msgspec.json.encode(unchecked)]
    assert checked_bytes(checked) is None  # taken once
    twin = ToolReturned(run_id="r", seq=3, at=5, call_id="c", name="n", result={"k": [1, "two"]})
    check_event(twin)
    assert checked_bytes(checked) is None
    assert checked_bytes(twin) is not None


# -- what an OpenAI-compatible server reports ------------------------------------------------------


@pytest.mark.parametrize("count", [-1, 2**63, 2**64, 1.5, "12", True])
def test_a_usage_no_run_could_record_is_a_malformed_answer(count: Any) -> None:
    usage = {"prompt_tokens": count, "completion_tokens": 1}
    chat = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": usage}
    responses = {"status": "completed", "output": [], "usage": {"input_tokens": count, "output_tokens": 1}}
    with pytest.raises(MalformedResponseError, match="expected shape"):
        chat_response(msgspec.json.encode(chat), "m")
    with pytest.raises(MalformedResponseError, match="expected shape"):
        responses_response(msgspec.json.encode(responses), "m")


def test_an_answer_nested_past_the_recursion_limit_is_a_malformed_answer() -> None:
    payload = b'{"choices": [{"message": {"content": "hi", "x": ' + b"[" * 5_000 + b"]" * 5_000 + b"}}]}"
    for parse in (chat_response, responses_response):
        with pytest.raises(MalformedResponseError):
            parse(payload, "m")
