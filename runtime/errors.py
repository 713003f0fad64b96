"""The errors agentledger raises, as one tree.

::

    AgentLedgerError
    ├── ToolDefinitionError (also ValueError)   a tool cannot be built from what was given
    ├── OptionsError (also ValueError)          run options that cannot be sent (tool_choice)
    ├── ArgumentsError (also ValueError)        arguments are not JSON or fail the tool's schema
    ├── MiddlewareError (also TypeError)        a middleware cannot be classified
    ├── SessionStateError (also TypeError)      a session value cannot be recorded as JSON
    ├── UnrecordableError (also ValueError)     a value would not read back from the log (not
    │                                           UTF-8, too deep, past 64 bits, the wrong type)
    ├── ApprovalError (also ValueError)         an approval answers no call awaiting approval,
    │   │                                       or another run resumes (or resumed) its batch
    │   ├── CallOutcomeUnknownError             a resume started the call and recorded no outcome
    │   ├── ApprovalMismatchError               the call would run with other arguments than approved
    │   ├── CallNotWaitingError                 a decision names a call no paused batch waits on
    │   └── DecidedElsewhereError               another decision (or resume) took the batch first
    ├── RunError                                a run ended without an answer (run_id, seq)
    │   ├── ModelCallError                      the chat client raised; ModelFailed is recorded
    │   ├── ModelResponseError                  the model's output is malformed
    │   └── UnknownToolError (also KeyError)    the model called a tool that does not exist
    │                                           (with terminate_on_unknown_calls)
    ├── StoreError
    │   ├── RunNotFoundError (also LookupError) a store has no run by that id
    │   │   └── RunEvictedError                 a bounded store dropped it (or runs its session needs)
    │   ├── CommitUnknownError                  an append's commit was cut off: written or not, unknown
    │   ├── ConflictError                       a stale expected_version (stream, expected, actual)
    │   │   └── RunIdTakenError                 a new run's id names a run the store already holds
    │   └── LogCorruptError                     a stored log does not decode (where, what)
    │       └── RunCycleError                   runs linked to each other as their own sub-agents
    ├── ReplayDivergence                        a rerun differs from the log (seq, expected, actual,
    │   │                                       findings)
    │   └── ReplayDrift                         the agent's configuration changed since the run
    ├── ReplayRefusedError                      a replay would run a tool marked never to run in
    │                                           one (``@tool(replay="recorded")``) with no recorded
    │                                           outcome to answer the call
    ├── SubAgentDepthError, SubAgentApprovalError   (in agentledger.subagents)
    ├── ExportError                             an OTLP receiver refused an export (status_code)
    └── TransitionError                         an input the run machine does not accept

    ├── MiddlewareFailure                       raised by middleware (or a tool) to abort the run,
    │                                           fail-closed: RunFailed is recorded, run() raises it
    MiddlewareTermination                       raised by middleware to end the run (not an error)
    ExperimentalWarning (a FutureWarning)       an experimental API was used
    TornTailWarning (a RuntimeWarning)          a log's torn last record was cut off on open
    UnreadableStreamWarning (a RuntimeWarning)  a stream that does not decode was skipped

``ExportError`` lives with its exporter, ``agentledger.adapters.export.otlp``; the OpenAI
clients' errors (authentication, rate limits, server errors...) live in
``agentledger.adapters.chat.openai``, the MCP tools' errors (``MCPServerError`` and its
subclasses) in ``agentledger.adapters.mcp``; all of them derive from ``AgentLedgerError``.

Errors from other libraries are translated where they cross into agentledger, with
``raise ... from exc`` so the cause stays visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .core.errors import AgentLedgerError, TransitionError, UnrecordableError

__all__ = (
    "AgentLedgerError",
    "ApprovalError",
    "ApprovalMismatchError",
    "ArgumentsError",
    "CallNotWaitingError",
    "CallOutcomeUnknownError",
    "CommitUnknownError",
    "ConflictError",
    "DecidedElsewhereError",
    "ExperimentalWarning",
    "LogCorruptError",
    "MiddlewareError",
    "MiddlewareFailure",
    "MiddlewareTermination",
    "ModelCallError",
    "ModelResponseError",
    "OptionsError",
    "ReplayDivergence",
    "ReplayDrift",
    "ReplayRefusedError",
    "RunCycleError",
    "RunError",
    "RunEvictedError",
    "RunIdTakenError",
    "RunNotFoundError",
    "SessionStateError",
    "StoreError",
    "StructuredOutputError",
    "ToolDefinitionError",
    "TornTailWarning",
    "TransitionError",
    "UnknownToolError",
    "UnpricedCallError",
    "UnreadableStreamWarning",
    "UnrecordableError",
)


class ToolDefinitionError(AgentLedgerError, ValueError):
    """A tool cannot be built: two context parameters, an unsupported schema, a bad name."""


class OptionsError(AgentLedgerError, ValueError):
    """Run options that cannot be sent as they are (a ``tool_choice`` no model would accept)."""


class StructuredOutputError(AgentLedgerError, ValueError):
    """The model's answer does not parse as the ``response_format`` the run asked for."""


class ArgumentsError(AgentLedgerError, ValueError):
    """A tool's arguments are not valid JSON or do not match its schema.

    In a run this becomes an ``ArgumentsRejected`` event and an error result for the model;
    ``FunctionTool.invoke`` raises it to the caller.
    """


class MiddlewareError(AgentLedgerError, TypeError):
    """A middleware is not one of the supported forms."""


class SessionStateError(AgentLedgerError, TypeError):
    """A session state value cannot be encoded as JSON, so it cannot be recorded."""


class ApprovalError(AgentLedgerError, ValueError):
    """Approval responses name calls that no paused run of this session is waiting for, or the
    paused batch is (or was) resumed by another run: a batch resumes once."""


class CallOutcomeUnknownError(ApprovalError):
    """The run that resumed a batch started these calls and recorded no outcome (it was killed
    or cancelled in the middle, or is still running them): they may have taken effect, so no
    resume runs them again unless the caller says they did not (``AgentSession.allow_rerun``).

    ``call_ids`` are the calls; ``run_id`` the run that started them.
    """

    def __init__(self, message: str, *, call_ids: tuple[str, ...] = (), run_id: str | None = None) -> None:
        super().__init__(message)
        self.call_ids = call_ids
        self.run_id = run_id


class ApprovalMismatchError(ApprovalError):
    """An approved call would run with other arguments than those the approval answered (function
    middleware rewrote them, or the resuming session holds another version of the call)."""


class CallNotWaitingError(ApprovalError):
    """A decision names a call that does not wait for one: the run did not pause on it, or its
    batch is not paused at all. ``run_id`` and ``call_id`` say which."""

    def __init__(self, message: str, *, run_id: str, call_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.call_id = call_id


class DecidedElsewhereError(ApprovalError):
    """The paused batch was claimed by another run (a decision made elsewhere, or a resume)
    before this decision could claim it; ``by_run_id`` names that run."""

    def __init__(self, message: str, *, run_id: str, by_run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.by_run_id = by_run_id


class RunError(AgentLedgerError):
    """A run ended without an answer; its events up to the failure are recorded."""

    def __init__(self, message: str, *, run_id: str, seq: int | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.seq = seq


class ModelCallError(RunError):
    """The chat client raised; the run recorded ``ModelFailed`` and ``RunFailed``."""


class ModelResponseError(RunError):
    """The model answered with output the run cannot use (duplicate or missing call ids...)."""


class UnknownToolError(RunError, KeyError):
    """The model called a tool that is not offered, and the agent ends runs on that
    (``terminate_on_unknown_calls=True``); no call of that batch ran."""

    __str__ = Exception.__str__  # the message as it is, not quoted as KeyError would


class UnpricedCallError(RunError):
    """A run with ``max_cost`` made a model call its price table could not price (a model the
    table does not know, or an answer without a model name or usage): the limit cannot be kept,
    so the run ends there with ``RunFailed`` instead of going on without one. The answer is
    recorded (``ModelResponded`` with ``cost=None``); no call of it ran."""


class StoreError(AgentLedgerError):
    """An event store could not do what was asked."""


class RunNotFoundError(StoreError, LookupError):
    """A store has no run with the id asked for."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r} in the store")
        self.run_id = run_id


class RunEvictedError(RunNotFoundError):
    """A bounded store dropped the run, or runs of its session, to stay within its limits.

    ``session_id`` is set when the run itself is there but earlier runs of its session, which
    its session state and history are rebuilt from, are not.
    """

    def __init__(self, run_id: str, *, session_id: str | None = None) -> None:
        super().__init__(run_id)
        if session_id is None:
            message = f"run {run_id!r} was evicted from the store, which keeps only its most recent runs"
        else:
            message = (
                f"run {run_id!r} needs the earlier runs of session {session_id!r}, and the store "
                "evicted some of them; load it with_session=False, or keep more runs"
            )
        self.args = (message,)
        self.session_id = session_id


class CommitUnknownError(StoreError):
    """The connection was lost while an append was being committed: the store cannot say whether
    it was written. Read the stream back (``read(stream, after=expected - 1)``) before appending
    anything else; a run does so by itself."""

    def __init__(self, message: str, *, stream: str | None = None) -> None:
        super().__init__(message)
        self.stream = stream


class ConflictError(StoreError):
    """Another writer appended to the stream first: ``expected`` is stale."""

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(f"stream {stream!r}: expected version {expected}, but the stream is at {actual}")
        self.stream = stream
        self.expected = expected
        self.actual = actual


class RunIdTakenError(ConflictError):
    """A new run's id is already taken (two id sources that both count from 1, say): its first
    append found the store holding ``actual`` events under that id, or (``actual`` 0) a run
    that called the sub-agent has that id. Nothing of the new run is written."""

    def __init__(self, stream: str, actual: int) -> None:
        super().__init__(stream, 0, actual)
        holder = f"the store already holds a run under it ({actual} events)" if actual else (
            "a run that called this sub-agent has it"
        )
        self.args = (f"run id {stream!r} is taken: {holder}; give agents that share a store or call "
                     "each other ids that cannot collide",)


class LogCorruptError(StoreError):
    """A stored log does not decode; ``where`` names the file and line or offset."""

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


class RunCycleError(LogCorruptError):
    """Runs are linked into a cycle (a run named as its own sub-agent, or as one of its
    ancestors'): a run tree cannot be walked. ``cycle`` lists the run ids around it."""

    def __init__(self, cycle: tuple[str, ...]) -> None:
        path = " -> ".join(repr(run_id) for run_id in cycle)
        super().__init__("runs link into a cycle, so no run tree can be read from them", where=f"runs {path}")
        self.cycle = cycle


class ReplayDivergence(AgentLedgerError):
    """A rerun differs from the recorded run: ``seq``, ``expected``, ``actual`` and ``diff``
    describe the first difference, ``findings`` lists every one (``agentledger.replay.Finding``:
    where in the run tree, seq on each side, event type, field, both values)."""

    def __init__(
        self, seq: int, expected: Any, actual: Any, diff: str = "", *, findings: Sequence[Any] = ()
    ) -> None:
        self.findings = list(findings)
        first = self.findings[0].describe() if self.findings else f"run diverged at seq {seq}"
        more = f" (and {len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        super().__init__(first + more + (f":\n{diff}" if diff else ""))
        self.seq = seq
        self.expected = expected
        self.actual = actual
        self.diff = diff


class ReplayDrift(ReplayDivergence):
    """The rerun did what the log says, but the agent is configured otherwise than when the run
    was recorded (instructions, options, tool specs, middleware): the model's recorded answers
    may not be what it would answer now. ``findings`` lists the drift."""


class ReplayRefusedError(AgentLedgerError):
    """A replay (a rerun, a check, a cassette test, a fork) would run a tool marked
    ``@tool(replay="recorded")``, and the log holds no outcome of the call to answer it with: a
    fork's new call of it, say. The call fails with this error (the model sees it); the tool's
    body never runs in a replay. ``tool`` names the tool."""

    def __init__(self, message: str, *, tool: str = "") -> None:
        super().__init__(message)
        self.tool = tool


class MiddlewareFailure(AgentLedgerError):
    """Raise from middleware (function, chat or agent) to abort the run: fail closed.

    Any other exception of function middleware or of a tool becomes the call's error result and
    the loop goes on, which is right for a failed tool and wrong for a guardrail. This one is
    never an answer to the model: no other call of the batch starts (calls already running are
    cancelled), no model call follows, ``RunFailed`` is recorded with ``error_type``
    ``"MiddlewareFailure"`` and this message, and ``run()`` raises the exception itself. A tool
    that raises it (a sub-agent whose own middleware failed, say) aborts the run the same way.
    Chain the cause (``raise MiddlewareFailure("policy check failed") from exc``); do not catch
    it in middleware around ``call_next()``.
    """

    def __init__(self, message: str = "Middleware failed.") -> None:
        super().__init__(message)


class MiddlewareTermination(AgentLedgerError):
    """Raise from middleware to end the run after the current batch of tool calls."""

    def __init__(self, message: str = "terminated by middleware", *, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class ExperimentalWarning(FutureWarning):
    """An experimental API was used; it may change without a deprecation period."""


class TornTailWarning(RuntimeWarning):
    """A log ended in a record cut short by an interrupted write; the torn bytes were removed."""


class UnreadableStreamWarning(RuntimeWarning):
    """A stream that does not decode was skipped while reading many (listing runs, a session's
    earlier runs); the message names the stream and where its log is corrupt."""
