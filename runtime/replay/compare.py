"""Comparing a rerun's events with the recorded ones: aligned by iteration and call, every
difference listed.

Both logs are in canonical order: within a batch, call by call in the model's order, each call's
own events in order (how concurrent calls interleave is not part of a run's meaning). A log says
so in ``RunStarted.calls_in_model_order``, and two such logs are compared as they are; an older
log, whose concurrent calls interleave as they happened, is put in that order first (and the log
it is compared with, so both are ordered alike). Then they are aligned event by event on (event
type, call), so that one missing or extra event does not make everything after it differ. Each
aligned pair is compared field by field. Differences in what the run is configured with
(``RunStarted``'s instructions, options, tool specs, middleware and limits; the specs of tools
added during the run) are drift, everything else a divergence.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec

from ..core.events import (
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    ChildRunStarted,
    Event,
    MiddlewareShortCircuit,
    ModelResponded,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from ..errors import ReplayDivergence
from ..redaction import holds_redactions, redact_events
from .findings import Finding, FindingKind, text_diff

__all__ = ("call_of", "canonical", "compare", "diff_runs", "differences", "in_model_order")


_IGNORED = frozenset({"at", "seq", "child_run_id", "origin_run_id", "origin_seq"})
_IGNORED_BY_TYPE: Mapping[str, frozenset[str]] = {
    # The version of the library that recorded the run: a rerun on a newer one is still the run.
    "RunStarted": frozenset({"library_version"}),
    # How the session's history takes a run agent middleware ended before its loop is the
    # library's rule, which changed: a run recorded under the older rule still reruns as itself.
    "MiddlewareShortCircuit": frozenset({"leaves_history"}),
    "RunTerminated": frozenset({"leaves_history"}),
}
_DRIFT_FIELDS: Mapping[str, frozenset[str]] = {
    "RunStarted": frozenset(
        {
            "instructions",
            "options",
            "tools",
            "middleware",
            "config",
            "context_providers",
            # what that run() was given, when a test gives its own (a cassette's replay)
            "run_instructions",
            "run_option_keys",
            "run_tool_names",
        }
    ),
    "ToolsAdded": frozenset({"tools"}),
}
_MISSING = msgspec.UNSET


def call_of(event: Event, children: Mapping[str, str]) -> str | None:
    """The tool call of this run that an event belongs to, if any."""
    if type(event) is SessionUpdated:
        if event.origin_run_id is None:
            return event.by
        return children.get(event.by.split("/", 1)[0])  # a copy from a sub-agent: by = "<child run>/..."
    if isinstance(event, ToolsAdded | ToolsRemoved):
        return event.by_call_id
    if isinstance(event, ToolCalled | ToolReturned | ToolFailed | ChildRunStarted):
        return event.call_id
    return None


_BLANK: dict[str, Any] = {
    "at": 0,
    "seq": 0,
    "child_run_id": "",
    "origin_run_id": None,
    "origin_seq": None,
}
_SESSION = "(a session)"
"""What a session id compares as: whether a run had one, not which (a test's own session in a
cassette's replay is made afresh, with a new id)."""


def _normalized(event: Event) -> Event:
    """The event with the fields a rerun may change blanked, for comparing by value."""
    blank = {name: _BLANK[name] for name in _IGNORED if name in event.__struct_fields__}
    if getattr(event, "session_id", None) is not None:
        blank["session_id"] = _SESSION
    if type(event) is SessionUpdated and event.origin_run_id is not None:
        blank["by"] = event.by.split("/", 1)[-1]  # "<sub-agent run>/<writer>": new runs get new ids
    return msgspec.structs.replace(event, **blank)


def _comparable(event: Event) -> dict[str, Any]:
    """The event as JSON values for a readable diff (the ignored fields left out)."""
    data = msgspec.to_builtins(event)
    return {k: v for k, v in data.items() if k not in _IGNORED}


def _diff(expected: Event | None, actual: Event | None) -> str:
    def lines(event: Event | None) -> list[str]:
        if event is None:
            return ["<no event>"]
        return msgspec.json.format(msgspec.json.encode(_comparable(event)), indent=2).decode().splitlines()

    return "\n".join(difflib.unified_diff(lines(expected), lines(actual), "recorded", "rerun", lineterm=""))


def _lane(event: Event, children: Mapping[str, str]) -> str | None:
    if isinstance(event, RunTerminated):
        return event.by or None
    if isinstance(event, ArgumentsRejected | ToolNotFound | MiddlewareShortCircuit | ApprovalResolved):
        return event.call_id
    return call_of(event, children)


def _opens_batch(event: Event) -> tuple[str | None, ...] | None:
    """The call ids of the batch ``event`` opens, in call order, or None."""
    if type(event) is ModelResponded and event.message.function_calls:
        return tuple(c.call_id for c in event.message.function_calls)
    if type(event) is BatchResumed:
        return event.call_ids
    return None


def in_model_order(events: Sequence[Event]) -> bool:
    """Whether a log keeps its batches call by call in the model's order (it says so when it
    starts: ``RunStarted.calls_in_model_order``); an empty log has nothing to order."""
    first = events[0] if events else None
    return first is None or (type(first) is RunStarted and first.calls_in_model_order)


def canonical(events: Sequence[Event]) -> list[Event]:
    """The log with each batch's events grouped by call (model order), each call's kept in order
    (for logs written before ``RunStarted.calls_in_model_order``)."""
    children = {e.child_run_id: e.call_id for e in events if type(e) is ChildRunStarted}
    out: list[Event] = []
    batch: list[Event] = []
    order: dict[str | None, int] = {}
    for event in events:
        if type(event) is BatchClaimed:
            continue  # a later run's claim on this paused run: nothing a rerun of it does
        opened = _opens_batch(event)
        if opened is not None:
            out.extend(_sorted(batch, order, children))
            out.append(event)
            batch = []
            order = {call_id: i for i, call_id in enumerate(opened)}
            continue
        if type(event) is ApprovalResolved and event.call_id not in order:
            order[event.call_id] = len(order)  # a resumed batch, in the order its answers settle
        lane = _lane(event, children) if order else None
        if order and lane in order:
            batch.append(event)
            continue
        if order and type(event) is ApprovalRequested:
            batch.append(event)
            continue
        out.extend(_sorted(batch, order, children))
        batch, order = [], {}
        out.append(event)
    out.extend(_sorted(batch, order, children))
    return out


_CALL_OUTCOMES = (ToolReturned, ToolFailed, ArgumentsRejected, MiddlewareShortCircuit, ToolNotFound)


def _restarts_dropped(events: Sequence[Event]) -> Sequence[Event]:
    """The log without the starts a stopped process left: a run finished from its stored log
    after its process was killed starts again a call the caller allowed to run once more, so the
    call's first ``ToolCalled`` has no outcome and a later one of the same call has. A rerun
    makes the call once; the stopped start is nothing it can repeat."""
    open_starts: dict[str, int] = {}
    dropped: set[int] = set()
    for index, event in enumerate(events):
        if type(event) is ToolCalled:
            earlier = open_starts.get(event.call_id)
            if earlier is not None:
                dropped.add(earlier)
            open_starts[event.call_id] = index
        elif isinstance(event, _CALL_OUTCOMES) and event.call_id is not None:
            open_starts.pop(event.call_id, None)
    return [e for i, e in enumerate(events) if i not in dropped] if dropped else events


def _sorted(batch: list[Event], order: Mapping[str | None, int], children: Mapping[str, str]) -> list[Event]:
    return sorted(batch, key=lambda e: order.get(_lane(e, children), -1))


def _fields(event: Event) -> dict[str, Any]:
    """The event as JSON values, without the fields a rerun may change."""
    normalized = _normalized(event)
    data = msgspec.to_builtins(normalized)
    for name in normalized.__struct_fields__:  # a field at its default is left out: it is null
        if name not in data:
            data[name] = msgspec.to_builtins(getattr(normalized, name))
    ignored = _IGNORED | _IGNORED_BY_TYPE.get(type(event).__name__, frozenset())
    return {k: v for k, v in data.items() if k not in ignored}


# Between two different runs, what names the run rather than what it did: ids the store, the
# session or the service chose.
_RUN_NAMES = frozenset(
    {"run_id", "session_id", "parent_run_id", "parent_call_id", "response_id", "conversation_id"}
)


def _renamed(value: Any, names: Mapping[str, str]) -> Any:
    if type(value) is str:
        return names.get(value, value)
    if type(value) is dict:
        return {k: _renamed(v, names) for k, v in value.items() if k not in _RUN_NAMES}
    if isinstance(value, list | tuple):
        return [_renamed(v, names) for v in value]
    return value


class _Side:
    """One log, ready to align: canonical order, an alignment key and JSON values per event."""

    def __init__(self, events: Sequence[Event], *, anonymous: bool, ordered: bool) -> None:
        events = _restarts_dropped(events)
        self.events = [e for e in events if type(e) is not BatchClaimed] if ordered else canonical(events)
        children = {e.child_run_id: e.call_id for e in self.events if type(e) is ChildRunStarted}
        lanes = [_lane(e, children) for e in self.events]
        self.fields = [_fields(e) for e in self.events]
        if anonymous:  # call ids are the model's: name each call by its place in the run
            calls = [
                call.call_id
                for e in self.events
                if type(e) is ModelResponded
                for call in e.message.function_calls
                if call.call_id
            ]
            names = {call_id: f"call#{n}" for n, call_id in enumerate(dict.fromkeys(calls), 1)}
            lanes = [names.get(lane, lane) if lane is not None else None for lane in lanes]
            self.fields = [_renamed(f, names) for f in self.fields]
        self.keys = [(type(e).__name__, lane) for e, lane in zip(self.events, lanes, strict=True)]


def _by_name(values: Sequence[Any]) -> dict[str, Any] | None:
    """A list of named objects (tool specs) as a mapping by name, when the names are unique."""
    if not all(type(v) is dict and type(v.get("name")) is str for v in values):
        return None
    named = {v["name"]: v for v in values}
    return named if len(named) == len(values) else None


def _field_diffs(recorded: Any, rerun: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    if type(recorded) is dict and type(rerun) is dict:
        for key in [*recorded, *(k for k in rerun if k not in recorded)]:
            inner = f"{path}.{key}" if path else str(key)
            yield from _field_diffs(recorded.get(key, _MISSING), rerun.get(key, _MISSING), inner)
        return
    if isinstance(recorded, list | tuple) and isinstance(rerun, list | tuple):
        left, right = _by_name(recorded), _by_name(rerun)
        if left is not None and right is not None and (left or right):
            for name in [*left, *(n for n in right if n not in left)]:
                yield from _field_diffs(
                    left.get(name, _MISSING), right.get(name, _MISSING), f"{path}[{name}]"
                )
            return
        if len(recorded) == len(rerun):
            for index, (a, b) in enumerate(zip(recorded, rerun, strict=True)):
                yield from _field_diffs(a, b, f"{path}[{index}]")
            return
    if _differ(recorded, rerun):
        yield path, recorded, rerun


_NUMBERS = (bool, int, float)


def _differ(recorded: Any, rerun: Any) -> bool:
    """Whether two values differ as the log tells them apart: ``True`` is not ``1``, nor ``1``
    ``1.0``; NaN is NaN; and a log in JSON holds NaN and infinity as null, so a null stands for
    either."""
    if type(recorded) is not type(rerun) and isinstance(recorded, _NUMBERS) and isinstance(rerun, _NUMBERS):
        return True
    if recorded == rerun or (_nan(recorded) and _nan(rerun)):
        return False
    return not ((recorded is None and _non_finite(rerun)) or (rerun is None and _non_finite(recorded)))


def _nan(value: Any) -> bool:
    return type(value) is float and math.isnan(value)


def _non_finite(value: Any) -> bool:
    return type(value) is float and not math.isfinite(value)


def _value(value: Any) -> Any:
    return None if value is _MISSING else value


class _Findings:
    """Findings of one comparison, all in one run's place in the tree."""

    def __init__(self, run_id: str, path: tuple[str, ...]) -> None:
        self.run_id = run_id
        self.path = path
        self.found: list[Finding] = []

    def pair(self, recorded: Event, left: dict[str, Any], rerun: Event, right: dict[str, Any]) -> None:
        kind_name = type(recorded).__name__
        if type(recorded) is not type(rerun):  # the same call, another outcome (it now fails, say)
            self.found.append(self._finding("divergence", recorded, rerun, "type", left, right))
            return
        drift_fields = _DRIFT_FIELDS.get(kind_name, frozenset())
        for field, a, b in _field_diffs(left, right, ""):
            drift = field.split(".", 1)[0].split("[", 1)[0] in drift_fields
            detail = text_diff(_value(a), _value(b)) if drift and field == "instructions" else ""
            kind: FindingKind = "drift" if drift else "divergence"
            self.found.append(self._finding(kind, recorded, rerun, field, _value(a), _value(b), detail))

    def lone(self, event: Event, data: dict[str, Any], *, recorded: bool) -> None:
        self.found.append(
            Finding(
                kind="divergence",
                run_id=self.run_id,
                path=self.path,
                seq=event.seq if recorded else None,
                rerun_seq=None if recorded else event.seq,
                event_type=type(event).__name__,
                recorded=data if recorded else None,
                rerun=None if recorded else data,
                call=_call_named(event),
            )
        )

    def _finding(
        self, kind: FindingKind, recorded: Event, rerun: Event, field: str, a: Any, b: Any, detail: str = ""
    ) -> Finding:
        return Finding(
            kind=kind,
            run_id=self.run_id,
            path=self.path,
            seq=recorded.seq,
            rerun_seq=rerun.seq,
            event_type=type(recorded).__name__,
            field=field,
            recorded=a,
            rerun=b,
            detail=detail,
            call=_call_named(recorded),
        )


def _call_named(event: Event) -> str:
    """``call_1 (price)`` for an event of a tool call; empty for any other."""
    call_id = getattr(event, "call_id", None)
    if not isinstance(call_id, str) or not call_id:
        return ""
    name = getattr(event, "name", None)
    return f"{call_id} ({name})" if isinstance(name, str) and name else call_id


def _align(left: _Side, right: _Side, findings: _Findings) -> list[Finding]:
    matcher = difflib.SequenceMatcher(None, left.keys, right.keys, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                # Compared field by field, not with ==, which takes True for 1 and NaN for other.
                findings.pair(left.events[i], left.fields[i], right.events[j], right.fields[j])
            continue
        # A replaced stretch: events side by side of the same type, or of the same call, are
        # compared; the rest is missing from one side.
        i, j = i1, j1
        while i < i2 and j < j2:
            same_type = left.keys[i][0] == right.keys[j][0]
            same_call = left.keys[i][1] is not None and left.keys[i][1] == right.keys[j][1]
            if not (same_type or same_call):
                break
            findings.pair(left.events[i], left.fields[i], right.events[j], right.fields[j])
            i, j = i + 1, j + 1
        for k in range(i, i2):
            findings.lone(left.events[k], left.fields[k], recorded=True)
        for k in range(j, j2):
            findings.lone(right.events[k], right.fields[k], recorded=False)
    return findings.found


def differences(
    recorded: Sequence[Event], rerun: Sequence[Event], *, path: tuple[str, ...] = ()
) -> list[Finding]:
    """Every difference between a recorded run's events and its rerun's, in log order.

    A recorded run that is an artefact (a cassette: it holds the redaction marker, and redacting
    it changes nothing) is compared as an artefact shows it: both sides redacted, so a value
    recorded as ``[redacted]`` matches the rerun's value that redacts to it, and a change only
    inside a secret is no difference. A log is compared as it is, even with redacted kwargs."""
    if holds_redactions(recorded):
        shown = redact_events(recorded)
        if shown == list(recorded):
            recorded, rerun = shown, redact_events(rerun)
    ordered = in_model_order(recorded) and in_model_order(rerun)
    left = _Side(recorded, anonymous=False, ordered=ordered)
    right = _Side(rerun, anonymous=False, ordered=ordered)
    run_id = left.events[0].run_id if left.events else (right.events[0].run_id if right.events else "")
    return _align(left, right, _Findings(run_id, path or (run_id,)))


def diff_runs(a: Sequence[Event], b: Sequence[Event]) -> list[Finding]:
    """Every difference between two runs (model A against model B, prompt v1 against v2...).

    As ``differences``, but what names a run rather than what it did is left out (run, session,
    response and conversation ids), and calls are matched by their place in the run, since each
    model names its calls its own way. ``seq`` is run A's, ``rerun_seq`` run B's. Both runs
    are compared as ``redact_events`` gives them, so no finding shows a credential.
    """
    a, b = redact_events(a), redact_events(b)
    ordered = in_model_order(a) and in_model_order(b)
    left, right = _Side(a, anonymous=True, ordered=ordered), _Side(b, anonymous=True, ordered=ordered)
    first = left.events[0].run_id if left.events else ""
    second = right.events[0].run_id if right.events else ""
    return _align(left, right, _Findings(first, (f"{first} vs {second}",)))


def compare(recorded: Sequence[Event], actual: Sequence[Event]) -> None:
    """Raise ``ReplayDivergence`` if the rerun's events differ from the recorded ones.

    The error's ``seq``, ``expected``, ``actual`` and ``diff`` describe the first difference,
    ``findings`` lists every one (drift included); ``seq`` is the recorded event's seq (or the
    rerun's, for an event only the rerun has).
    """
    found = differences(recorded, actual)
    if found:
        raise divergence(found, recorded, actual)


def divergence(
    found: Sequence[Finding], recorded: Sequence[Event], actual: Sequence[Event]
) -> ReplayDivergence:
    """The error for ``found`` (not empty): its first divergence (else its first finding) in front."""
    first = next((f for f in found if f.kind == "divergence"), found[0])
    expected = next((e for e in recorded if first.seq is not None and e.seq == first.seq), None)
    got = next((e for e in actual if first.rerun_seq is not None and e.seq == first.rerun_seq), None)
    if first.run_id and expected is not None and expected.run_id != first.run_id:
        expected = None
    seq = first.seq if first.seq is not None else (first.rerun_seq or 0)
    return ReplayDivergence(seq, expected, got, _diff(expected, got), findings=found)
