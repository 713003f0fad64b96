"""The PostgreSQL store's schema: its migrations, and applying them once per schema.

``schema_version`` records each migration applied. On first use a store applies the migrations it
knows beyond the recorded version, in one transaction under an advisory lock, so several processes
starting at once apply each migration exactly once; a schema newer than this code is refused.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from agentledger.errors import StoreError

__all__ = ("MIGRATIONS", "SCHEMA_VERSION", "Migration", "upgrade")


class Migration(NamedTuple):
    """One step of the schema; ``statements`` name the schema as ``{schema}``."""

    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "streams in creation order, events keyed by (stream, seq)",
        (
            """CREATE TABLE {schema}.streams (
                position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                name text NOT NULL UNIQUE,
                created_at timestamptz NOT NULL DEFAULT now()
            )""",
            """CREATE TABLE {schema}.events (
                stream text NOT NULL,
                seq integer NOT NULL,
                position bigint GENERATED ALWAYS AS IDENTITY,
                type text NOT NULL,
                data json NOT NULL,
                PRIMARY KEY (stream, seq)
            )""",
            "CREATE UNIQUE INDEX events_by_position ON {schema}.events (position)",
        ),
    ),
    Migration(
        2,
        "outcomes of tool calls by idempotency key",
        (
            """CREATE TABLE {schema}.call_outcomes (
                key text PRIMARY KEY,
                attempts integer NOT NULL,
                outcome bytea,
                claimed_at timestamptz NOT NULL DEFAULT now(),
                completed_at timestamptz
            )""",
        ),
    ),
)
"""Every migration, oldest first. Add new ones at the end; never edit one that has shipped."""

SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this code writes and reads."""

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS {schema}.schema_version (
    version integer PRIMARY KEY,
    description text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


def _sql(template: str, schema: str) -> sql.Composed:
    return sql.SQL(template).format(schema=sql.Identifier(schema))


async def _current(connection: psycopg.AsyncConnection[Any], schema: str) -> int:
    query = _sql("SELECT coalesce(max(version), 0) FROM {schema}.schema_version", schema)
    cursor = await connection.execute(query)
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def upgrade(connection: psycopg.AsyncConnection[Any], schema: str, lock_key: int, label: str) -> None:
    """Create the schema or bring it to ``SCHEMA_VERSION``; ``label`` names the store in errors."""
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
        await connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        await connection.execute(_sql(_VERSION_TABLE, schema))
        current = await _current(connection, schema)
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"{label}: the schema is at version {current}, newer than this code knows "
                f"({SCHEMA_VERSION}); upgrade agentledger"
            )
        record = _sql("INSERT INTO {schema}.schema_version (version, description) VALUES (%s, %s)", schema)
        for migration in MIGRATIONS:
            if migration.version > current:
                for statement in migration.statements:
                    await connection.execute(_sql(statement, schema))
                await connection.execute(record, (migration.version, migration.description))
