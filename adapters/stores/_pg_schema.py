"""The PostgreSQL store's schema: its migrations, applying them once per schema, and the appends' statements.

``schema_version`` records each migration applied. On first use a store applies the migrations it
knows beyond the recorded version, in one transaction under an advisory lock, so several processes
starting at once apply each migration exactly once; a schema newer than this code is refused.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from agentledger.errors import StoreError

__all__ = (
    "GROUP_INSERT",
    "GROUP_NOTIFY",
    "GROUP_STREAMS",
    "GROUP_VERSIONS",
    "INSERT_AT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Migration",
    "inspect",
    "upgrade",
)


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

# One batch at a given seq, only if the row before it exists (a stream never has a gap).
INSERT_AT = """INSERT INTO {schema}.events (stream, seq, type, data)
SELECT %(stream)s, %(start)s + t.ord - 1, t.type, t.data::json
FROM unnest(%(types)b::text[], %(data)b::text[]) WITH ORDINALITY AS t(type, data, ord)
WHERE %(start)s = 0 OR EXISTS (
    SELECT 1 FROM {schema}.events WHERE stream = %(stream)s AND seq = %(start)s - 1
)
ORDER BY t.ord"""
# A group's batches, checked against the versions read under the append lock: one statement each.
# Arrays go as binary parameters (``%b``): as text each element would be quoted and escaped.
GROUP_VERSIONS = "SELECT stream, max(seq) + 1 FROM {schema}.events WHERE stream = ANY(%b) GROUP BY stream"
GROUP_STREAMS = """INSERT INTO {schema}.streams (name)
SELECT t.name FROM unnest(%b::text[]) WITH ORDINALITY AS t(name, ord) ORDER BY t.ord
ON CONFLICT (name) DO NOTHING"""
GROUP_INSERT = """INSERT INTO {schema}.events (stream, seq, type, data)
SELECT t.stream, t.seq, t.type, t.data::json
FROM unnest(%b::text[], %b::integer[], %b::text[], %b::text[]) WITH ORDINALITY
    AS t(stream, seq, type, data, ord)
ORDER BY t.ord"""
GROUP_NOTIFY = "SELECT pg_notify(%s, t.name) FROM unnest(%b::text[]) AS t(name)"


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
    """Create the schema or bring it to ``SCHEMA_VERSION``; ``label`` names the store in errors.

    A schema already at ``SCHEMA_VERSION`` is seen with one query and left as it is (a migration
    records its version in the transaction that applies it, so that version means the schema is
    whole); any other answer, or none, takes the lock and the transaction below.
    """
    try:
        if await _current(connection, schema) == SCHEMA_VERSION:
            return
    except psycopg.errors.UndefinedTable:  # no schema or no version table yet: created below
        pass
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


async def inspect(connection: psycopg.AsyncConnection[Any], schema: str, label: str) -> bool:
    """Whether the schema holds an event store this code reads, without creating or changing
    anything (a read-only store): False when there is none yet; ``StoreError`` for a schema of
    another version."""
    cursor = await connection.execute("SELECT to_regclass(%s)", (f'"{schema}".schema_version',))
    row = await cursor.fetchone()
    if row is None or row[0] is None:
        return False
    current = await _current(connection, schema)
    if current > SCHEMA_VERSION:
        raise StoreError(
            f"{label}: the schema is at version {current}, newer than this code knows "
            f"({SCHEMA_VERSION}); upgrade agentledger"
        )
    if current < SCHEMA_VERSION:
        raise StoreError(
            f"{label}: the schema is at version {current}; open it once writable to migrate it "
            f"to version {SCHEMA_VERSION}"
        )
    return True
