"""agentledger: LLM agents as an event-sourced runtime.

Every step of a run is an immutable event; the tools offered, the session state and the
transcript are projections of the log, so any run can be inspected, rebuilt and replayed.
"""

from ._version import __version__
from .agent import Agent, AgentResponse, AgentResponseUpdate, RunStream
from .clients import (
    BaseChatClient,
    ChatOptions,
    ChatResponse,
    ChatResponseUpdate,
    ToolMode,
    normalize_messages,
)
from .context import (
    AgentContext,
    ChatContext,
    FunctionInvocationContext,
    LiveTools,
    RunContext,
    current_run_context,
)
from .core.events import SCHEMA_VERSION, Event, ToolSpec
from .core.messages import Content, Message, Usage
from .errors import (
    AgentLedgerError,
    ApprovalError,
    ArgumentsError,
    ConflictError,
    ExperimentalWarning,
    LogCorruptError,
    MiddlewareError,
    MiddlewareTermination,
    ModelCallError,
    ModelResponseError,
    OptionsError,
    ReplayDivergence,
    RunCycleError,
    RunError,
    RunEvictedError,
    RunIdTakenError,
    RunNotFoundError,
    SessionStateError,
    StoreError,
    StructuredOutputError,
    ToolDefinitionError,
    TornTailWarning,
    TransitionError,
    UnknownToolError,
    UnreadableStreamWarning,
    UnrecordableError,
)
from .middleware import (
    AgentMiddleware,
    ChatMiddleware,
    FunctionMiddleware,
    agent_middleware,
    chat_middleware,
    function_middleware,
)
from .redaction import default_redactor, redact_all, redact_keys
from .session import AgentSession, SessionState
from .store import EventStore, MemoryEventStore
from .subagents import SubAgentApprovalError, SubAgentDepthError
from .timeline import timeline
from .tools import FunctionTool, tool

__all__ = (
    "SCHEMA_VERSION",
    "Agent",
    "AgentContext",
    "AgentLedgerError",
    "AgentMiddleware",
    "AgentResponse",
    "AgentResponseUpdate",
    "AgentSession",
    "ApprovalError",
    "ArgumentsError",
    "BaseChatClient",
    "ChatContext",
    "ChatMiddleware",
    "ChatOptions",
    "ChatResponse",
    "ChatResponseUpdate",
    "ConflictError",
    "Content",
    "Event",
    "EventStore",
    "ExperimentalWarning",
    "FunctionInvocationContext",
    "FunctionMiddleware",
    "FunctionTool",
    "LiveTools",
    "LogCorruptError",
    "MemoryEventStore",
    "Message",
    "MiddlewareError",
    "MiddlewareTermination",
    "ModelCallError",
    "ModelResponseError",
    "OptionsError",
    "ReplayDivergence",
    "RunContext",
    "RunCycleError",
    "RunError",
    "RunEvictedError",
    "RunIdTakenError",
    "RunNotFoundError",
    "RunStream",
    "SessionState",
    "SessionStateError",
    "StoreError",
    "StructuredOutputError",
    "SubAgentApprovalError",
    "SubAgentDepthError",
    "ToolDefinitionError",
    "ToolMode",
    "ToolSpec",
    "TornTailWarning",
    "TransitionError",
    "UnknownToolError",
    "UnreadableStreamWarning",
    "UnrecordableError",
    "Usage",
    "__version__",
    "agent_middleware",
    "chat_middleware",
    "current_run_context",
    "default_redactor",
    "function_middleware",
    "normalize_messages",
    "redact_all",
    "redact_keys",
    "timeline",
    "tool",
)
