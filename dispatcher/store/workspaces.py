"""Workspaces, their phone numbers and their API keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

import asyncpg

from dispatcher.domain import ids
from dispatcher.errors import Conflict, NotFound
from dispatcher.store.database import Connection, Database, Record
from dispatcher.store.key_cache import ApiKey, KeyCache

__all__ = ["ApiKey"]  # with the functions below; ApiKey's home is key_cache

KEY_PREFIX = "dk_"


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


async def create_workspace(db: Database, name: str, *, demo: bool = False) -> str:
    workspace_id = ids.new_id(ids.WORKSPACE)
    async with db.acquire() as conn:
        await conn.execute(
            "INSERT INTO workspaces (id, name, demo) VALUES ($1, $2, $3)", workspace_id, name, demo
        )
    return workspace_id


async def add_number(db: Database, workspace_id: str, number: str) -> str:
    number_id = ids.new_id(ids.NUMBER)
    async with db.acquire() as conn:
        try:
            await conn.execute(
                "INSERT INTO phone_numbers (id, workspace_id, number) VALUES ($1, $2, $3)",
                number_id,
                workspace_id,
                number,
            )
        except asyncpg.ForeignKeyViolationError as exc:
            raise NotFound(f"workspace {workspace_id} does not exist") from exc
        except asyncpg.UniqueViolationError as exc:
            raise Conflict(f"number {number} is already registered") from exc
    return number_id


async def create_key(db: Database, workspace_id: str, scopes: Sequence[str]) -> tuple[str, str]:
    """A new key; returns (key id, key). Only the key's hash is stored."""
    key_id = ids.new_id(ids.API_KEY)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    async with db.acquire() as conn:
        try:
            await conn.execute(
                "INSERT INTO api_keys (id, workspace_id, key_hash, scopes) VALUES ($1, $2, $3, $4)",
                key_id,
                workspace_id,
                hash_key(key),
                sorted(set(scopes)),
            )
        except asyncpg.ForeignKeyViolationError as exc:
            raise NotFound(f"workspace {workspace_id} does not exist") from exc
    return key_id, key


async def revoke_key(db: Database, key_id: str, cache: KeyCache | None = None) -> None:
    """Revoke a key. The trigger on api_keys tells every process to forget the keys it keeps;
    this process's `cache` forgets them before this returns, whatever the notification does."""
    async with db.acquire() as conn:
        done = await conn.fetchval(
            "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 "
            "RETURNING id",
            key_id,
        )
    if cache is not None:
        cache.clear()
    if done is None:
        raise NotFound(f"key {key_id} does not exist")


async def find_key(db: Database, key: str, cache: KeyCache | None = None) -> ApiKey | None:
    """The live key with this value, or None. Looked up by hash; compared in constant time.
    With a `cache`, a key found valid is kept there until any key changes (key_cache.py)."""
    digest = hash_key(key)
    if cache is not None:
        cached = cache.get(digest)
        if cached is not None:
            return cached
        generation = cache.generation
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT id, workspace_id, key_hash, scopes FROM api_keys "
            "WHERE key_hash = $1 AND revoked_at IS NULL",
            digest,
        )
    if row is None or not hmac.compare_digest(bytes(row["key_hash"]), digest):
        return None
    found = ApiKey(row["id"], row["workspace_id"], frozenset(row["scopes"]))
    if cache is not None:
        cache.put(digest, found, generation)
    return found


async def find_number(conn: Connection, workspace_id: str, ref: str) -> Record | None:
    """A workspace's number by its id (`PN…`) or its E.164 form."""
    column = "id" if ref.startswith(ids.NUMBER) else "number"
    row: Record | None = await conn.fetchrow(
        f"SELECT id, number FROM phone_numbers WHERE workspace_id = $1 AND {column} = $2",
        workspace_id,
        ref,
    )
    return row


async def missing_numbers(
    conn: Connection, workspace_id: str, number_ids: Sequence[str]
) -> list[str]:
    """Those of `number_ids` that are not the workspace's numbers."""
    rows = await conn.fetch(
        "SELECT id FROM phone_numbers WHERE workspace_id = $1 AND id = ANY($2::text[])",
        workspace_id,
        list(number_ids),
    )
    found = {r["id"] for r in rows}
    return [n for n in number_ids if n not in found]


async def create_demo_if_empty(db: Database, number: str, scopes: Sequence[str]) -> str | None:
    """On an empty database, a demo workspace with one number and a key; returns the key.

    Runs under an advisory lock so that replicas starting together make one demo, once.
    """
    async with db.transaction() as conn:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('dispatcher-demo'))")
        if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM workspaces)"):
            return None
        workspace_id = ids.new_id(ids.WORKSPACE)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        await conn.execute(
            "INSERT INTO workspaces (id, name, demo) VALUES ($1, 'Demo', true)", workspace_id
        )
        await conn.execute(
            "INSERT INTO phone_numbers (id, workspace_id, number) VALUES ($1, $2, $3)",
            ids.new_id(ids.NUMBER),
            workspace_id,
            number,
        )
        await conn.execute(
            "INSERT INTO api_keys (id, workspace_id, key_hash, scopes) VALUES ($1, $2, $3, $4)",
            ids.new_id(ids.API_KEY),
            workspace_id,
            hash_key(key),
            sorted(scopes),
        )
    return key


async def instance_secret(db: Database, name: str) -> bytes:
    """A random secret shared by every replica (made by whichever starts first)."""
    async with db.acquire() as conn:
        await conn.execute(
            "INSERT INTO instance_secrets (name, value) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            name,
            secrets.token_bytes(32),
        )
        value: bytes = await conn.fetchval(
            "SELECT value FROM instance_secrets WHERE name = $1", name
        )
    return bytes(value)
