"""What a run cost, read from its log: per model call, per run of the tree, per agent, per model,
and the share of the input each tool result added.

Everything here is a fold over recorded events; nothing calls a model or reads a clock. Token
counts are what the provider reported in ``ModelResponded.usage``. Money needs a price table: pass
``price`` (a callable ``price(model, usage, at) -> float | None``, ``at`` the call's time in ns);
``agentledger.adapters.prices.genai_price`` looks prices up in the ``genai-prices`` package (the
``prices`` extra). Without one, a call's cost is the ``ModelResponded.cost`` the run recorded
(when its agent had a ``price`` table), else None; for a model the table does not know it is
None too, and the tokens still add up.

How a tool result's share is estimated: the provider reports only a call's total input, so the
tokens a batch of results added are the growth of the input from the model call before the batch
to the one after it, less what the model's own answer in between added (its output tokens, its
reasoning tokens left out, as providers do not send those back). That growth is split between the
batch's results in proportion to the length of the text the model was sent for each. It is an
estimate: chat templates add a few tokens per message, and middleware that rewrites a request
changes what was sent. A result that no later call in its run saw, or whose neighbouring calls
reported no usage, has no share (None).

How a tool's schema cost is estimated (``tool_offers``): each model call that offers a tool sends
its name, description and JSON schema; at about four characters a token, that is
``len(json) // 4 + 1`` tokens per offer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import msgspec

from .core.events import (
    ArgumentsRejected,
    ChildRunStarted,
    Event,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelResponded,
    RunStarted,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolSpec,
    ToolsRemoved,
)
from .core.messages import Usage, result_text
from .core.projections import error_text
from .runtree import check_run_tree, group_runs

__all__ = (
    "CallCost",
    "CostReport",
    "CostTotals",
    "Price",
    "RunCost",
    "ToolOffers",
    "ToolShare",
    "cost_report",
    "schema_tokens",
    "tool_offers",
)

Price = Callable[[str, Usage, int], float | None]
"""``price(model, usage, at)``: what a model call cost (in USD), or None when unknown."""


class ToolShare(msgspec.Struct, frozen=True, kw_only=True):
    """The input tokens one tool result added to the next model call of its run (an estimate)."""

    run_id: str
    call_id: str
    name: str
    chars: int
    """The length of the text the model was sent for the result."""
    tokens: int | None
    """Its estimated share of the next call's input; None when it cannot be estimated."""
    seen_by: int
    """How many later model calls of the run were sent it (each paid for it again)."""
    cost: float | None = None
    """What its tokens cost at the next call's input price, when prices are known."""
    next_call: int | None = None
    """The iteration of the run's model call it was sent to next; None if none was made."""


class CallCost(msgspec.Struct, frozen=True, kw_only=True):
    """One model call: its usage as reported, and its price when known."""

    run_id: str
    seq: int
    iteration: int
    at: int
    agent: str
    model: str | None
    usage: Usage | None
    cost: float | None = None


class CostTotals(msgspec.Struct, frozen=True, kw_only=True):
    """Summed usage of some model calls; ``cost`` is None when any of them has no price."""

    calls: int = 0
    usage: Usage = msgspec.field(default_factory=Usage)
    cost: float | None = None
    unpriced: int = 0
    """How many of the calls have no price (no table, an unknown model, no usage)."""

    def add(self, call: CallCost) -> CostTotals:
        """These totals with one more call."""
        usage = self.usage + call.usage if call.usage is not None else self.usage
        one = CostTotals(calls=1, usage=Usage(), cost=call.cost, unpriced=int(call.cost is None))
        return msgspec.structs.replace(self.merge(one), usage=usage)

    def merge(self, other: CostTotals) -> CostTotals:
        """The totals of both sets of calls."""
        unpriced = self.unpriced + other.unpriced
        cost = None
        if not unpriced and (self.calls or other.calls):
            cost = (self.cost or 0.0) + (other.cost or 0.0)
        return CostTotals(
            calls=self.calls + other.calls, usage=self.usage + other.usage, cost=cost, unpriced=unpriced
        )


class RunCost(msgspec.Struct, frozen=True, kw_only=True):
    """One run of the tree: its own model calls, and those of the sub-agents below it too."""

    run_id: str
    agent: str
    parent_run_id: str | None
    depth: int
    own: CostTotals
    tree: CostTotals
    children: tuple[str, ...] = ()


class CostReport(msgspec.Struct, frozen=True, kw_only=True):
    """What the given runs cost: ``total`` is the sum of ``calls``, whatever the grouping."""

    total: CostTotals
    runs: tuple[RunCost, ...]
    calls: tuple[CallCost, ...]
    by_agent: dict[str, CostTotals]
    by_model: dict[str, CostTotals]
    tool_shares: tuple[ToolShare, ...]


def _agent(started: RunStarted | None, run_id: str) -> str:
    if started is None:
        return run_id
    return started.agent_name or started.agent_id


def _seen_text(event: Event, detailed: bool) -> str | None:
    """The text the model is sent for a call's outcome, or None if ``event`` is no outcome."""
    if isinstance(event, ToolReturned):
        return result_text(event.result)
    if isinstance(event, MiddlewareShortCircuit):
        return result_text(event.result) if event.call_id is not None else None
    if isinstance(event, ToolFailed | ArgumentsRejected | ToolNotFound):
        return error_text(event, detailed)
    return None


def _run_calls(
    run_id: str, log: Sequence[Event], price: Price | None
) -> tuple[list[CallCost], list[ToolShare]]:
    started = log[0] if log and isinstance(log[0], RunStarted) else None
    agent = _agent(started, run_id)
    detailed = started.config.detailed_errors if started is not None else False
    calls: list[CallCost] = []
    names: dict[str, str] = {}
    batches: list[list[tuple[str, str, int]]] = []  # per model call: the results sent after it
    for event in log:
        if isinstance(event, ModelResponded):
            model = event.model
            if price is None:
                cost = event.cost  # priced while the run went, by the agent's table, if it had one
            else:
                cost = price(model, event.usage, event.at) if model and event.usage else None
            calls.append(
                CallCost(
                    run_id=run_id,
                    seq=event.seq,
                    iteration=event.iteration,
                    at=event.at,
                    agent=agent,
                    model=model,
                    usage=event.usage,
                    cost=cost,
                )
            )
            batches.append([])
            for call in event.message.function_calls:
                names[call.call_id or ""] = call.name or ""
            continue
        text = _seen_text(event, detailed)
        if text is not None and batches:
            call_id = getattr(event, "call_id", None) or ""
            name = names.get(call_id) or str(getattr(event, "name", "") or "")
            batches[-1].append((call_id, name, len(text)))
    shares: list[ToolShare] = []
    for index, batch in enumerate(batches):
        if not batch:
            continue
        after = calls[index + 1] if index + 1 < len(calls) else None
        added = _added(calls[index].usage, after.usage if after else None)
        chars = sum(c for _, _, c in batch) or 1
        seen_by = len(calls) - index - 1
        for call_id, name, size in batch:
            tokens = None if added is None else round(added * size / chars)
            cost = None
            if tokens is not None and price is not None and after is not None and after.model:
                cost = price(after.model, Usage(input_tokens=tokens), after.at)
            shares.append(
                ToolShare(
                    run_id=run_id,
                    call_id=call_id,
                    name=name,
                    chars=size,
                    tokens=tokens,
                    seen_by=seen_by,
                    cost=cost,
                    next_call=after.iteration if after is not None else None,
                )
            )
    return calls, shares


def _added(before: Usage | None, after: Usage | None) -> int | None:
    """The input the messages between two model calls added, less the model's own answer."""
    if before is None or after is None or not before.input_tokens or not after.input_tokens:
        return None
    answer = before.output_tokens - (before.reasoning_tokens or 0)
    return max(after.input_tokens - before.input_tokens - max(answer, 0), 0)


def cost_report(events: Iterable[Event], *, price: Price | None = None) -> CostReport:
    """Fold the events of one or more run trees (as ``show`` reads them: runs in any order,
    each run's events in order) into what they cost. ``RunCycleError`` if runs link in a cycle."""
    runs = group_runs(events)
    check_run_tree(runs)
    per_run: dict[str, list[CallCost]] = {}
    shares: list[ToolShare] = []
    agents: dict[str, str] = {}
    children: dict[str, list[str]] = {run_id: [] for run_id in runs}
    parent_of: dict[str, str] = {}

    def link(parent: str, child: str) -> None:
        if child in runs and child not in parent_of:
            parent_of[child] = parent
            children[parent].append(child)

    for run_id, log in runs.items():
        per_run[run_id], run_shares = _run_calls(run_id, log, price)
        shares.extend(run_shares)
        started = log[0] if log and isinstance(log[0], RunStarted) else None
        agents[run_id] = _agent(started, run_id)
        for event in log:
            if isinstance(event, ChildRunStarted):
                link(run_id, event.child_run_id)
    for run_id, log in runs.items():
        first = log[0] if log else None
        if isinstance(first, RunStarted) and first.parent_run_id in runs:
            link(first.parent_run_id, run_id)
    ordered: list[RunCost] = []

    def place(run_id: str, depth: int) -> CostTotals:
        index = len(ordered)
        own = _summed(per_run[run_id])
        ordered.append(
            RunCost(
                run_id=run_id,
                agent=agents[run_id],
                parent_run_id=parent_of.get(run_id),
                depth=depth,
                own=own,
                tree=own,
                children=tuple(children[run_id]),
            )
        )
        tree = own
        for child in children[run_id]:
            tree = tree.merge(place(child, depth + 1))
        ordered[index] = msgspec.structs.replace(ordered[index], tree=tree)
        return tree

    for run_id in runs:  # the tree is checked: every run has one parent at most, no cycles
        if run_id not in parent_of:
            place(run_id, 0)
    calls = [call for run_id in runs for call in per_run[run_id]]
    by_agent: dict[str, CostTotals] = {}
    by_model: dict[str, CostTotals] = {}
    for call in calls:
        by_agent[call.agent] = by_agent.get(call.agent, CostTotals()).add(call)
        model = call.model or "(unknown)"
        by_model[model] = by_model.get(model, CostTotals()).add(call)
    return CostReport(
        total=_summed(calls),
        runs=tuple(ordered),
        calls=tuple(calls),
        by_agent=by_agent,
        by_model=by_model,
        tool_shares=tuple(shares),
    )


def _summed(calls: Iterable[CallCost]) -> CostTotals:
    totals = CostTotals()
    for call in calls:
        totals = totals.add(call)
    return totals


# -- tools offered against tools used ------------------------------------------------------------


class ToolOffers(msgspec.Struct, frozen=True, kw_only=True):
    """One tool across the given runs: how often it was offered and called, and what its schema
    cost in input tokens (an estimate, see the module docstring)."""

    name: str
    offered: int
    """Model calls that offered it."""
    called: int
    """Calls the models made of it."""
    schema_tokens: int
    """The estimated tokens of its name, description and schema, for one offer."""
    offered_tokens: int
    """``schema_tokens`` times ``offered``."""


def schema_tokens(spec: ToolSpec) -> int:
    """About how many tokens sending ``spec`` to a model costs: its JSON at four characters a token."""
    sent = {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    return len(msgspec.json.encode(sent)) // 4 + 1


def tool_offers(events: Iterable[Event]) -> list[ToolOffers]:
    """Per tool, most offered first: model calls that offered it, calls of it, schema tokens."""
    offered: dict[str, int] = {}
    called: dict[str, int] = {}
    tokens: dict[str, int] = {}
    for log in group_runs(events).values():
        specs: dict[str, ToolSpec] = {}
        for event in log:
            if isinstance(event, RunStarted):
                specs = {s.name: s for s in event.tools}
            elif isinstance(event, ToolsAdded):
                specs.update({s.name: s for s in event.tools})
            elif isinstance(event, ToolsRemoved):
                for name in event.names:
                    specs.pop(name, None)
            elif isinstance(event, ModelCalled):
                for name in event.tools:
                    offered[name] = offered.get(name, 0) + 1
                    spec = specs.get(name)
                    tokens[name] = tokens.get(name, 0) + (schema_tokens(spec) if spec is not None else 0)
            elif isinstance(event, ModelResponded):
                for call in event.message.function_calls:
                    name = call.name or ""
                    called[name] = called.get(name, 0) + 1
    names = sorted({*offered, *called}, key=lambda n: (-offered.get(n, 0), n))
    rows = []
    for name in names:
        times = offered.get(name, 0)
        spent = tokens.get(name, 0)
        rows.append(
            ToolOffers(
                name=name,
                offered=times,
                called=called.get(name, 0),
                schema_tokens=spent // times if times else 0,
                offered_tokens=spent,
            )
        )
    return rows
