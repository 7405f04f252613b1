"""Workspaces, their phone numbers and their API keys. Statements in queries/workspaces.sql."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from dispatcher.domain import ids
from dispatcher.errors import Conflict, NotFound
from dispatcher.store.database import Database
from dispatcher.store.key_cache import ApiKey, KeyCache
from dispatcher.store.queries import Queries

__all__ = ["ApiKey"]  # with the functions below; ApiKey's home is key_cache

KEY_PREFIX = "dk_"


class SQL(Queries, file="workspaces.sql"):
    insert_workspace: str
    insert_number: str
    insert_key: str
    revoke_key: str
    live_key: str
    find_numbers: str
    lock_demo: str
    any_workspace: str
    offer_instance_secret: str
    instance_secret: str


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


async def create_workspace(db: Database, name: str, *, demo: bool = False) -> str:
    workspace_id = ids.new_id(ids.WORKSPACE)
    async with db.acquire() as conn:
        await conn.execute(SQL.insert_workspace, workspace_id, name, demo)
    return workspace_id


async def add_number(db: Database, workspace_id: str, number: str) -> str:
    number_id = ids.new_id(ids.NUMBER)
    async with db.acquire() as conn:
        try:
            await conn.execute(SQL.insert_number, number_id, workspace_id, number)
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
                SQL.insert_key, key_id, workspace_id, hash_key(key), sorted(set(scopes))
            )
        except asyncpg.ForeignKeyViolationError as exc:
            raise NotFound(f"workspace {workspace_id} does not exist") from exc
    return key_id, key


async def revoke_key(db: Database, key_id: str, cache: KeyCache | None = None) -> None:
    """Revoke a key. The trigger on api_keys tells every process to forget the keys it keeps;
    this process's `cache` forgets them before this returns, whatever the notification does."""
    async with db.acquire() as conn:
        done = await conn.fetchval(SQL.revoke_key, key_id)
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
        row = await conn.fetchrow(SQL.live_key, digest)
    if row is None or not hmac.compare_digest(bytes(row["key_hash"]), digest):
        return None
    found = ApiKey(row["id"], row["workspace_id"], frozenset(row["scopes"]))
    if cache is not None:
        cache.put(digest, found, generation)
    return found


@dataclass(frozen=True)
class PhoneNumber:
    """One of a workspace's numbers: its id (`PN…`) and its E.164 form."""

    id: str
    number: str


async def find_numbers(
    db: Database, workspace_id: str, refs: Sequence[str], *, e164: bool = False
) -> dict[str, PhoneNumber]:
    """The one answer to "are these the workspace's numbers?": those of `refs` that are,
    keyed by the ref that named them; a ref that is not (or is another workspace's) is absent.

    A ref is a number's id; with `e164`, a ref may also be the number in E.164 form (where the
    interface takes either, as a message's `from`). Ids and E.164 forms never look alike
    (`PN…` against `+…`), so one statement matches both.
    """
    async with db.acquire() as conn:
        rows = await conn.fetch(SQL.find_numbers, workspace_id, list(refs), e164)
    found: dict[str, PhoneNumber] = {}
    for row in rows:
        number = PhoneNumber(row["id"], row["number"])
        found[number.id] = number
        if e164:
            found[number.number] = number
    return {ref: found[ref] for ref in refs if ref in found}


async def create_demo_if_empty(db: Database, number: str, scopes: Sequence[str]) -> str | None:
    """On an empty database, a demo workspace with one number and a key; returns the key.

    Runs under an advisory lock so that replicas starting together make one demo, once.
    """
    async with db.transaction() as conn:
        await conn.execute(SQL.lock_demo)
        if await conn.fetchval(SQL.any_workspace):
            return None
        workspace_id = ids.new_id(ids.WORKSPACE)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        await conn.execute(SQL.insert_workspace, workspace_id, "Demo", True)
        await conn.execute(SQL.insert_number, ids.new_id(ids.NUMBER), workspace_id, number)
        await conn.execute(
            SQL.insert_key, ids.new_id(ids.API_KEY), workspace_id, hash_key(key), sorted(scopes)
        )
    return key


async def instance_secret(db: Database, name: str) -> bytes:
    """A random secret shared by every replica (made by whichever starts first)."""
    async with db.acquire() as conn:
        await conn.execute(SQL.offer_instance_secret, name, secrets.token_bytes(32))
        value: bytes = await conn.fetchval(SQL.instance_secret, name)
    return bytes(value)
