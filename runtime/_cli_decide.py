"""``agentledger approve`` and ``agentledger reject``: a person's answer to waiting calls.

Both carry out ``agentledger.decisions.decide``: the paused run is resumed by the agent the
factory builds (``--agent module:name``, the demo agent by default), on the session rebuilt from
the store, through the claim every resume appends. ``CALL`` may be given several times; ``--all``
answers every call the run waits on. Refusals (a call that does not wait, a batch decided
elsewhere, arguments other than ``--arguments``) are one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable

import anyio
import msgspec

from ._cli_checks import UsageError
from ._cli_replay import load_agent
from ._cli_runs import resolve_run
from .core.claims import paused_batch
from .decisions import Answer, DecisionResult, decide
from .store import EventStore

__all__ = ("add_decisions",)

OpenStore = Callable[..., EventStore]


def _answers(args: argparse.Namespace, waiting: tuple[str, ...]) -> tuple[Answer, ...]:
    calls = list(waiting) if args.all else list(dict.fromkeys(args.call))
    if not calls and waiting:
        raise UsageError(
            f"name the calls to {args.command} (run {args.run} waits on {', '.join(waiting)}), or --all"
        )
    if args.arguments is not None and len(calls) != 1:
        raise UsageError("--arguments checks one call: name exactly one")
    expected = msgspec.json.decode(args.arguments) if args.arguments is not None else None
    approved = args.command == "approve"
    return tuple(
        Answer(call_id=c, approved=approved, reason=args.reason, expected_arguments=expected) for c in calls
    )


def _print(result: DecisionResult, as_json: bool) -> None:
    if as_json:
        print(msgspec.json.encode(result).decode())
        return
    for answer in result.answers:
        said = f": {answer.reason}" if answer.reason else ""
        print(f"run {result.run_id}: {answer.call_id} {'approved' if answer.approved else 'rejected'}{said}")
    print(f"resumed by run {result.resumed_by}: {result.finish_reason}: {result.text!r}")


def add_decisions(
    command: Callable[..., argparse.ArgumentParser], open_store: OpenStore, default_agent: str
) -> None:
    """Register ``approve`` and ``reject`` with the command line's ``command`` helper."""

    def handler(args: argparse.Namespace) -> int:
        if args.command == "reject" and not (args.reason or "").strip():
            raise UsageError("reject needs --reason: say why, for the record")
        if args.arguments is not None:
            try:
                msgspec.json.decode(args.arguments)
            except msgspec.DecodeError as exc:
                raise UsageError(f"--arguments is not JSON: {exc}") from exc
        open_store(args.store)  # the store must exist: a decision never creates one
        store = open_store(args.store, create=True)
        warnings.simplefilter("ignore", FutureWarning)

        async def go() -> DecisionResult:
            from .replay import load

            args.run = await resolve_run(store, args.run)
            batch = paused_batch(await store.read(args.run))
            answers = _answers(args, batch.awaiting)
            agent = load_agent(args.agent or default_agent, await load(store, args.run))
            return await decide(store, agent, args.run, answers)

        _print(anyio.run(go), args.json)
        return 0

    for verb, help in (
        ("approve", "approve calls a run waits on, and resume the run through its claim"),
        ("reject", "reject calls a run waits on (with --reason), and resume the run through its claim"),
    ):
        sub = command(verb, handler, help)
        sub.add_argument("run", help="the paused run's id, or a unique prefix of it")
        sub.add_argument("call", nargs="*", help="the call ids to answer (every call of the batch must be)")
        sub.add_argument("--all", action="store_true", help="answer every call the run waits on")
        sub.add_argument("--reason", help="why (required to reject), kept on ApprovalResolved")
        sub.add_argument(
            "--arguments", metavar="JSON", help="refuse unless the call's arguments are these (one call)"
        )
        sub.add_argument("--agent", help=f"module:name of the Agent or its factory (default {default_agent})")
        sub.add_argument("--json", action="store_true", help="one JSON object: the decision and its resume")
