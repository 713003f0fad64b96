"""AgentSession: conversation state and history, kept as a projection of the log.

Theory of operation. ``session.state`` is a dict that records what happens to it. A set or delete
becomes a key-level ``StateChange`` at once. A container value (a dict, a list...) can also be
changed in place, which no dict method sees: so whoever stores or reads a container value is
noted as having *touched* that key, and a *checkpoint* (after every tool call and middleware
step) re-encodes the keys the current writer touched and records a ``set`` for each one that
changed, attributed to that writer. Concurrent tool calls therefore each account for their own
in-place changes. A final checkpoint at the end of a run looks at every container value, for
changes made through references kept elsewhere. While a run is bound to
the session the changes go straight into that run's log as ``SessionUpdated`` events, attributed
to the call or middleware that made them; changes made between runs are kept and recorded at the
start of the next run (``by="caller"``). Folding every ``SessionUpdated`` of a session in log order
therefore gives back the same state.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from .core.claims import history_growth
from .core.depth import MAX_DEPTH, too_deep
from .core.errors import TransitionError
from .core.events import Event, RunCompleted, RunFailed, RunStarted, SessionUpdated, StateChange
from .core.limits import INT64_MAX, INT64_MIN, may_overflow, safe_text
from .core.messages import Message
from .core.projections import SessionProjection, apply_changes, conversation_after
from .errors import ApprovalError, SessionStateError

__all__ = ("MAX_SESSION_ID", "AgentSession", "SessionState")

_SCALARS = (str, int, float, bool, type(None))
_encoder = msgspec.json.Encoder(order="deterministic")

writer: contextvars.ContextVar[str] = contextvars.ContextVar("agentledger_writer", default="caller")
"""Who is writing session state: a call id, ``agent_middleware``, ``chat_middleware`` or ``caller``."""

_ChangeSink = Callable[[str, tuple[StateChange, ...]], None]
_sinks: contextvars.ContextVar[dict[int, _ChangeSink]] = contextvars.ContextVar(
    "agentledger_sinks",
    default={},  # noqa: B039 - never mutated
)


def _encode(key: str, value: Any) -> bytes:
    """The value as the log records it; ``SessionStateError`` for one the log could not give back
    (not JSON, text that is not UTF-8, nested deeper than ``MAX_DEPTH``, an integer past 64 bits)."""
    try:
        key.encode()
        encoded = _encoder.encode(value)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        hint = ""
        if callable(getattr(value, "model_dump", None)):
            hint = '; store value.model_dump(mode="json") and rebuild the model when reading it'
        kind = type(value).__name__
        raise SessionStateError(
            f"session state value for {safe_text(key)!r} cannot be recorded as JSON "
            f"({kind}): {safe_text(str(exc))}{hint}"
        ) from exc
    except RecursionError as exc:
        del exc
        if _contains_itself(value):
            raise SessionStateError(
                f"session state value for {safe_text(key)!r} contains itself (a cycle): "
                "the log can only hold a value that ends"
            ) from None
        raise SessionStateError(
            f"session state value for {safe_text(key)!r} is nested deeper than {MAX_DEPTH - 3} levels"
        ) from None
    if too_deep(encoded, MAX_DEPTH - 3):  # an event holds the value three levels down
        raise SessionStateError(
            f"session state value for {safe_text(key)!r} is nested deeper than {MAX_DEPTH - 3} levels"
        )
    if may_overflow(encoded) and _has_big_int(msgspec.json.decode(encoded)):
        raise SessionStateError(f"session state value for {safe_text(key)!r} holds an integer past 64 bits")
    return encoded


def _recordable(key: Any, value: Any) -> tuple[bytes, Any]:
    """The value encoded and as it reads back; ``SessionStateError`` for a key that is no ``str``
    or a value the log could not give back as it is (a tuple or a set would come back a list)."""
    if not isinstance(key, str):
        raise SessionStateError(f"session state keys must be str, not {type(key).__name__}")
    encoded = _encode(key, value)
    recorded = msgspec.json.decode(encoded)
    if recorded != value and not (isinstance(value, float) and value != value):  # NaN aside
        raise SessionStateError(
            f"session state value for {key!r} ({type(value).__name__}) would read back from the "
            f"log as {recorded!r}: store JSON values (str, int, float, bool, None, list, dict)"
        )
    return encoded, recorded


def _contains_itself(value: Any) -> bool:
    """Whether a list or dict in ``value`` holds itself, directly or further down."""
    path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, leaving = stack.pop()
        if leaving:
            path.discard(id(item))
            continue
        if not isinstance(item, dict | list):
            continue
        if id(item) in path:
            return True
        path.add(id(item))
        stack.append((item, True))
        stack.extend((child, False) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _has_big_int(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is int and not INT64_MIN <= item <= INT64_MAX:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class SessionState(dict[str, Any]):
    """A dict whose changes are recorded; see the module docstring."""

    __slots__ = ("__weakref__", "_encoded", "_lock", "_sink", "_touched", "_watched")

    def __init__(self, sink: _ChangeSink) -> None:
        super().__init__()
        self._sink = sink
        self._encoded: dict[str, bytes] = {}
        self._watched: set[str] = set()
        self._touched: dict[str, set[str]] = {}
        self._lock = threading.RLock()

    # -- writes ------------------------------------------------------------------------------

    def __setitem__(self, key: str, value: Any) -> None:
        encoded, recorded = _recordable(key, value)
        with self._lock:
            super().__setitem__(key, value)
            self._encoded[key] = encoded
            who = writer.get()
            if isinstance(value, _SCALARS):
                self._watched.discard(key)
            else:
                self._watched.add(key)
                self._touched.setdefault(who, set()).add(key)
            self._sink(who, (StateChange(key, "set", recorded),))

    # -- reads that hand out containers -------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if not isinstance(value, _SCALARS):
            self._touch((key,))
        return value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default  # noqa: SIM401 - self.get would recurse

    def values(self) -> Any:
        self._touch(self._watched)
        return dict.values(self)

    def items(self) -> Any:
        self._touch(self._watched)
        return dict.items(self)

    def copy(self) -> dict[str, Any]:
        self._touch(self._watched)
        return dict(dict.items(self))

    def _touch(self, keys: Iterable[str]) -> None:
        with self._lock:
            self._touched.setdefault(writer.get(), set()).update(keys)

    def __delitem__(self, key: str) -> None:
        with self._lock:
            super().__delitem__(key)
            self._encoded.pop(key, None)
            self._watched.discard(key)
            self._sink(writer.get(), (StateChange(key, "delete"),))

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    _missing = object()

    def pop(self, key: str, default: Any = _missing) -> Any:
        if key in self:
            value = dict.__getitem__(self, key)
            del self[key]
            return value
        if default is SessionState._missing:
            raise KeyError(key)
        return default

    def popitem(self) -> tuple[str, Any]:
        if not self:
            raise KeyError("popitem(): session state is empty")
        key = next(reversed(self.keys()))
        return key, self.pop(key)

    def clear(self) -> None:
        for key in list(self):
            del self[key]

    def __ior__(self, other: Any) -> SessionState:  # type: ignore[override,misc]
        self.update(other)
        return self

    # -- checkpoints -------------------------------------------------------------------------

    def checkpoint(self, *, every: bool = False) -> None:
        """Record in-place changes of the container values the current writer touched.

        ``every=True`` looks at every container value, whoever touched it (end of a run).
        """
        if not self._watched:
            return
        with self._lock:
            who = writer.get()
            touched = self._touched.pop(who, set())
            if every:  # every container nobody else is in the middle of changing
                others = set().union(*(keys for name, keys in self._touched.items() if name != who))
                touched |= self._watched - others
            changes = []
            for key in sorted(touched & self._watched):
                encoded = _encode(key, dict.__getitem__(self, key))
                if encoded != self._encoded.get(key):
                    self._encoded[key] = encoded
                    changes.append(StateChange(key, "set", msgspec.json.decode(encoded)))
            if changes:
                self._sink(writer.get(), tuple(changes))

    def settle(self, changes: Iterable[StateChange]) -> None:
        """Follow the log: make each key's value the one ``changes`` (a recorded write, in log
        order) gives it, recording nothing. Writes of concurrent calls reach the log in the
        model's order of the calls, not in the order they happened; settling each one as it is
        kept makes the live value the log's last write, as a rebuild from the log has it. A key
        already at that value (the usual case) is left alone, its object untouched."""
        with self._lock:
            for change in changes:
                key = change.key
                if change.op != "set":
                    if dict.__contains__(self, key):
                        dict.__delitem__(self, key)
                        self._encoded.pop(key, None)
                        self._watched.discard(key)
                    continue
                encoded = _encoder.encode(change.value)
                if self._encoded.get(key) == encoded and dict.__contains__(self, key):
                    continue
                value = msgspec.json.decode(encoded)
                dict.__setitem__(self, key, value)
                self._encoded[key] = encoded
                if not isinstance(value, _SCALARS):
                    self._watched.add(key)

    def settle_under(self, earlier: Mapping[str, Any]) -> None:
        """Put ``earlier`` (the values a session's earlier runs left) under this state, recording
        nothing: their keys first, in their order, then the keys only this state holds; a key
        this state holds keeps its own value and what is to be noticed of it (a replay bringing
        a caller's fresh session to where a log's earlier runs left theirs)."""
        with self._lock:
            own = dict(dict.items(self))
            dict.clear(self)
            for key, value in earlier.items():
                if key in own:
                    dict.__setitem__(self, key, own.pop(key))
                    continue
                encoded = self._encoded[key] = _encode(key, value)
                fresh = msgspec.json.decode(encoded)
                dict.__setitem__(self, key, fresh)
                if not isinstance(fresh, _SCALARS):
                    self._watched.add(key)
            for key, value in own.items():
                dict.__setitem__(self, key, value)

    def reset(self, values: dict[str, Any]) -> None:
        """Become exactly ``values`` without recording anything (rebuilds and replays)."""
        with self._lock:
            dict.clear(self)
            self._encoded.clear()
            self._watched.clear()
            self._touched.clear()
            self._load(values)

    def _load(self, values: dict[str, Any]) -> None:
        with self._lock:
            for key, value in values.items():
                encoded = self._encoded[key] = _encode(key, value)
                if type(value) is dict or type(value) is list:
                    # A container of its own: the values come from recorded events (a rebuild, a
                    # replay), and a write in place must change the state, never the log.
                    value = msgspec.json.decode(encoded)
                dict.__setitem__(self, key, value)
                if not isinstance(value, _SCALARS):
                    self._watched.add(key)

    def snapshot(self) -> dict[str, Any]:
        """The state as plain JSON values (encoded afresh, so in-place changes show)."""
        return {key: msgspec.json.decode(_encode(key, value)) for key, value in dict.items(self)}


class _SavedChanges(msgspec.Struct, frozen=True):
    by: str
    changes: tuple[StateChange, ...]


class _SavedSession(msgspec.Struct, frozen=True, kw_only=True):
    """What ``AgentSession.to_dict`` writes (the reference framework's keys, then ours)."""

    session_id: str
    type: str = "session"
    service_session_id: str | None = None
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    history: tuple[Message, ...] = ()
    pending: tuple[_SavedChanges, ...] = ()
    paused_runs: dict[str, str] = msgspec.field(default_factory=dict)
    rerun_allowed: tuple[str, ...] = ()
    rerun_holders: dict[str, str] = msgspec.field(default_factory=dict)


_SAVED_KEYS = frozenset(_SavedSession.__struct_fields__)
MAX_SESSION_ID = 4096
"""The longest ``session_id`` (and ``service_session_id``) ``from_dict`` reads, in characters."""


def _framework_history(state: dict[str, Any]) -> list[Message]:
    """Take the conversation out of a reference framework session's ``state``, where its
    in-memory history provider keeps it (``{source_id: {"messages": [...]}}``, ``"in_memory"``
    by default): here the history is the session's own, so the entry leaves ``state``."""
    found = [key for key, value in state.items() if _is_saved_history(value)]
    key = "in_memory" if "in_memory" in found else (found[0] if len(found) == 1 else None)
    if key is None:
        return []
    try:
        messages = msgspec.convert(state[key]["messages"], list[Message], strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"not a saved session: the messages under state[{key!r}]: {exc}") from exc
    del state[key]
    return messages


def _is_saved_history(value: Any) -> bool:
    messages = value.get("messages") if isinstance(value, dict) and len(value) == 1 else None
    return isinstance(messages, list) and all(
        isinstance(m, dict) and "role" in m and "contents" in m for m in messages
    )


class AgentSession:
    """A conversation: its id, its state (``.state``) and its message history (``.history``).

    ``service_session_id`` names the conversation when a service keeps it too (OpenAI's
    Responses API with ``store``): a run on the session then continues it there and sends only
    its own input; ``history`` still holds every message, as the log does.
    """

    def __init__(self, session_id: str, *, service_session_id: str | None = None) -> None:
        self.session_id = session_id
        self.service_session_id = service_session_id
        self.history: list[Message] = []
        self.paused_runs: dict[str, str] = {}
        """Calls waiting for approval: call id -> the run that paused on them (a resume claims
        that run's batch in the store before it runs anything)."""
        self.rerun_allowed: set[str] = set()
        """Calls the caller allowed to run again although their outcome is unknown (``allow_rerun``)."""
        self.rerun_holders: dict[str, str] = {}
        """For a permission given after a refusal: the run that refusal named as holding the
        call's batch. The permission is about that run alone (``held_by``)."""
        self._refused_by: dict[str, str] = {}  # call id -> the run the last refusal named
        self._state = SessionState(self._record)
        self._pending: list[tuple[str, tuple[StateChange, ...]]] = []
        self._active: list[_ChangeSink] = []  # the sinks of the runs bound to this session now
        self._claims: dict[str, str] = {}  # paused calls being resumed: call id -> run id
        self._lock = threading.Lock()

    def _record(self, by: str, changes: tuple[StateChange, ...]) -> None:
        sink = _sinks.get().get(id(self))
        if sink is None and len(self._active) == 1:
            sink = self._active[0]  # a thread that did not inherit the run's context
        if sink is not None:
            try:
                sink(by, changes)
                return
            except TransitionError:  # that run has ended: the change belongs to the next one
                pass
        with self._lock:
            self._pending.append((by, changes))

    def claim(self, call_ids: Iterable[str | None], run_id: str) -> Callable[[], None]:
        """Reserve the paused calls a run resumes, so two resumes of one batch cannot both run it
        (``ApprovalError`` naming the run that holds them); returns the releaser."""
        wanted = [c for c in call_ids if c is not None]
        with self._lock:
            taken = {c: self._claims[c] for c in wanted if c in self._claims}
            if taken:
                holder = next(iter(taken.values()))
                raise ApprovalError(
                    f"calls {sorted(taken)} are being resumed by run {holder!r}: a batch resumes once"
                )
            for call_id in wanted:
                self._claims[call_id] = run_id

        def release() -> None:
            with self._lock:
                for call_id in wanted:
                    if self._claims.get(call_id) == run_id:
                        del self._claims[call_id]

        return release

    def allow_rerun(self, *call_ids: str) -> None:
        """Say that the resume holding these calls' batch stopped for good, or that a call it
        started without an outcome (``CallOutcomeUnknownError``) did not take effect: the next
        resume takes the batch over (finishing that resume's own run from its log when it got as
        far as a call). The claim records the permission; a call whose outcome is recorded never
        runs again.

        Given after a resume on this session was refused, the permission is about the run that
        refusal named: should another run hold the batch by the next resume (another process
        took it over meanwhile), the permission is not used for it, and is dropped."""
        self.rerun_allowed.update(call_ids)
        for call_id in call_ids:
            holder = self._refused_by.get(call_id)
            if holder is not None:
                self.rerun_holders[call_id] = holder
            else:
                self.rerun_holders.pop(call_id, None)

    def held_by(self, call_ids: Iterable[str], run_id: str) -> None:
        """A resume of these calls was refused because run ``run_id`` holds their batch (the
        claim's use): a permission given from now on is about that run, and one given about
        another run is dropped (it vouched for a run that no longer holds the batch)."""
        for call_id in call_ids:
            self._refused_by[call_id] = run_id
            bound = self.rerun_holders.get(call_id)
            if bound is not None and bound != run_id:
                self.rerun_allowed.discard(call_id)
                del self.rerun_holders[call_id]

    def spend_rerun(self, call_ids: Iterable[str]) -> None:
        """A claim used these permissions to run again: each is used once."""
        for call_id in call_ids:
            self.rerun_allowed.discard(call_id)
            self.rerun_holders.pop(call_id, None)

    def bind(self, sink: _ChangeSink) -> Callable[[], None]:
        """Record this session's changes in a run (the driver's use); returns the unbinder.

        The binding lives in the calling context, so concurrent runs on one session, and a
        sub-agent running inside a tool call, each record into their own log.
        """
        mapping = dict(_sinks.get())
        mapping[id(self)] = sink
        token = _sinks.set(mapping)
        with self._lock:
            pending, self._pending = self._pending, []
            self._active.append(sink)
        for by, changes in pending:
            sink(by, changes)
        self.state.checkpoint(every=True)

        def unbind() -> None:
            _sinks.reset(token)
            with self._lock:
                self._active.remove(sink)

        return unbind

    @property
    def state(self) -> SessionState:
        """The session's state: a dict whose changes are recorded."""
        return self._state

    @state.setter
    def state(self, values: dict[str, Any]) -> None:
        """``session.state = {...}`` replaces the contents, recorded like any other change."""
        if values is self._state:
            return
        new = dict(values)
        for key in [k for k in self._state if k not in new]:
            del self._state[key]
        self._state.update(new)

    @property
    def pending_changes(self) -> list[tuple[str, tuple[StateChange, ...]]]:
        """Changes made outside a run, recorded at the start of the next one."""
        return list(self._pending)

    def take_pending(self) -> list[tuple[str, tuple[StateChange, ...]]]:
        """Hand over the pending changes (a driver recording them elsewhere): none stay pending."""
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def add_pending(self, by: str, changes: tuple[StateChange, ...]) -> None:
        """Make ``changes`` pending again, to be recorded at the start of the next run."""
        with self._lock:
            self._pending.append((by, changes))

    def apply(self, event: Event) -> None:
        """Bring the state up to a recorded ``SessionUpdated`` of this session, recording nothing."""
        if type(event) is not SessionUpdated or event.session_id != self.session_id:
            return
        values = dict(dict.items(self._state))
        apply_changes(values, event.changes)
        self._state.reset(values)

    def after_run(
        self,
        events: Sequence[Event],
        *,
        transcript: Sequence[Message] | None = None,
        input_count: int | None = None,
    ) -> None:
        """Grow the history after the run whose log is ``events`` ended, by the one rule every
        driver applies (``agentledger.core.claims.history_growth``): a completed run adds its
        input and its messages, a failed resume keeps the results of the batch it ran, and the
        calls a paused run waits on are noted in ``paused_runs``. A driver holding the live
        transcript passes it (and how many of its messages are the input) to spare a fold."""
        growth = history_growth(events, transcript=transcript, input_count=input_count)
        self.history.extend(growth.messages)
        for message in growth.messages:
            for content in message.contents:
                if content.type == "function_result":
                    self.paused_runs.pop(content.call_id or "", None)
        self.paused_runs.update(growth.paused)
        if growth.conversation_id is not None:
            self.service_session_id = growth.conversation_id

    @classmethod
    def from_events(cls, events: Iterable[Event], session_id: str) -> AgentSession:
        """Rebuild a session (state and history) from the logs of its runs, in order.

        State is folded in log order. History grows run by run as ``after_run`` grows it, in the
        order the runs ended (by the ``at`` of their ``RunCompleted``/``RunFailed``), as the live
        session does: runs on one session may overlap, and their logs are usually read one run
        after another.
        """
        session = cls(session_id)
        view = SessionProjection(session_id)
        logs: dict[str, list[Event]] = {}  # the runs of this session that have not ended yet
        ended: list[tuple[int, int, list[Event]]] = []
        for event in events:
            view.apply(event)
            kind = type(event)
            if kind is RunStarted:
                assert isinstance(event, RunStarted)
                if event.session_id == session_id and event.session_history:
                    logs[event.run_id] = []
            log = logs.get(event.run_id)
            if log is None:
                continue
            log.append(event)
            if kind is RunCompleted or kind is RunFailed:
                ended.append((event.at, len(ended), logs.pop(event.run_id)))
        for _, _, log in sorted(ended, key=lambda item: (item[0], item[1])):
            session.after_run(log)
        session.state.reset(view.state)
        return session

    def continue_conversation(self, events: Iterable[Event]) -> None:
        """A run on this session completed with ``events``: follow the service-side
        conversation it ended in, if any (a failed run leaves it where it was)."""
        after = conversation_after(events)
        if after is not None:
            self.service_session_id = after

    def to_dict(self) -> dict[str, Any]:
        """The session as JSON values, to keep or send between runs (``from_dict`` restores it).

        ``type``, ``session_id``, ``service_session_id`` and ``state`` as the reference
        framework writes them; then ``history`` (the messages, which live in the session here),
        ``pending`` (state changes made since the last run, which the next run records),
        ``paused_runs``, ``rerun_allowed`` and ``rerun_holders``. In-place edits of container
        values are noticed first, as at the start of a run.
        """
        self._state.checkpoint()
        return {
            "type": "session",
            "session_id": self.session_id,
            "service_session_id": self.service_session_id,
            "state": self._state.snapshot(),
            "history": msgspec.to_builtins(self.history),
            "pending": [{"by": by, "changes": msgspec.to_builtins(changes)} for by, changes in self._pending],
            "paused_runs": dict(self.paused_runs),
            "rerun_allowed": sorted(self.rerun_allowed),
            "rerun_holders": dict(self.rerun_holders),
        }

    @classmethod
    def from_dict(cls, data: Any) -> AgentSession:
        """The session ``to_dict`` gave (also one of the reference framework's, which has no
        history). ``ValueError`` naming the first problem for anything else."""
        if isinstance(data, dict):
            unknown = sorted(str(k) for k in data if k not in _SAVED_KEYS)
            if unknown:
                raise ValueError(
                    f"not a saved session: unknown keys {unknown[:5]} (a saved session has "
                    f"{', '.join(sorted(_SAVED_KEYS))})"
                )
            for name in ("session_id", "service_session_id"):
                given = data.get(name)
                if isinstance(given, str) and len(given) > MAX_SESSION_ID:
                    raise ValueError(
                        f"not a saved session: its {name} is {len(given)} characters long, more than"
                        f" {MAX_SESSION_ID}"
                    )
        raw_state = data.get("state") if isinstance(data, dict) else None
        if isinstance(raw_state, dict):
            for key, value in raw_state.items():  # as given: a set is refused, not made a list
                _recordable(key, value)
        try:
            saved = msgspec.convert(data, _SavedSession, strict=False)
        except msgspec.ValidationError as exc:
            raise ValueError(f"not a saved session: {exc}") from exc
        if saved.type != "session":
            raise ValueError(f"not a saved session: its type is {saved.type!r}, not 'session'")
        state, history = dict(saved.state), list(saved.history)
        if isinstance(data, dict) and "history" not in data:
            history = _framework_history(state)
        session = cls(saved.session_id, service_session_id=saved.service_session_id)
        session._state.reset(state)
        session.history = history
        for pending in saved.pending:
            session.add_pending(pending.by, pending.changes)
        session.paused_runs = dict(saved.paused_runs)
        session.rerun_allowed = set(saved.rerun_allowed)
        session.rerun_holders = {c: h for c, h in saved.rerun_holders.items() if c in session.rerun_allowed}
        return session

    def __iter__(self) -> Iterator[str]:  # pragma: no cover - sessions are not containers
        raise TypeError("AgentSession is not iterable; use session.state or session.history")

    def __repr__(self) -> str:
        service = f", service_session_id={self.service_session_id!r}" if self.service_session_id else ""
        return f"AgentSession(session_id={self.session_id!r}{service}, keys={list(self.state)!r})"
