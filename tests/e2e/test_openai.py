"""OpenAIChatClient end to end against a real OpenAI-compatible server process on loopback.

The server is fakellm (PyPI ``fakellm``): a FastAPI/uvicorn process that serves
``/v1/chat/completions``, whole and streamed as server-sent events, answering from YAML rules
(text, parallel tool calls whose argument JSON is streamed in fragments, error statuses). It runs
offline; the rules below script each conversation, matching on the prompt, on the tool results
already sent and on the tools offered, so a rule firing also proves what the client put on the
wire.

The seed examples run in their own interpreter with only the environment to configure them
(``OPENAI_BASE_URL`` pointed at the server). Their code is kept as written; only the imports name
``agentledger`` instead of ``agent_framework``, and statements that the seeds ``await`` at top
level sit inside ``async def main()``, since a script cannot await at module level.

Without fakellm these tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentledger import Agent, ModelCallError, tool
from agentledger.adapters.chat.openai import OpenAIChatClient, RateLimitError
from agentledger.core.events import ModelFailed, ModelResponded, encode_event
from agentledger.testing import FixedClock, SequentialIds, capture_events

KEY = "sk-e2e-loopback-7f3a9c"
MODEL = "gpt-4o-mini"
STARTUP_SECONDS = 60

RULES = """\
version: 1
rules:
  - name: rate_limited
    when: {header.x-scenario: rate-limited}
    respond: {status: 429, error: "Rate limit reached"}
  - name: weather_answer
    when: {tool_result_contains: "Oslo: sunny"}
    respond: {content: "Lima and Oslo are both sunny today."}
  - name: weather_calls
    when: {messages_contain: "weather in lima and oslo", tools_include: lookup}
    respond:
      tool_calls:
        - {name: lookup, arguments: {city: Lima}}
        - {name: lookup, arguments: {city: Oslo}}
  - name: email_answer
    when: {tool_result_contains: "Queued email for finance@example.com"}
    respond: {content: "The launch update is queued for finance@example.com."}
  - name: email_call
    when: {messages_contain: "email the launch update", tools_include: send_email}
    respond:
      tool_calls:
        - {name: send_email, arguments: {address: finance@example.com}}
  - name: topic_answer
    when: {tool_result_contains: "Stored 'budget review'"}
    respond: {content: "Noted: the budget review is on Friday."}
  - name: topic_call
    when: {messages_contain: "budget review is on friday", tools_include: remember_topic}
    respond:
      tool_calls:
        - {name: remember_topic, arguments: {topic: budget review}}
  - name: math_answer
    when: {tool_result_contains: "5! = 120"}
    respond: {content: "5 factorial is 120."}
  - name: math_factorial
    when: {tool_result_contains: "Loaded math tools", tools_include: factorial}
    respond:
      tool_calls:
        - {name: factorial, arguments: {n: 5}}
  - name: math_loader
    when: {messages_contain: "5 factorial", tools_include: load_math_tools}
    respond:
      tool_calls:
        - {name: load_math_tools, arguments: {}}
  - name: record_answer
    when: {tool_result_contains: "Updated record REC-42"}
    respond: {content: "Record REC-42 is now in-progress."}
  - name: record_update
    when: {tool_result_contains: "Record REC-42:", tools_include: update_record}
    respond:
      tool_calls:
        - {name: update_record, arguments: {record_id: REC-42, status: in-progress}}
  - name: record_fetch
    when: {messages_contain: "update record rec-42", tools_include: get_record}
    respond:
      tool_calls:
        - {name: get_record, arguments: {record_id: REC-42}}
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _require_fakellm() -> None:
    if importlib.util.find_spec("fakellm") is not None:
        return
    reason = "fakellm is not installed; the loopback end-to-end tests need it (pip install fakellm)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI=true it must be installed")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_serving(process: subprocess.Popen[str]) -> threading.Thread:
    """Read the server's output until uvicorn says it listens (bounded by STARTUP_SECONDS).

    The reader thread goes on draining the output, so the server never blocks on a full pipe.
    """
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while True:
        try:
            line = lines.get(timeout=STARTUP_SECONDS)
        except queue.Empty:
            pytest.fail("fakellm did not start:\n" + "".join(output))
        output.append(line)
        if "Uvicorn running on" in line:
            return reader
        if not line:
            pytest.fail("fakellm exited:\n" + "".join(output))


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fakellm process on 127.0.0.1 and a free port, with the rules above."""
    _require_fakellm()
    config = tmp_path_factory.mktemp("fakellm") / "fakellm.yaml"
    config.write_text(RULES)
    port = _free_port()
    command = [sys.executable, "-c", "from fakellm.cli import main; main()"]
    command += ["serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(config)]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=config.parent
    ) as process:
        reader: threading.Thread | None = None
        try:
            reader = _wait_until_serving(process)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if reader is not None:
                reader.join(timeout=10)


@pytest.fixture
def base_url(server_url: str) -> str:
    """The server's /v1 URL, its conversation memory cleared for this test."""
    httpx.post(f"{server_url}/_fakellm/reset").raise_for_status()
    return f"{server_url}/v1"


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"{city}: sunny"


def weather_agent(client: OpenAIChatClient) -> Agent:
    return client.as_agent(
        name="Weather",
        instructions="Answer briefly.",
        tools=[lookup],
        clock=FixedClock(),
        ids=SequentialIds(),
    )


class _NoWait(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


# -- agent runs through the server ------------------------------------------------------------


@pytest.mark.anyio
async def test_agent_run_with_parallel_tool_calls(base_url: str) -> None:
    """A run over HTTP: two parallel calls executed, their results sent back, the answer recorded."""
    async with OpenAIChatClient(MODEL, api_key=KEY, base_url=base_url) as client:
        response = await weather_agent(client).run("What is the weather in Lima and Oslo?")
    assert response.text == "Lima and Oslo are both sunny today."
    responded = [e for e in response.events if isinstance(e, ModelResponded)]
    assert [e.finish_reason for e in responded] == ["tool_calls", "stop"]
    assert all(e.model == MODEL and e.response_id for e in responded)
    calls = responded[0].message.function_calls
    assert [(c.name, c.arguments) for c in calls] == [
        ("lookup", '{"city": "Lima"}'),
        ("lookup", '{"city": "Oslo"}'),
    ]
    assert response.usage.total_tokens > 0
    assert not any(KEY.encode() in encode_event(e) for e in response.events)


@pytest.mark.anyio
async def test_agent_run_stream_with_parallel_tool_calls(base_url: str) -> None:
    """Streamed over HTTP: word deltas, calls assembled from argument fragments, results, answer."""
    async with OpenAIChatClient(MODEL, api_key=KEY, base_url=base_url) as client:
        agent = weather_agent(client)
        updates = [u async for u in agent.run_stream("What is the weather in Lima and Oslo?")]
    calls = [c for u in updates for c in u.contents if c.type == "function_call"]
    assert [c.arguments for c in calls] == ['{"city": "Lima"}', '{"city": "Oslo"}']
    results = [c for u in updates if u.role == "tool" for c in u.contents]
    assert sorted(c.result for c in results) == ["Lima: sunny", "Oslo: sunny"]
    texts = [u.text for u in updates if u.role == "assistant" and u.text]
    assert len(texts) > 1
    assert "".join(texts) == "Lima and Oslo are both sunny today."


@pytest.mark.anyio
async def test_rate_limit_through_client_kwargs_headers_is_recorded(base_url: str) -> None:
    """A header from client_kwargs selects a 429 rule; retries end in ModelFailed(RateLimitError)."""
    waits = _NoWait()
    async with OpenAIChatClient(MODEL, api_key=KEY, base_url=base_url, sleep=waits, max_retries=2) as client:
        agent = weather_agent(client)
        with capture_events() as events, pytest.raises(ModelCallError) as caught:
            await agent.run("Weather?", client_kwargs={"headers": {"X-Scenario": "rate-limited"}})
    assert isinstance(caught.value.__cause__, RateLimitError)
    assert "Rate limit reached" in str(caught.value)
    assert [e.error_type for e in events if isinstance(e, ModelFailed)] == ["RateLimitError"]
    assert waits == [0.5, 1.0]


# -- the seeds' examples, run unchanged -------------------------------------------------------


def _script(definitions: str, awaited: str = "") -> str:
    """A runnable script: the example's definitions, and its awaited statements in ``main``."""
    code = textwrap.dedent(definitions)
    if awaited:
        body = textwrap.indent(textwrap.dedent(awaited), "    ")
        code += f"\n\nimport asyncio\n\n\nasync def main() -> None:\n{body}\n\nasyncio.run(main())\n"
    return code


def _run_example(code: str, base_url: str, tmp_path: Path) -> str:
    """Run ``code`` in a fresh interpreter configured only by the environment; its stdout."""
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": KEY,
        "OPENAI_CHAT_MODEL_ID": MODEL,
    }
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


SEND_EMAIL = """
from typing import Annotated

from agentledger import FunctionInvocationContext, tool
from agentledger.adapters.chat.openai import OpenAIChatClient


@tool(approval_mode="never_require")
def send_email(
    address: Annotated[str, "Recipient email address."],
    ctx: FunctionInvocationContext,
) -> str:
    user_id = ctx.kwargs["user_id"]
    tenant = ctx.kwargs.get("tenant", "default")
    return f"Queued email for {address} from {user_id} ({tenant})"


agent = OpenAIChatClient().as_agent(
    name="Notifier",
    instructions="Send email updates.",
    tools=[send_email],
)
"""

SEND_EMAIL_RUN = """
response = await agent.run(
    "Email the launch update to finance@example.com",
    function_invocation_kwargs={
        "user_id": "user-123",
        "tenant": "contoso",
    },
)

print(response.text)
"""

ENRICH_MIDDLEWARE = """
from collections.abc import Awaitable, Callable

from agentledger import FunctionInvocationContext
from agentledger.adapters.chat.openai import OpenAIChatClient


async def enrich_tool_runtime_context(
    context: FunctionInvocationContext,
    call_next: Callable[[], Awaitable[None]],
) -> None:
    context.kwargs.setdefault("tenant", "contoso")
    context.kwargs.setdefault("request_source", "middleware")
    await call_next()


agent = OpenAIChatClient().as_agent(
    name="Notifier",
    instructions="Send email updates.",
    tools=[send_email],
    middleware=[enrich_tool_runtime_context],
)
"""

REMEMBER_TOPIC = """
from typing import Annotated

from agentledger import FunctionInvocationContext, tool
from agentledger.adapters.chat.openai import OpenAIChatClient


@tool(approval_mode="never_require")
def remember_topic(
    topic: Annotated[str, "Topic to remember."],
    ctx: FunctionInvocationContext,
) -> str:
    if ctx.session is None:
        return "No session available."

    ctx.session.state["topic"] = topic
    return f"Stored {topic!r} in session state."


agent = OpenAIChatClient().as_agent(
    name="MemoryAgent",
    instructions="Remember important topics.",
    tools=[remember_topic],
)
"""

REMEMBER_TOPIC_RUN = """
session = agent.create_session()
await agent.run("Remember that the budget review is on Friday.", session=session)
print(session.state["topic"])
"""

DELEGATE = """
from agentledger import FunctionInvocationContext, tool
from agentledger.adapters.chat.openai import OpenAIChatClient


@tool(description="Store findings for later steps.")
def store_findings(findings: str, ctx: FunctionInvocationContext) -> None:
    if ctx.session is not None:
        ctx.session.state["findings"] = findings


client = OpenAIChatClient()

research_agent = client.as_agent(
    name="ResearchAgent",
    instructions="Research the topic and store findings.",
    tools=[store_findings],
)

research_tool = research_agent.as_tool(
    name="research",
    description="Research a topic and store findings.",
    arg_name="query",
    propagate_session=True,
)
print(research_tool.name)
"""

LOADER = """
import asyncio
import warnings
from typing import Annotated

from agentledger import Agent, FunctionInvocationContext, tool
from agentledger.adapters.chat.openai import OpenAIChatClient
from pydantic import Field

warnings.filterwarnings("ignore", category=FutureWarning)  # suppress ExperimentalWarning for brevity


@tool(approval_mode="never_require")
def factorial(n: Annotated[int, Field(description="A non-negative integer.")]) -> str:
    \"\"\"Compute the factorial of n.\"\"\"
    if n < 0:
        return "Error: n must be a non-negative integer."
    result = 1
    for value in range(2, n + 1):
        result *= value
    return f"{n}! = {result}"


@tool(approval_mode="never_require")
def fibonacci(n: Annotated[int, Field(description="The 0-based index in the Fibonacci sequence.")]) -> str:
    \"\"\"Compute the n-th Fibonacci number.\"\"\"
    if n < 0:
        return "Error: n must be a non-negative integer."
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return f"fib({n}) = {a}"


# The ctx parameter is injected by the framework and is NOT visible to the model.
@tool(approval_mode="never_require")
def load_math_tools(ctx: FunctionInvocationContext) -> str:
    \"\"\"Load additional math tools (factorial, fibonacci) so they can be used.\"\"\"
    ctx.add_tools([factorial, fibonacci])
    return "Loaded math tools: factorial, fibonacci. You can now call them."


async def main() -> None:
    agent = Agent(
        client=OpenAIChatClient(),
        name="MathAgent",
        instructions=(
            "You are a math assistant. "
            "If you need math capabilities that are not yet available, call load_math_tools first."
        ),
        tools=[load_math_tools],  # agent starts with only the loader
    )
    print(await agent.run("What is 5 factorial?"))


asyncio.run(main())
"""

GATING = """
from agentledger import Agent, FunctionInvocationContext, tool
from agentledger.adapters.chat.openai import OpenAIChatClient

_last_fetched_id: str | None = None


@tool(approval_mode="never_require")
def get_record(record_id: str, ctx: FunctionInvocationContext) -> str:
    \"\"\"Fetch a record. Unlocks update_record for the same record.\"\"\"
    global _last_fetched_id
    _last_fetched_id = record_id
    ctx.add_tools(update_record)  # gate: expose the write tool now
    return f"Record {record_id}: title='Example record', status='open'"


@tool(approval_mode="never_require")
def update_record(record_id: str, status: str) -> str:
    \"\"\"Update the status of a record.\"\"\"
    return f"Updated record {record_id} to status '{status}'."


agent = Agent(
    client=OpenAIChatClient(),
    name="RecordAgent",
    instructions="You help manage records. Fetch a record before updating it.",
    tools=[get_record],  # update_record is hidden until get_record runs
)
"""

FORCED_FIRST_CALL = """
result = await agent.run(
    "Update record REC-42 to status 'in-progress'.",
    options={"tool_choice": {"mode": "required", "required_function_name": "get_record"}},
)
print(result)
"""

MIDDLEWARE_GATING = """
from collections.abc import Awaitable, Callable

from agentledger import FunctionInvocationContext

_last_fetched_id: str | None = None


async def enforce_read_before_write(
    context: FunctionInvocationContext,
    call_next: Callable[[], Awaitable[None]],
) -> None:
    \"\"\"Reject update_record calls that target a different record than the one fetched.\"\"\"
    if context.function.name == "update_record":
        requested_id = context.arguments.get("record_id") if hasattr(context.arguments, "get") else None
        if requested_id != _last_fetched_id:
            # Set result without calling call_next — the function never executes.
            context.result = (
                f"Error: you must fetch record '{requested_id}' before updating it. "
                f"Last fetched record was '{_last_fetched_id}'."
            )
            return
    await call_next()


agent = Agent(
    client=OpenAIChatClient(),
    name="RecordAgent",
    instructions="Fetch a record before updating it.",
    tools=[get_record, update_record],
    middleware=[enforce_read_before_write],
)
"""

MIDDLEWARE_GATING_RUN = """
print(await agent.run("Update record REC-42 to status 'in-progress'."))
"""


@pytest.mark.parametrize(
    ("definitions", "awaited", "printed"),
    [
        (SEND_EMAIL, SEND_EMAIL_RUN, "The launch update is queued for finance@example.com.\n"),
        (SEND_EMAIL + ENRICH_MIDDLEWARE, "", ""),
        (REMEMBER_TOPIC, REMEMBER_TOPIC_RUN, "budget review\n"),
        (DELEGATE, "", "research\n"),
        (LOADER, "", "5 factorial is 120.\n"),
        (GATING, FORCED_FIRST_CALL, "Record REC-42 is now in-progress.\n"),
        (GATING + MIDDLEWARE_GATING, MIDDLEWARE_GATING_RUN, "Record REC-42 is now in-progress.\n"),
    ],
    ids=["send-email", "enrich-middleware", "remember-topic", "delegate", "loader", "gating", "mw-gating"],
)
def test_seed_example_runs_against_the_server(
    definitions: str, awaited: str, printed: str, base_url: str, tmp_path: Path
) -> None:
    """The seed example runs unchanged, configured by OPENAI_BASE_URL, and prints what it should."""
    assert _run_example(_script(definitions, awaited), base_url, tmp_path) == printed


def test_seed_send_email_tool_saw_the_runtime_kwargs(base_url: str, tmp_path: Path) -> None:
    """The tool result the server received carries the function_invocation_kwargs values."""
    harness = SEND_EMAIL_RUN + "print(response.messages[1].contents[0].result)\n"
    lines = _run_example(_script(SEND_EMAIL, harness), base_url, tmp_path).splitlines()
    assert lines[1] == "Queued email for finance@example.com from user-123 (contoso)"
