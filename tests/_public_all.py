"""Every public module's ``__all__``, spelled out: a name added or dropped by accident fails
``tests/test_public_api.py``. A deliberate change edits this file (and docs/api.md)."""

from __future__ import annotations

PINNED: dict[str, tuple[str, ...]] = {
    "agentledger": (
        "SCHEMA_VERSION", "Agent", "AgentContext", "AgentLedgerError", "AgentMiddleware", "AgentResponse",
        "AgentResponseUpdate", "AgentSession", "ApprovalError", "ArgumentsError", "BaseChatClient",
        "ChatContext", "ChatMiddleware", "ChatOptions", "ChatResponse", "ChatResponseUpdate",
        "CommitUnknownError", "ConflictError", "Content", "ContextProvider", "Event", "EventStore",
        "ExperimentalWarning", "FunctionInvocationContext", "FunctionMiddleware", "FunctionTool",
        "HistoryProvider", "InMemoryHistoryProvider", "LiveTools", "LogCorruptError", "MemoryEventStore",
        "Message", "MiddlewareError", "MiddlewareFailure", "MiddlewareTermination", "ModelCallError",
        "ModelResponseError", "OptionsError", "ReplayDivergence", "ReplayDrift", "ReplayRefusedError",
        "RunContext",
        "RunCycleError", "RunError", "RunEvictedError", "RunIdTakenError", "RunNotFoundError", "RunStream",
        "SessionContext", "SessionState", "SessionStateError", "StoreError", "StructuredOutputError",
        "SubAgentApprovalError", "SubAgentDepthError", "ToolDefinitionError", "ToolMode", "ToolSpec",
        "TornTailWarning", "TransitionError", "UnknownToolError", "UnpricedCallError",
        "UnreadableStreamWarning",
        "UnrecordableError", "Usage", "__version__", "agent_middleware", "chat_middleware",
        "current_run_context", "default_redactor", "function_middleware", "normalize_messages",
        "redact_all", "redact_keys", "timeline", "tool"
    ),
    "agentledger.adapters.chat.anthropic": (
        "ANTHROPIC_BASE_URL", "API_VERSION", "DEFAULT_MODEL", "APIConnectionError", "APIStatusError",
        "APITimeoutError", "AnthropicClient", "AuthenticationError", "BadRequestError",
        "DeadlineExceededError", "MalformedResponseError", "OpenAIConfigurationError", "OpenAIError",
        "RateLimitError", "ResponseFailedError", "ResponseTooLargeError", "ServerError",
        "TruncatedStreamError"
    ),
    "agentledger.adapters.chat.azure": (
        "CHAT_API_VERSION", "RESPONSES_API_VERSION", "AzureOpenAIChatClient", "AzureOpenAIResponsesClient",
        "TokenProvider"
    ),
    "agentledger.adapters.chat.openai": (
        "DEFAULT_BASE_URL", "DEFAULT_DEADLINE", "DEFAULT_MAX_RESPONSE_BYTES", "APIConnectionError",
        "APIStatusError", "APITimeoutError", "AuthenticationError", "BadRequestError",
        "DeadlineExceededError", "MalformedResponseError", "OpenAIChatClient", "OpenAIConfigurationError",
        "OpenAIError", "OpenAIResponsesClient", "RateLimitError", "ResponseFailedError",
        "ResponseTooLargeError", "ServerError", "TokenProviderError", "TruncatedStreamError"
    ),
    "agentledger.adapters.chat.scripted": (
        "Call", "ScriptEntry", "ScriptExhausted", "ScriptedChatClient", "ScriptedRequest"
    ),
    "agentledger.adapters.export.html": (
        "HIDDEN", "render_html", "write_html"
    ),
    "agentledger.adapters.export.otel": (
        "OtelBridge",
    ),
    "agentledger.adapters.export.otlp": (
        "INSTALL_HINT", "RETRY_STATUSES", "ExportError", "ExportResult", "OtlpSettings", "Span",
        "SpanEvent", "encode_json", "encode_protobuf", "export_otlp", "retry_delay", "settings_from_env",
        "spans_from_events", "traces_url", "write_otlp_json_file"
    ),
    "agentledger.adapters.export.structlog": (
        "StructlogSink", "event_fields"
    ),
    "agentledger.adapters.mcp": (
        "MCPConnectionError", "MCPFunctionTool", "MCPServerError", "MCPSpecificApproval", "MCPStdioTool",
        "MCPStreamableHTTPTool", "MCPTimeoutError", "MCPTool", "MCPToolError", "MCPUnknownToolError"
    ),
    "agentledger.adapters.prices": (
        "available", "genai_price"
    ),
    "agentledger.adapters.serve": ("AgentFor", "create_app", "host_is_loopback", "new_token", "serve"),
    "agentledger.adapters.stores.jsonl": (
        "JsonlEventStore", "TornTailWarning"
    ),
    "agentledger.adapters.stores.postgres": (
        "MIGRATIONS", "SCHEMA_VERSION", "CallRecord", "Migration", "PostgresEventStore", "StoredEvent",
        "Tail"
    ),
    "agentledger.adapters.stores.sqlite": (
        "SCHEMA_VERSION", "SqliteEventStore"
    ),
    "agentledger.adapters.temporal": (
        "ACTIVITIES", "DATA_CONVERTER", "PASSTHROUGH_MODULES", "TASK_QUEUE", "WORKFLOW", "Activities",
        "AgentFactory", "AgentRegistry", "AgentRunWorkflow", "CallLedger", "Limits", "MemoryCallLedger",
        "RunInput", "RunResult", "SessionInput", "TemporalRunner", "Timeouts", "ToolInterrupted",
        "ToolUnavailable", "UnsupportedAgent", "connect", "create_worker", "main", "serve",
        "workflow_runner"
    ),
    "agentledger.adapters.temporal.cli": (
        "main",
    ),
    "agentledger.adapters.temporal.runner": (
        "PASSTHROUGH_MODULES", "TASK_QUEUE", "TemporalRunner", "connect", "create_worker", "serve",
        "workflow_runner"
    ),
    "agentledger.adapters.temporal.steps": (
        "StepError", "ToolInterrupted", "ToolUnavailable", "UnsupportedAgent", "finish_events",
        "model_step", "started_events", "tool_step"
    ),
    "agentledger.adapters.temporal.types": (
        "ACTIVITIES", "APPEND_EVENTS", "CALL_MODEL", "DATA_CONVERTER", "FINISH_RUN", "INVOKE_TOOL",
        "LOAD_EVENTS", "RUN_SUBAGENT", "START_RUN", "WORKFLOW", "AppendRequest", "FinishOutcome",
        "FinishRequest", "Limits", "LoadRequest", "ModelRequest", "Resume", "RunInput", "RunResult",
        "RunView", "SessionInput", "StartOutcome", "StartRequest", "StepOutcome", "Timeouts", "ToolRequest"
    ),
    "agentledger.adapters.temporal.worker": (
        "Activities", "AgentFactory", "AgentRegistry", "CallLedger", "MemoryCallLedger"
    ),
    "agentledger.adapters.temporal.workflow": (
        "AgentRunWorkflow",
    ),
    "agentledger.agent": (
        "Agent", "AgentResponse", "AgentResponseUpdate", "RunArguments", "RunStream",
        "SpecArguments"
    ),
    "agentledger.anthropic": (
        "ANTHROPIC_BASE_URL", "API_VERSION", "DEFAULT_MODEL", "APIConnectionError", "APIStatusError",
        "APITimeoutError", "AnthropicClient", "AuthenticationError", "BadRequestError",
        "DeadlineExceededError", "MalformedResponseError", "OpenAIConfigurationError", "OpenAIError",
        "RateLimitError", "ResponseFailedError", "ResponseTooLargeError", "ServerError",
        "TruncatedStreamError"
    ),
    "agentledger.azure": (
        "CHAT_API_VERSION", "RESPONSES_API_VERSION", "AzureOpenAIChatClient", "AzureOpenAIResponsesClient",
        "TokenProvider"
    ),
    "agentledger.chat": (
        "ChatClient", "ChatOptions", "ChatResponse", "ChatResponseUpdate", "ToolMode", "merge_updates",
        "normalize_messages"
    ),
    "agentledger.cli": (
        "DEFAULT_AGENT", "DEFAULT_STORE", "main", "open_store"
    ),
    "agentledger.clients": (
        "BaseChatClient", "ChatClient", "ChatOptions", "ChatResponse", "ChatResponseUpdate", "ToolMode",
        "merge_updates", "normalize_messages"
    ),
    "agentledger.context": (
        "AgentContext", "ChatContext", "FunctionInvocationContext", "LiveTools", "Recorder", "RunContext",
        "SessionSink", "current_run_context", "enter_run", "leave_run", "running"
    ),
    "agentledger.core": (
        "ApprovalRequested", "ApprovalResolved", "ArgumentsRejected", "BatchClaimed",
        "BatchResumed", "Begin", "CallModel", "CallsSkipped", "ChildRunStarted", "Command",
        "ContextProvided", "Event", "EventBase", "Executor", "Fail", "Finish", "FinishRun",
        "InvokeTools", "IterationLimitReached", "MiddlewareShortCircuit", "ModelCalled",
        "ModelFailed", "ModelRequestRewritten", "ModelResponded", "Phase", "Reaction",
        "RunCompleted", "RunFailed", "RunInputRewritten", "RunLoop", "RunMachine", "RunStarted",
        "RunTerminated", "SessionUpdated", "ToolCalled", "ToolChoiceReset", "ToolFailed",
        "ToolNotFound", "ToolReturned", "ToolsAdded", "ToolsRemoved", "TransitionError",
        "decode_event", "decode_events", "encode_event"
    ),
    "agentledger.core.approvals": (
        "answers_refused", "approval_requests", "approval_responses", "conversation", "paused_calls",
        "resumed_batch", "unmatched_approvals"
    ),
    "agentledger.core.claims": (
        "ClaimDecision", "HistoryGrowth", "PausedBatch", "arguments_digest", "decide_claim",
        "history_growth", "paused_batch"
    ),
    "agentledger.core.collector": (
        "PROMOTE_AT", "PROMOTE_BUDGET", "collector_paused"
    ),
    "agentledger.core.commands": (
        "CallModel", "Command", "FinishRun", "InvokeTools", "Phase"
    ),
    "agentledger.core.depth": (
        "MAX_DEPTH", "too_deep"
    ),
    "agentledger.core.errors": (
        "AgentLedgerError", "TransitionError", "UnrecordableError"
    ),
    "agentledger.core.events": (
        "ALWAYS_REQUIRE", "APPROVAL_MODES", "NEVER_REQUIRE", "SCHEMA_VERSION", "ApprovalRequested",
        "ApprovalResolved", "ArgumentsRejected", "BatchClaimed", "BatchResumed", "CallsSkipped",
        "ChildRunStarted", "ClaimedAnswer", "ContextProvided", "Event", "EventBase",
        "IterationLimitReached", "MiddlewareShortCircuit", "ModelCalled", "ModelFailed",
        "ModelRequestRewritten", "ModelResponded", "RunCompleted", "RunConfig", "RunFailed",
        "RunInputRewritten", "RunStarted", "RunTerminated", "SessionUpdated", "StateChange", "ToolCalled",
        "ToolChoice", "ToolChoiceReset", "ToolFailed", "ToolNotFound", "ToolReturned", "ToolSpec",
        "ToolsAdded", "ToolsRemoved", "decode_event", "decode_events", "encode_event", "to_plain"
    ),
    "agentledger.core.shapes": (
        "IN_PLACE", "Shape", "compile_shape", "free_value_fits"
    ),
    "agentledger.core.limits": (
        "INT64_MAX", "INT64_MIN", "check_event", "checked_bytes", "keep_checked_bytes", "may_overflow",
        "safe_text"
    ),
    "agentledger.core.loop": (
        "Executor", "RunLoop", "StepLog"
    ),
    "agentledger.core.machine": (
        "DERIVED", "TRANSITIONS", "Begin", "Fail", "Finish", "Reaction", "RunMachine", "Transition",
        "transition_table"
    ),
    "agentledger.core.messages": (
        "Content", "ContentType", "Message", "MessageView", "Usage", "malformed_calls", "result_text"
    ),
    "agentledger.core.projections": (
        "LIMIT_REACHED", "NO_OUTCOME", "REJECTED_BY_USER", "ModelCall", "SessionProjection",
        "ToolsProjection", "TranscriptProjection", "Views", "apply_changes", "conversation_after",
        "error_text",
    ),
    "agentledger.core.provided": (
        "PROVIDER_WRITER", "append_instructions", "contributions", "instructions_after", "provided_count"
    ),
    "agentledger.core.upcasting": (
        "UPCASTERS", "SchemaVersionError", "Upcaster", "decode_upcasted", "register_upcaster",
        "schema_version_of", "upcast"
    ),
    "agentledger.cost": (
        "CallCost", "CostReport", "CostTotals", "Price", "RunCost", "ToolOffers", "ToolShare",
        "cost_report", "schema_tokens", "tool_offers"
    ),
    "agentledger.decisions": (
        "Answer", "DecisionResult", "WaitingCall", "decide", "session_from_store", "waiting_calls"
    ),
    "agentledger.demo": (
        "build_demo_agent", "run_demo"
    ),
    "agentledger.errors": (
        "AgentLedgerError", "ApprovalError", "ApprovalMismatchError", "ArgumentsError",
        "CallNotWaitingError", "CallOutcomeUnknownError", "CommitUnknownError", "ConflictError",
        "DecidedElsewhereError", "ExperimentalWarning",
        "LogCorruptError", "MiddlewareError", "MiddlewareFailure", "MiddlewareTermination",
        "ModelCallError", "ModelResponseError", "OptionsError", "ReplayDivergence", "ReplayDrift",
        "ReplayRefusedError", "RunCycleError", "RunError", "RunEvictedError", "RunIdTakenError",
        "RunNotFoundError",
        "SessionStateError", "StoreError", "StructuredOutputError", "ToolDefinitionError",
        "TornTailWarning", "TransitionError", "UnknownToolError", "UnpricedCallError",
        "UnreadableStreamWarning",
        "UnrecordableError"
    ),
    "agentledger.listing": (
        "OUTCOMES", "DamagedStream", "Outcome", "RunQuery", "RunSummary", "damaged_streams",
        "report_unreadable", "select", "summarize"
    ),
    "agentledger.logs": (
        "ROOT", "HttpxCredentialFilter", "guard_httpx_log", "logger", "warn"
    ),
    "agentledger.middleware": (
        "AgentMiddleware", "ChainOutcome", "ChatMiddleware", "FunctionMiddleware", "Layer",
        "agent_middleware", "chat_middleware", "classify_middleware", "function_middleware", "run_chain"
    ),
    "agentledger.openai": (
        "DEFAULT_BASE_URL", "DEFAULT_DEADLINE", "DEFAULT_MAX_RESPONSE_BYTES", "APIConnectionError",
        "APIStatusError", "APITimeoutError", "AuthenticationError", "BadRequestError",
        "DeadlineExceededError", "MalformedResponseError", "OpenAIChatClient", "OpenAIConfigurationError",
        "OpenAIError", "OpenAIResponsesClient", "RateLimitError", "ResponseFailedError",
        "ResponseTooLargeError", "ServerError", "TokenProviderError", "TruncatedStreamError"
    ),
    "agentledger.providers": (
        "ContextProvider", "HistoryProvider", "InMemoryHistoryProvider", "RecordedContributions",
        "SessionContext", "check_providers", "provide_after", "provide_before", "provider_names"
    ),
    "agentledger.redaction": (
        "REDACTED", "SECRET_KEYS_ENV", "Redactor", "default_redactor", "hidden_values",
        "holds_redactions", "mark_secret_keys", "mark_secret_values", "mask_values", "redact_all",
        "redact_event", "redact_events", "redact_keys", "redact_value", "scrub_shapes", "scrub_text",
        "wire_forms"
    ),
    "agentledger.render": (
        "plain_run", "render_run", "run_document"
    ),
    "agentledger.replay": (
        "CallHow", "Finding", "FindingKind", "RecordedRun", "ReplayClient", "ReplayExhausted",
        "ReplayReport", "ReplayedCall", "RunState", "canonical", "compare", "describe_input", "diff_runs",
        "differences", "fork", "is_replaying", "load", "replay", "rerun"
    ),
    "agentledger.replay.cassette": (
        "read_cassette", "tree_events", "tree_of", "write_cassette"
    ),
    "agentledger.replay.client": (
        "RecordedOutcome", "ReplayClient", "ReplayExhausted"
    ),
    "agentledger.replay.compare": (
        "call_of", "canonical", "compare", "diff_runs", "differences", "in_model_order"
    ),
    "agentledger.replay.findings": (
        "CallHow", "Finding", "FindingKind", "ReplayReport", "ReplayedCall", "describe_input", "text_diff"
    ),
    "agentledger.replay.rerun": (
        "fork", "replay", "rerun"
    ),
    "agentledger.replay.stand_ins": (
        "RecordedTools", "apply_session", "approved_calls"
    ),
    "agentledger.replay.state": (
        "RecordedRun", "RunState", "is_replaying", "load"
    ),
    "agentledger.response": (
        "AgentResponse", "AgentResponseUpdate"
    ),
    "agentledger.run": (
        "AgentRun", "CallOutcome", "Layers", "LocalDriver", "RunBinding", "RunRecorder", "RunSpec", "Sink",
        "Sinks", "ToolRegistry", "arguments_valid", "call_model", "capture_sinks", "check_approvals",
        "check_tool_choice", "claim_batches", "claim_resume", "invoke_call", "merge_options",
        "options_record", "record_outcome", "to_recorded", "watching"
    ),
    "agentledger.run.agent_layers": (
        "answer_text", "around_loop"
    ),
    "agentledger.run.binding": (
        "RunBinding",
    ),
    "agentledger.run.claims": (
        "Claims", "claim_batches", "claim_resume"
    ),
    "agentledger.run.driver": (
        "LocalDriver",
    ),
    "agentledger.run.lifecycle": (
        "AgentRun",
    ),
    "agentledger.run.model_step": (
        "call_model",
    ),
    "agentledger.run.recorder": (
        "RunRecorder", "Sink", "Sinks", "capture_sinks", "watching"
    ),
    "agentledger.run.registry": (
        "ToolRegistry", "tools_by_name",
    ),
    "agentledger.run.spec": (
        "RUN_LIMITS", "Layers", "RunArguments", "RunSpec", "SpecArguments", "check_approvals",
        "check_option_names", "check_run_limit", "check_tool_choice", "given_options",
        "merge_options", "middleware_names", "options_record", "run_config"
    ),
    "agentledger.run.tool_step": (
        "CallOutcome", "arguments_valid", "invoke_call", "record_outcome"
    ),
    "agentledger.run.values": (
        "to_recorded",
    ),
    "agentledger.runtree": (
        "check_run_tree", "group_runs"
    ),
    "agentledger.session": (
        "MAX_SESSION_ID", "AgentSession", "SessionState"
    ),
    "agentledger.store": (
        "DEFAULT_MAX_EVENTS", "DEFAULT_MAX_RUNS", "EventStore", "MemoryEventStore", "RunQuery",
        "RunSummary", "SupportsAclose", "SupportsAppendNowait", "SupportsEviction", "SupportsReadMany",
        "SupportsRunListing", "list_runs", "read_many"
    ),
    "agentledger.streaming": (
        "RunStream",
    ),
    "agentledger.structured": (
        "ResponseSchema", "parse_value", "response_schema", "schema_option"
    ),
    "agentledger.subagents": (
        "MAX_AGENT_DEPTH", "AgentTool", "ChildLink", "ChildRunner", "StreamCallback", "SubAgent",
        "SubAgentApprovalError", "SubAgentDepthError", "agent_tool", "running_children_with",
        "take_child_link"
    ),
    "agentledger.testing": (
        "FixedClock", "SequentialIds", "capture_events", "event_types", "events_of"
    ),
    "agentledger.testing.clients": (
        "ChatClientContract", "FunctionCall", "ModelAnswer"
    ),
    "agentledger.testing.pytest_plugin": (
        "RECORD_FLAG", "RECORD_MISSING_FLAG", "AgentCassette", "agent_cassette", "pytest_addoption"
    ),
    "agentledger.testing.stores": (
        "CrashOutcome", "DurableStoreContract", "StoreContract", "make_events", "record_runs"
    ),
    "agentledger.timeline": (
        "describe", "timeline"
    ),
    "agentledger.tools": (
        "ApprovalMode", "ArgumentsError", "FunctionTool", "ReplayRule", "ToolParameters", "arguments_valid",
        "normalize_tools", "tool"
    ),
    "agentledger.adapters": (),
    "agentledger.adapters.chat": (
        "AnthropicClient", "AzureOpenAIChatClient", "AzureOpenAIResponsesClient", "Call",
        "OpenAIChatClient", "OpenAIResponsesClient", "ScriptedChatClient"
    ),
    "agentledger.adapters.stores": (
        "JsonlEventStore", "PostgresEventStore", "SqliteEventStore"
    ),
    "agentledger.adapters.export": (
        "OtelBridge", "StructlogSink", "export_otlp", "render_html", "spans_from_events",
        "write_html"
    ),
}
