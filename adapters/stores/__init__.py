"""Event stores beyond memory: JSONL files, SQLite, PostgreSQL.

Each store is also importable from here, its module imported on first use (PostgreSQL's needs
``psycopg``: ``pip install 'agentledger[postgres]'``)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .jsonl import JsonlEventStore
    from .postgres import PostgresEventStore
    from .sqlite import SqliteEventStore

__all__ = (
    "JsonlEventStore",
    "PostgresEventStore",
    "SqliteEventStore",
)

_HOMES = {
    "JsonlEventStore": "jsonl",
    "PostgresEventStore": "postgres",
    "SqliteEventStore": "sqlite",
}
"""Where each name lives: its module is imported on first use, so an optional dependency
is needed only by the adapter that uses it."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
