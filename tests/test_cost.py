"""What a run cost, from its log: per model call, run tree, agent and model, and the share of
the input each tool result added; ``agentledger cost`` prints it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import pytest

from agentledger import Agent, ChatResponse, Content, Message, Usage, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.cli import main
from agentledger.core.events import Event, ModelResponded, ToolSpec
from agentledger.core.messages import result_text
from agentledger.cost import cost_report, schema_tokens, tool_offers
from agentledger.testing import FixedClock, SequentialIds, capture_events

pytestmark = pytest.mark.anyio

BIG = 40_000  # characters of the large tool result


def _sent_chars(messages: Sequence[Message]) -> int:
    """Every character a request sends: texts, call arguments and results."""
    size = 0
    for message in messages:
        for c in message.contents:
            size += len(c.text or "") + len(str(c.arguments or "")) + len(c.name or "")
            if c.type == "function_result":
                size += len(result_text(c.result))
    return size


def _counting(*answers: str | Call | list[Call], model: str = "model-a") -> ScriptedChatClient:
    """A scripted model whose usage counts what each request sent: 4 characters a token, plus
    10 tokens of overhead, and 2 of its 5 output tokens reasoning."""

    def answer(entry: str | Call | list[Call]) -> Callable[[ScriptedRequest], ChatResponse]:
        def respond(request: ScriptedRequest) -> ChatResponse:
            if isinstance(entry, str):
                contents: tuple[Content, ...] = (Content.from_text(entry),)
            else:
                calls = [entry] if isinstance(entry, Call) else entry
                contents = tuple(
                    Content.from_function_call(c.call_id or c.name, c.name, arguments=json.dumps(c.arguments))
                    for c in calls
                )
            sent = _sent_chars(request.messages) // 4 + 10
            usage = Usage(sent, 5, sent + 5, cache_read_tokens=0, reasoning_tokens=2)
            return ChatResponse(Message("assistant", contents), model=model, usage=usage)

        return respond

    return ScriptedChatClient([answer(a) for a in answers])


@tool
def fetch_page(url: str) -> str:
    """Fetch a whole web page."""
    return "x" * BIG


@tool
def word_count(text: str) -> int:
    """Count words."""
    return 3


def _tree(store: object = False) -> Agent:
    clock, ids = FixedClock(), SequentialIds()
    child = Agent(
        client=_counting(
            Call("word_count", {"text": "a b c"}, call_id="c_wc"), "three words", model="model-b"
        ),
        name="Counter",
        tools=[word_count],
        clock=clock,
        ids=ids,
        store=store,  # type: ignore[arg-type]
    )
    lead_client = _counting(
        [
            Call("fetch_page", {"url": "https://example.test"}, call_id="c_fetch"),
            Call("count", {"task": "x"}, call_id="c_count"),
        ],
        "done",
    )
    return Agent(
        client=lead_client,
        name="Lead",
        tools=[fetch_page, child.as_tool(name="count", description="Count words.", arg_name="task")],
        clock=clock,
        ids=ids,
        store=store,  # type: ignore[arg-type]
    )


def _price(model: str, usage: Usage, at: int) -> float | None:
    per_token = {"model-a": 1e-6, "model-b": 3e-6}.get(model)
    return None if per_token is None else per_token * (usage.input_tokens + usage.output_tokens)


async def _recorded() -> tuple[list[Event], str]:
    with capture_events() as events:
        response = await _tree().run("summarise the page")
    return list(events), response.run_id


async def test_a_tree_adds_up_to_the_sum_of_its_model_calls() -> None:
    """Totals, the lead run's tree, the agents and the models all add up to the sum of every
    model call's usage across the lead run and its sub-agent; so do the prices."""
    events, lead = await _recorded()
    responded = [e for e in events if isinstance(e, ModelResponded)]
    assert {e.run_id for e in responded} != {lead}  # the sub-agent made calls of its own
    expected = Usage()
    for e in responded:
        assert e.usage is not None
        expected = expected + e.usage
    report = cost_report(events, price=_price)
    assert report.total.usage == expected
    assert report.total.calls == len(responded) == 4
    [root, child] = report.runs
    assert (root.run_id, root.depth, root.agent, child.depth, child.agent) == (lead, 0, "Lead", 1, "Counter")
    assert child.parent_run_id == lead
    assert root.tree == report.total
    assert root.own.merge(child.tree) == root.tree
    assert root.own.calls == 2
    assert sum((t.usage for t in report.by_agent.values()), Usage()) == expected
    assert set(report.by_model) == {"model-a", "model-b"}
    assert sum(t.calls for t in report.by_model.values()) == 4
    costs = [_price(e.model or "", e.usage, e.at) for e in responded if e.usage is not None]
    assert report.total.cost == pytest.approx(sum(c for c in costs if c is not None))
    assert report.total.usage.reasoning_tokens == 8
    assert report.total.usage.cache_write_tokens is None  # nobody reported it


async def test_without_prices_costs_are_none_and_tokens_still_add_up() -> None:
    events, _ = await _recorded()
    report = cost_report(events)
    assert report.total.cost is None
    assert report.total.unpriced == 4
    assert report.total.usage.input_tokens > BIG // 4


async def test_the_large_tool_result_gets_the_share_of_the_next_call() -> None:
    """The result that added 40,000 characters to the next request is charged about 10,000
    input tokens; the sub-agent's short answer next to it almost nothing."""
    events, lead = await _recorded()
    shares = {s.call_id: s for s in cost_report(events).tool_shares}
    fetch, count = shares["c_fetch"], shares["c_count"]
    assert (fetch.name, fetch.run_id, fetch.chars, fetch.seen_by) == ("fetch_page", lead, BIG, 1)
    assert fetch.tokens is not None
    assert abs(fetch.tokens - BIG // 4) <= 20
    assert count.tokens is not None
    assert count.tokens < 20
    assert shares["c_wc"].tokens is not None  # the sub-agent's own tool, in its own run
    assert shares["c_wc"].tokens < 5


async def test_a_share_needs_the_usage_of_both_calls() -> None:
    """A model that reports no usage leaves the share unknown, not zero."""

    @tool
    def ping() -> str:
        return "pong"

    client = ScriptedChatClient(
        [ChatResponse(Message("assistant", (Content.from_function_call("p1", "ping"),))), "ok"]
    )
    with capture_events() as events:
        await Agent(client=client, tools=[ping], clock=FixedClock(), ids=SequentialIds()).run("x")
    [share] = cost_report(events).tool_shares
    assert share.tokens is None


async def test_tools_offered_against_used() -> None:
    """Each model call of the lead offered both tools, once it called each; the schema tokens
    are the estimate per offer times the offers."""
    events, _ = await _recorded()
    rows = {row.name: row for row in tool_offers(events)}
    fetch = rows["fetch_page"]
    assert (fetch.offered, fetch.called) == (2, 1)
    spec = ToolSpec(name="fetch_page", description=fetch_page.description, parameters=fetch_page.parameters)
    assert fetch.schema_tokens == schema_tokens(spec)
    assert fetch.offered_tokens == 2 * fetch.schema_tokens
    assert (rows["word_count"].offered, rows["word_count"].called) == (2, 1)
    assert (rows["count"].offered, rows["count"].called) == (2, 1)


def test_the_cost_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``cost RUN`` prints the tree, calls, agents, models and tool shares; ``--json`` the same
    numbers; ``cost`` with filters finds the tree from its lead run; ``--tools`` adds offers."""
    path = tmp_path / "runs.jsonl"
    response = anyio.run(_tree(JsonlEventStore(path)).run, "summarise the page")
    store = str(path)
    assert main(["cost", response.run_id, "--store", store, "--no-prices"]) == 0
    text = capsys.readouterr().out
    for heading in ("runs (each with its sub-agents)", "model calls", "by agent", "by model", "tool results"):
        assert heading in text
    assert "Counter" in text
    assert "fetch_page" in text
    assert main(["cost", response.run_id[:5], "--store", store, "--json", "--tools", "--no-prices"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["priced"] is False
    assert document["total"]["calls"] == 4
    assert [r["depth"] for r in document["runs"]] == [0, 1]
    assert {t["name"] for t in document["tools"]} == {"fetch_page", "count", "word_count"}
    assert main(["cost", "--store", store, "--agent", "Lead", "--json", "--no-prices"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == document["total"]
    assert main(["cost", response.run_id, "--agent", "Lead", "--store", store]) == 2
    assert "not both" in capsys.readouterr().err


def test_genai_prices_price_a_call_by_model_and_time() -> None:
    """The genai-prices table prices a known model at the call's time, cache reads cheaper than
    fresh input; a model it does not know has no price."""
    from agentledger.adapters.prices import available, genai_price

    assert available()
    at = 1_767_225_600_000_000_000  # 2026-01-01
    fresh = genai_price("gpt-4o", Usage(1000, 100, 1100), at)
    cached = genai_price("gpt-4o", Usage(1000, 100, 1100, cache_read_tokens=500), at)
    assert fresh is not None
    assert cached is not None
    assert 0 < cached < fresh
    assert genai_price("no-such-model-anywhere", Usage(1000, 100, 1100), at) is None


async def test_the_viewer_charts_tokens_per_call_by_origin() -> None:
    """Each call with a usage is a bar whose segments add up to its input and output tokens; the
    lead's second call shows the large result as its own segment, and the page draws it."""
    from agentledger.adapters.export._html_chart import segments
    from agentledger.adapters.export.html import render_html

    events, lead = await _recorded()
    report = cost_report(events)
    bars = segments(report)
    assert len(bars) == 4
    for call, parts in bars:
        assert call.usage is not None
        assert sum(t for _, t in parts) == call.usage.input_tokens + call.usage.output_tokens
    [(_, second)] = [(c, p) for c, p in bars if c.run_id == lead and c.iteration == 2]
    origins = dict(second)
    assert abs(origins["tool fetch_page"] - BIG // 4) <= 20
    assert {"earlier input", "model's answer", "output"} <= set(origins)
    page = render_html(events)
    assert '<section class="cost-chart"' in page
    assert f"{lead} call 2: tool fetch_page" in page
