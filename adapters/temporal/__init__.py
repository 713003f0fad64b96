"""Agent runs on Temporal: the run machine inside a workflow, model and tool calls as activities.

What runs where (``docs/scale.md`` has the whole picture):

* the **workflow** (``agentledger.AgentRun``) holds the pure ``RunMachine`` and nothing else: it
  decides, stamps events with workflow time, and schedules activities;
* **activities** do the IO, on any worker of the task queue: ``agentledger.call_model`` (chat
  middleware and the client), ``agentledger.invoke_tool`` (one per tool call: function middleware
  and the tool, at most once per idempotency key) and ``agentledger.run_subagent``; the short,
  idempotent store steps ``agentledger.start_run``, ``agentledger.append_events``,
  ``agentledger.finish_run`` and ``agentledger.load_events`` run as local activities, on the
  worker running the workflow task;
* the **event store** (PostgreSQL when workers are several) receives the run's log as the
  workflow advances, in the same shape as a local run's, so ``agentledger.replay``, the CLI and
  the exporters read it like any other.

A worker process::

    registry = AgentRegistry()
    registry.register("planner", build_planner)
    client = await connect("temporal.internal:7233")
    async with PostgresEventStore(DSN) as store:
        await serve(client, registry, store, task_queue="agents")

or ``python -m agentledger.adapters.temporal worker --registry app.agents:registry --postgres DSN``.
A client::

    runner = TemporalRunner(client, store, task_queue="agents")
    response = await runner.run("planner", "Plan a trip to Lisbon.")
"""

from .cli import main
from .runner import (
    PASSTHROUGH_MODULES,
    TASK_QUEUE,
    TemporalRunner,
    connect,
    create_worker,
    serve,
    workflow_runner,
)
from .steps import ToolInterrupted, ToolUnavailable, UnsupportedAgent
from .types import ACTIVITIES, DATA_CONVERTER, WORKFLOW, Limits, RunInput, RunResult, SessionInput, Timeouts
from .worker import Activities, AgentFactory, AgentRegistry, CallLedger, MemoryCallLedger
from .workflow import AgentRunWorkflow

__all__ = (
    "ACTIVITIES",
    "DATA_CONVERTER",
    "PASSTHROUGH_MODULES",
    "TASK_QUEUE",
    "WORKFLOW",
    "Activities",
    "AgentFactory",
    "AgentRegistry",
    "AgentRunWorkflow",
    "CallLedger",
    "Limits",
    "MemoryCallLedger",
    "RunInput",
    "RunResult",
    "SessionInput",
    "TemporalRunner",
    "Timeouts",
    "ToolInterrupted",
    "ToolUnavailable",
    "UnsupportedAgent",
    "connect",
    "create_worker",
    "main",
    "serve",
    "workflow_runner",
)
