"""A paused batch resumes once: a second resume of the same answers while the first still runs
is refused before anything is recorded, so no gated call runs twice."""

from __future__ import annotations

import anyio
import pytest

from agentledger import Agent, ApprovalError, MemoryEventStore, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_two_resumes_of_one_batch_run_it_once() -> None:
    entered, leave = anyio.Event(), anyio.Event()
    ran: list[int] = []

    @tool(approval_mode="always_require")
    async def transfer(amount: int) -> str:
        """Move money."""
        ran.append(amount)
        entered.set()
        await leave.wait()
        return f"moved {amount}"

    store = MemoryEventStore()
    client = ScriptedChatClient([Call("transfer", {"amount": 5}), "Done."])
    agent = Agent(client=client, tools=[transfer], store=store)
    session = agent.create_session()
    paused = await agent.run("Move 5.", session=session)
    answer = Message("user", tuple(r.to_approval_response(True) for r in paused.user_input_requests))
    before = len(await store.streams())
    refused: list[ApprovalError] = []

    async def first() -> None:
        await agent.run(answer, session=session)

    with anyio.fail_after(30):  # a second resume that ran the tool would wait here forever
        async with anyio.create_task_group() as group:
            group.start_soon(first)
            await entered.wait()  # the first resume is inside the tool
            try:
                with pytest.raises(ApprovalError, match="being resumed by run") as caught:
                    await agent.run(answer, session=session)
                refused.append(caught.value)
            finally:
                leave.set()

    assert ran == [5]
    assert len(await store.streams()) == before + 1  # the refused resume recorded nothing
    with pytest.raises(ApprovalError, match="match no call awaiting approval"):
        await agent.run(answer, session=session)  # and after it, the answer is used up
