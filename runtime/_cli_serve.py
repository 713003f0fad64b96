"""``agentledger serve``: the web UI over a store (``agentledger.adapters.serve``).

Read-only unless ``--allow-decisions``; then the store is opened for writing and each decision
is carried on by the agent ``--agent`` builds (as ``approve`` does). Loopback by default; the
write token is printed at start, in the address to open.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable

from ._cli_checks import UsageError
from ._cli_replay import load_agent
from .agent import Agent
from .store import EventStore

__all__ = ("add_serve",)

OpenStore = Callable[..., EventStore]


def add_serve(
    command: Callable[..., argparse.ArgumentParser], open_store: OpenStore, default_agent: str
) -> None:
    """Register ``serve`` with the command line's ``command`` helper."""

    def handler(args: argparse.Namespace) -> int:
        try:
            from agentledger.adapters.serve import host_is_loopback, new_token, serve
        except ImportError as exc:
            raise UsageError(
                f"agentledger serve needs the serve extra ({exc.name} is missing): "
                "pip install 'agentledger[serve]'"
            ) from exc
        if not 0 <= args.port <= 65535:
            raise UsageError(f"--port must be 0 to 65535, not {args.port}")
        if args.poll_interval <= 0:
            raise UsageError("--poll-interval must be more than 0 seconds")
        store = open_store(args.store)
        spec = args.agent or default_agent
        agent_for = None
        if args.allow_decisions:
            store = open_store(args.store, create=True)
            warnings.simplefilter("ignore", FutureWarning)

            async def agent_for(run_id: str) -> Agent:
                from .replay import load

                built: Agent = load_agent(spec, await load(store, run_id))
                return built

        mode = f"decisions allowed (agent {spec})" if args.allow_decisions else "read-only"
        print(f"agentledger serve: {args.store or 'the default store'}, {mode}", flush=True)
        if not host_is_loopback(args.host):
            print(
                f"agentledger: warning: serving on {args.host}: whoever reaches it can read the store; "
                "decisions are accepted from loopback pages only",
                file=sys.stderr,
            )
        token = new_token()

        def ready(address: str) -> None:
            print(f"open {address}", flush=True)
            print(f"write token: {token}", flush=True)

        try:
            serve(
                store,
                host=args.host,
                port=args.port,
                token=token,
                agent_for=agent_for,
                on_ready=ready,
                poll_interval=args.poll_interval,
            )
        except KeyboardInterrupt:  # Ctrl-C (or SIGINT), after uvicorn has shut down gracefully
            print("agentledger serve: stopped", flush=True)
        except OSError as exc:
            raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
        return 0

    help = "serve a local web UI over the store: runs, a run, diffs, the approvals inbox"
    sub = command("serve", handler, help)
    sub.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sub.add_argument(
        "--port", type=int, default=8321, help="port to listen on (0: any free one; default 8321)"
    )
    sub.add_argument(
        "--allow-decisions",
        action="store_true",
        help="let the approvals inbox approve and reject (each write needs the token printed at start)",
    )
    sub.add_argument(
        "--agent", help=f"module:name of the Agent or its factory for decisions (default {default_agent})"
    )
    sub.add_argument(
        "--poll-interval", type=float, default=1.0, help="seconds between looks at a store that cannot notify"
    )
