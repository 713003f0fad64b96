"""What a replay hands out is its own: a write in place into a recorded result or a folded
state changes that copy, never an event of the log it came from."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agentledger import Agent, FunctionInvocationContext, MemoryEventStore, function_middleware, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core.events import RunStarted, SessionUpdated, ToolReturned
from agentledger.replay import load, replay

pytestmark = pytest.mark.anyio


async def test_a_recorded_result_written_in_place_in_a_replay_leaves_the_store_as_it_was() -> None:
    @tool
    def lookup(item: str) -> dict[str, Any]:
        """Look an item up."""
        return {"item": item, "tags": ["a"]}

    @function_middleware
    async def annotate(context: Any, call_next: Any) -> None:
        await call_next()
        if isinstance(context.result, dict):
            context.result["tags"].append("seen")

    def agent(client: ScriptedChatClient, store: MemoryEventStore | bool) -> Agent:
        return Agent(client=client, tools=[lookup], middleware=[annotate], store=store)

    store = MemoryEventStore()
    response = await agent(ScriptedChatClient([Call("lookup", {"item": "tea"}), "Done."]), store).run("Tea.")
    stored = msgspec.json.encode(
        [e.result for e in await store.read(response.run_id) if isinstance(e, ToolReturned)]
    )
    recorded = await load(store, response.run_id)
    for _ in range(2):
        await replay(recorded, agent(ScriptedChatClient([]), False))
    after = [e.result for e in await store.read(response.run_id) if isinstance(e, ToolReturned)]
    assert msgspec.json.encode(after) == stored


async def test_state_at_hands_out_copies() -> None:
    @tool
    def keep(ctx: FunctionInvocationContext) -> str:
        """Keep notes."""
        assert ctx.session is not None
        ctx.session.state["notes"] = ["first"]
        return "kept"

    store = MemoryEventStore()
    agent = Agent(client=ScriptedChatClient([Call("keep"), "Done."]), tools=[keep], store=store)
    response = await agent.run("Keep.", session=agent.create_session())
    recorded = await load(store, response.run_id)
    state = recorded.state_at(len(recorded.events) - 1)
    assert state.session == {"notes": ["first"]}
    state.session["notes"].append("changed")
    assert isinstance(state.tools[0].parameters, dict)
    state.tools[0].parameters["properties"] = {"evil": {"type": "string"}}
    events = await store.read(response.run_id)
    assert [c.value for e in events if isinstance(e, SessionUpdated) for c in e.changes] == [["first"]]
    [started] = [e for e in events if isinstance(e, RunStarted)]
    assert "evil" not in started.tools[0].parameters["properties"]
    assert recorded.state_at(len(recorded.events) - 1).session == {"notes": ["first"]}


async def test_a_copied_result_keeps_its_values_as_recorded() -> None:
    """Tuples stay tuples and NaN stays NaN in the copy middleware sees (a JSON round trip would
    turn them into lists and nulls, and an unchanged agent would diverge); a tuple of rows is
    copied too, so annotating them in place leaves the store as it was."""
    seen: list[tuple[str, bool]] = []

    @tool
    def score(item: str) -> dict[str, Any]:
        """Score an item."""
        return {"item": item, "range": (0, 10), "score": float("nan"), "rows": ({"id": 1},)}

    @function_middleware
    async def look(context: Any, call_next: Any) -> None:
        await call_next()
        result = context.result
        seen.append((type(result["range"]).__name__, result["score"] != result["score"]))

    def agent(client: ScriptedChatClient, store: MemoryEventStore | bool) -> Agent:
        return Agent(client=client, tools=[score], middleware=[look], store=store)

    store = MemoryEventStore()
    response = await agent(ScriptedChatClient([Call("score", {"item": "tea"}), "Done."]), store).run("Score.")
    recorded = await load(store, response.run_id)
    report = await replay(recorded, agent(ScriptedChatClient([]), False))
    assert report.findings == []
    assert seen == [("tuple", True), ("tuple", True)]
    live = await replay(recorded, agent(ScriptedChatClient([]), False), tools="live")
    assert live.findings == []  # NaN compares as NaN


async def test_a_tuple_result_annotated_in_place_in_a_replay_leaves_the_store_as_it_was() -> None:
    @tool
    def rows() -> tuple[dict[str, int], ...]:
        """The rows."""
        return ({"id": 1}, {"id": 2})

    @function_middleware
    async def mark(context: Any, call_next: Any) -> None:
        await call_next()
        for row in context.result:
            row["seen"] = row.get("seen", 0) + 1

    def agent(client: ScriptedChatClient, store: MemoryEventStore | bool) -> Agent:
        return Agent(client=client, tools=[rows], middleware=[mark], store=store)

    store = MemoryEventStore()
    response = await agent(ScriptedChatClient([Call("rows"), "Done."]), store).run("Rows.")
    stored = msgspec.json.encode(
        [e.result for e in await store.read(response.run_id) if isinstance(e, ToolReturned)]
    )
    recorded = await load(store, response.run_id)
    for _ in range(2):
        await replay(recorded, agent(ScriptedChatClient([]), False))
    after = [e.result for e in await store.read(response.run_id) if isinstance(e, ToolReturned)]
    assert msgspec.json.encode(after) == stored


async def test_a_bare_nan_result_from_a_json_store_replays_clean(tmp_path: Any) -> None:
    """A JSON log holds NaN as null, and a result at its default (null) is left out of the
    record: it still matches the NaN the unchanged tool returns again."""
    from agentledger.adapters.stores.sqlite import SqliteEventStore

    @tool
    def ratio() -> float:
        """An undefined ratio."""
        return float("nan")

    def agent(client: ScriptedChatClient, store: Any) -> Agent:
        return Agent(client=client, tools=[ratio], store=store)

    store = SqliteEventStore(tmp_path / "runs.db")
    try:
        response = await agent(ScriptedChatClient([Call("ratio"), "Done."]), store).run("Ratio.")
        recorded = await load(store, response.run_id)
    finally:
        store.close()
    report = await replay(recorded, agent(ScriptedChatClient([]), False), tools="live")
    assert report.findings == []
