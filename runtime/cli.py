"""The ``agentledger`` command."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

import anyio

from . import __version__
from .errors import AgentLedgerError

__all__ = ("main",)


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    from .timeline import timeline

    warnings.simplefilter("ignore", FutureWarning)  # the demo uses experimental add_tools
    response, session = anyio.run(run_demo)
    print(response.text)
    print()
    print(f"run {response.run_id}: {len(response.events)} events")
    print(timeline(response.events))
    print()
    print(f"session {session.session_id} state: {session.state.snapshot()}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentledger", description="Event-sourced LLM agent runs.")
    parser.add_argument("--version", action="version", version=f"agentledger {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a scripted agent and print its answer and events")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except AgentLedgerError as exc:
        print(f"agentledger: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the output was piped into a reader that stopped early
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
