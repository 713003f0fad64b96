"""``agentledger serve``: a local web UI over an event store, as an ASGI app (Starlette).

Theory of operation. Every page is read from the store when it is asked for, through the same
public seams the command line uses: the runs list through the store's listing (``list_runs``,
never a full read), a run through ``agentledger.replay.load`` and the HTML viewer's
``render_html``, a diff through ``agentledger.replay.diff_runs``, the inbox through
``agentledger.decisions.waiting_calls``. Open pages learn of changes by server-sent events from
one ``ChangeFeed`` per app (LISTEN/NOTIFY on PostgreSQL, polling elsewhere).

A decision (``POST /api/decisions``) is ``agentledger.decisions.decide``: the claim appended to
the paused run's log decides, in the store, that it and any resume elsewhere never both run a
call. Writes pass ``_guard.refuse_write`` first (decisions allowed, a loopback origin, the
token); every request passes ``_guard.refuse_read`` (a loopback ``Host`` when bound to loopback).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlencode

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentledger.adapters.export.html import render_html
from agentledger.agent import Agent
from agentledger.core.events import Event
from agentledger.decisions import Answer, decide, waiting_calls
from agentledger.errors import (
    AgentLedgerError,
    ApprovalError,
    ApprovalMismatchError,
    CallNotWaitingError,
    DecidedElsewhereError,
    LogCorruptError,
    RunNotFoundError,
)
from agentledger.replay import load
from agentledger.store import EventStore

from ._diff import diff_rows
from ._guard import refuse_read, refuse_write
from ._live import ChangeFeed, watching
from ._pages import approvals_page, diff_page, error_page, policy, runs_page_html
from ._queries import FilterError, Filters, runs_page

__all__ = ("AgentFor", "create_app")

AgentFor = Callable[[str], Awaitable[Agent]]
"""Builds the agent that carries a decided run on, given the paused run's id."""

PAGE_SIZE = 50
KEEPALIVE = 15.0
_log = logging.getLogger("agentledger.serve")


class _DecisionBody(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    answers: tuple[Answer, ...]
    reason: str = ""


_decode_body = msgspec.json.Decoder(_DecisionBody)


class _Guard:
    """Refuses requests to names other than loopback ones, and adds the pages' headers."""

    def __init__(self, app: ASGIApp, *, bound_to_loopback: bool) -> None:
        self.app = app
        self.bound_to_loopback = bound_to_loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refused = refuse_read(headers, bound_to_loopback=self.bound_to_loopback)
        if refused is not None:
            await PlainTextResponse(refused, status_code=403)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                    (b"cache-control", b"no-store"),
                ]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _page(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={"content-security-policy": policy()})


class _Handlers:
    def __init__(self, store: EventStore, feed: ChangeFeed, agent_for: AgentFor | None, token: str) -> None:
        self.store = store
        self.feed = feed
        self.agent_for = agent_for
        self.token = token

    @property
    def decisions(self) -> bool:
        return self.agent_for is not None

    async def runs(self, request: Request) -> Response:
        params = dict(request.query_params.items())
        try:
            page = max(int(params.get("page", "1") or 1), 1)
            filters = Filters.parse(params)
        except (ValueError, FilterError) as exc:
            return _page(
                runs_page_html(None, params, 1, decisions=self.decisions, error=str(exc)), 400
            )
        listing = await runs_page(self.store, filters, offset=(page - 1) * PAGE_SIZE, size=PAGE_SIZE)
        return _page(runs_page_html(listing, params, page, decisions=self.decisions))

    async def runs_json(self, request: Request) -> Response:
        params = dict(request.query_params.items())
        try:
            page = max(int(params.get("page", "1") or 1), 1)
            filters = Filters.parse(params)
        except (ValueError, FilterError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        listing = await runs_page(self.store, filters, offset=(page - 1) * PAGE_SIZE, size=PAGE_SIZE)
        return Response(msgspec.json.encode(listing), media_type="application/json")

    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            recorded = await load(self.store, run_id)
        except RunNotFoundError:
            return _page(
                error_page(
                    "No such run", f"the store has no run {run_id!r}", decisions=self.decisions
                ),
                404,
            )
        except LogCorruptError as exc:
            return _page(error_page("Unreadable run", str(exc), decisions=self.decisions), 500)
        events: list[Event] = [e for _, run in recorded.walk() for e in run.events]
        diff = "/diff?" + urlencode({"a": run_id})
        nav = [("/", "← Runs"), ("/approvals", "Approvals"), (diff, "Diff with…")]
        page = render_html(events, prior=recorded.prior, nav=nav)
        return HTMLResponse(page)  # the viewer's own Content-Security-Policy is in its <meta>

    async def approvals(self, request: Request) -> Response:
        calls = await waiting_calls(self.store, limit=200)
        return _page(approvals_page(calls, decisions=self.decisions))

    async def diff(self, request: Request) -> Response:
        a, b = request.query_params.get("a", "").strip(), request.query_params.get("b", "").strip()
        if not (a and b):
            return _page(diff_page(a, b, None, decisions=self.decisions))
        logs = []
        for run_id in (a, b):
            events = await self.store.read(run_id)
            if not events:
                return _page(
                    diff_page(
                        a, b, None, decisions=self.decisions, error=f"the store has no run {run_id!r}"
                    ),
                    404,
                )
            logs.append(events)
        return _page(diff_page(a, b, diff_rows(logs[0], logs[1]), decisions=self.decisions))

    async def events(self, request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            with self.feed.subscription() as subscription:
                # Hello once a change made from now on is sure to be pushed (bounded: a store
                # that cannot be read still gets its page an answer, and keepalives).
                await self.feed.ready(subscription, KEEPALIVE)
                yield f"retry: 2000\nevent: hello\ndata: {self.feed.version}\n\n"
                while True:
                    if await subscription.next(KEEPALIVE):
                        yield f"event: changed\ndata: {self.feed.version}\n\n"
                    else:
                        yield ": keepalive\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
        )

    async def decide(self, request: Request) -> Response:
        refused = refuse_write(dict(request.headers.items()), token=self.token, allowed=self.decisions)
        if refused is not None:
            return JSONResponse({"error": refused}, status_code=403)
        try:
            body = _decode_body.decode(await request.body())
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return JSONResponse({"error": f"the decision does not read: {exc}"}, status_code=400)
        reason = body.reason.strip() or None
        if any(not a.approved for a in body.answers) and reason is None:
            return JSONResponse({"error": "a rejection needs a reason"}, status_code=422)
        answers = tuple(msgspec.structs.replace(a, reason=reason) for a in body.answers)
        assert self.agent_for is not None
        try:
            agent = await self.agent_for(body.run_id)
            result = await decide(self.store, agent, body.run_id, answers)
        except RunNotFoundError as exc:
            return _refused(exc, 404)
        except DecidedElsewhereError as exc:
            return _refused(exc, 409)
        except (CallNotWaitingError, ApprovalMismatchError, ApprovalError) as exc:
            return _refused(exc, 422)
        except AgentLedgerError as exc:
            return _refused(exc, 500)
        self.feed.changed()
        return Response(msgspec.json.encode(result), media_type="application/json")


def _refused(exc: Exception, status: int) -> JSONResponse:
    text = " ".join(str(exc).split())
    return JSONResponse({"error": text, "type": type(exc).__name__}, status_code=status)


def create_app(
    store: EventStore,
    *,
    token: str,
    agent_for: AgentFor | None = None,
    bound_to_loopback: bool = True,
    poll_interval: float = 1.0,
) -> ASGIApp:
    """The web UI over ``store``. Decisions are allowed only with ``agent_for``; each needs
    ``token`` (``X-Agentledger-Token``). ``poll_interval`` paces the live updates of a store
    that cannot notify (every store but PostgreSQL)."""
    feed = ChangeFeed(store, interval=poll_interval)
    handlers = _Handlers(store, feed, agent_for, token)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with watching(feed):
            yield

    routes = [
        Route("/", handlers.runs),
        Route("/api/runs", handlers.runs_json),
        Route("/runs/{run_id:path}", handlers.run),
        Route("/approvals", handlers.approvals),
        Route("/diff", handlers.diff),
        Route("/events", handlers.events),
        Route("/api/decisions", handlers.decide, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.feed = feed
    return _Guard(app, bound_to_loopback=bound_to_loopback)
