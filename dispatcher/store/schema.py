"""Applying schema.sql: idempotent, serialised across replicas by an advisory lock."""

from __future__ import annotations

import sys
from pathlib import Path

from dispatcher.store.database import Database

# The version schema.sql records at its bottom; a database at another version is brought to
# this one by applying the file again (2: events.request_fingerprint).
SCHEMA_VERSION = 2
_LOCK_KEY = 0x64697370  # "disp"


def schema_path() -> Path:
    """schema.sql at the repository root, or where a wheel install put it."""
    candidates = [
        Path(__file__).resolve().parents[2] / "schema.sql",
        Path(sys.prefix) / "share" / "dispatcher" / "schema.sql",
    ]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise FileNotFoundError("schema.sql not found in " + ", ".join(map(str, candidates)))


async def apply_schema(db: Database, *, force: bool = False) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version now recorded.

    A database already at this version is left alone (unless forced, as `dispatcher migrate`
    does): re-running DDL under live traffic from other replicas takes table locks for nothing
    and can deadlock with them.
    """
    sql = schema_path().read_text()
    async with db.transaction() as conn:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        current = None
        if await conn.fetchval("SELECT to_regclass('dispatcher_schema') IS NOT NULL"):
            current = await conn.fetchval("SELECT max(version) FROM dispatcher_schema")
        if current == SCHEMA_VERSION and not force:
            return SCHEMA_VERSION
        await conn.execute(sql)
        version: int = await conn.fetchval("SELECT max(version) FROM dispatcher_schema")
    return version


async def current_version(db: Database) -> int | None:
    async with db.acquire() as conn:
        exists = await conn.fetchval("SELECT to_regclass('dispatcher_schema') IS NOT NULL")
        if not exists:
            return None
        version: int | None = await conn.fetchval("SELECT max(version) FROM dispatcher_schema")
        return version
