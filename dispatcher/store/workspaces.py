"""Workspaces, their phone numbers and their API keys. Statements in queries/workspaces.sql.

The CLI (`dispatcher workspaces | numbers | keys`) and the admin API (api/admin.py) both go
through these functions: one set of rules (a number belongs to one workspace, a key is stored
as its hash, a revocation reaches every replica at once) whichever door is used.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from dispatcher.domain import ids
from dispatcher.domain.endpoints import EndpointOptions
from dispatcher.errors import Conflict, NotFound
from dispatcher.store import webhooks
from dispatcher.store.database import Connection, Database, fetch_one
from dispatcher.store.key_cache import ApiKey, KeyCache
from dispatcher.store.pages import Page, Position, fetch_page, paging
from dispatcher.store.queries import Queries, Statement
from dispatcher.store.rows import ApiKeyRow, PhoneNumberRow, WorkspaceRow, as_row, fetch_row

__all__ = ["ApiKey"]  # with the functions below; ApiKey's home is key_cache

KEY_PREFIX = "dk_"


class SQL(Queries, file="workspaces.sql"):
    insert_workspace: Statement
    workspace: Statement
    workspaces_page: Statement
    demo_workspace: Statement
    insert_number: Statement
    numbers_page: Statement
    insert_key: Statement
    keys_page: Statement
    revoke_key: Statement
    live_key: Statement
    find_numbers: Statement
    lock_demo: Statement
    any_workspace: Statement
    offer_instance_secret: Statement
    instance_secret: Statement


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


async def insert_workspace(db: Database, name: str, *, demo: bool = False) -> WorkspaceRow:
    """A new workspace: its id, name and creation time."""
    async with db.acquire() as conn:
        row = await fetch_one(
            conn, SQL.insert_workspace(id=ids.new_id(ids.WORKSPACE), name=name, demo=demo)
        )
    return as_row(WorkspaceRow, row)


async def create_workspace(db: Database, name: str, *, demo: bool = False) -> str:
    """A new workspace's id."""
    return (await insert_workspace(db, name, demo=demo)).id


async def get_workspace(db: Database, workspace_id: str) -> WorkspaceRow | None:
    return await fetch_row(db, SQL.workspace(workspace_id=workspace_id), WorkspaceRow)


async def list_workspaces(
    db: Database, *, limit: int, after: Position | None
) -> Page[WorkspaceRow]:
    page = SQL.workspaces_page(**paging(after, limit))
    return await fetch_page(db, page, WorkspaceRow, limit)


async def _require_workspace(conn: Connection, workspace_id: str) -> None:
    if await conn.fetchrow(*SQL.workspace(workspace_id=workspace_id)) is None:
        raise NotFound(f"workspace {workspace_id} does not exist")


async def insert_number(db: Database, workspace_id: str, number: str) -> PhoneNumberRow:
    """Register `number` (E.164, checked by the caller) to the workspace. A number belongs to
    one workspace at most: registered anywhere already (this workspace included), Conflict.
    The operator sink's workspace is NotFound, as a missing one: nobody's to change."""
    async with db.acquire() as conn:
        try:
            row = await conn.fetchrow(
                *SQL.insert_number(
                    id=ids.new_id(ids.NUMBER), workspace_id=workspace_id, number=number
                )
            )
        except asyncpg.UniqueViolationError as exc:
            raise Conflict(f"number {number} is already registered") from exc
    if row is None:
        raise NotFound(f"workspace {workspace_id} does not exist")
    return as_row(PhoneNumberRow, row)


async def add_number(db: Database, workspace_id: str, number: str) -> str:
    """The new number's id (see `insert_number`)."""
    return (await insert_number(db, workspace_id, number)).id


async def list_numbers(
    db: Database, workspace_id: str, *, limit: int, after: Position | None
) -> Page[PhoneNumberRow]:
    """A page of the workspace's numbers; NotFound when there is no such workspace."""
    async with db.acquire() as conn:
        await _require_workspace(conn, workspace_id)
        page = SQL.numbers_page(workspace_id=workspace_id, **paging(after, limit))
        return await fetch_page(conn, page, PhoneNumberRow, limit)


async def insert_key(
    db: Database,
    workspace_id: str,
    scopes: Sequence[str],
    name: str | None = None,
    webhook_id: str | None = None,
) -> tuple[ApiKeyRow, str]:
    """A new key: its row (no hash) and the key itself, which is not stored (only its hash
    is) and so can be shown this once. The operator sink's workspace is NotFound, as a
    missing one: a key there would read every tenant's operational events. `webhook_id`:
    the webhook its `webhooks:poll` scope is limited to; not a webhook of the workspace
    (deleted ones are not) is a Conflict."""
    key = new_key()
    async with db.acquire() as conn:
        if webhook_id is not None and not await webhooks.exists(conn, workspace_id, webhook_id):
            await _require_workspace(conn, workspace_id)
            raise Conflict(f"webhook {webhook_id} is not a webhook of workspace {workspace_id}")
        row = await conn.fetchrow(
            *SQL.insert_key(
                id=ids.new_id(ids.API_KEY),
                workspace_id=workspace_id,
                digest=hash_key(key),
                scopes=sorted(set(scopes)),
                name=name,
                webhook_id=webhook_id,
            ),
        )
    if row is None:
        raise NotFound(f"workspace {workspace_id} does not exist")
    return as_row(ApiKeyRow, row), key


async def create_key(db: Database, workspace_id: str, scopes: Sequence[str]) -> tuple[str, str]:
    """A new key; returns (key id, key). Only the key's hash is stored."""
    row, key = await insert_key(db, workspace_id, scopes)
    return row.id, key


async def list_keys(
    db: Database, workspace_id: str, *, limit: int, after: Position | None
) -> Page[ApiKeyRow]:
    """A page of the workspace's keys, revoked ones included (no key material: not even the
    hash); NotFound when there is no such workspace."""
    async with db.acquire() as conn:
        await _require_workspace(conn, workspace_id)
        page = SQL.keys_page(workspace_id=workspace_id, **paging(after, limit))
        return await fetch_page(conn, page, ApiKeyRow, limit)


async def revoke_key(
    db: Database, key_id: str, cache: KeyCache | None = None, *, workspace_id: str | None = None
) -> None:
    """Revoke a key (of `workspace_id` only, when given: another workspace's key is NotFound,
    as a missing one). Revoking a revoked key changes nothing and succeeds.

    The trigger on api_keys tells every process to forget the keys it keeps; this process's
    `cache` forgets them before this returns, whatever the notification does."""
    async with db.acquire() as conn:
        done = await conn.fetchval(*SQL.revoke_key(key_id=key_id, workspace_id=workspace_id))
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
        row = await conn.fetchrow(*SQL.live_key(digest=digest))
    if row is None or not hmac.compare_digest(bytes(row["key_hash"]), digest):
        return None
    found = ApiKey(row["id"], row["workspace_id"], frozenset(row["scopes"]), row["webhook_id"])
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
    known = _NUMBERS.setdefault(db, {})
    cached = {ref: known[workspace_id, ref] for ref in refs if (workspace_id, ref) in known}
    cached = {ref: n for ref, n in cached.items() if e164 or ref == n.id}
    if len(cached) == len(refs):
        return cached
    async with db.acquire() as conn:
        rows = await conn.fetch(
            *SQL.find_numbers(workspace_id=workspace_id, refs=list(refs), e164=e164)
        )
    found: dict[str, PhoneNumber] = {}
    if len(known) >= MAX_KNOWN_NUMBERS:
        known.clear()
    for row in rows:
        number = PhoneNumber(row["id"], row["number"])
        found[number.id] = number
        known[workspace_id, number.id] = known[workspace_id, number.number] = number
        if e164:
            found[number.number] = number
    return {ref: found[ref] for ref in refs if ref in found}


# A number is its workspace's for good: nothing moves, renumbers or deletes one (the schema's
# statements only insert them). So a number once found is kept, per pool, and the lookup every
# POST /v1/messages (its `from`) and POST /v1/events with a `numberId` starts with costs no
# statement the next time; a ref not found is looked up every time (it may be added later).
_NUMBERS: weakref.WeakKeyDictionary[Database, dict[tuple[str, str], PhoneNumber]] = (
    weakref.WeakKeyDictionary()
)
MAX_KNOWN_NUMBERS = 10_000


@dataclass(frozen=True)
class DemoWebhook:
    """The demo workspace's webhook: the receiver the same process serves, and what it hears."""

    url: str
    events: Sequence[str]
    name: str = "Demo receiver"


async def create_demo_if_empty(
    db: Database,
    number: str,
    scopes: Sequence[str],
    webhook: DemoWebhook | None = None,
    now: datetime | None = None,
) -> str | None:
    """On an empty database, a demo workspace with one number, a key and (given `webhook`) a
    webhook; returns the key.

    Runs under an advisory lock so that replicas starting together make one demo, once.
    """
    async with db.transaction() as conn:
        await conn.execute(*SQL.lock_demo())
        if await conn.fetchval(*SQL.any_workspace()):
            return None
        workspace_id = ids.new_id(ids.WORKSPACE)
        key = new_key()
        await conn.execute(*SQL.insert_workspace(id=workspace_id, name="Demo", demo=True))
        await conn.execute(
            *SQL.insert_number(id=ids.new_id(ids.NUMBER), workspace_id=workspace_id, number=number)
        )
        await conn.execute(
            *SQL.insert_key(
                id=ids.new_id(ids.API_KEY),
                workspace_id=workspace_id,
                digest=hash_key(key),
                scopes=sorted(scopes),
                name="demo",
                webhook_id=None,
            ),
        )
        if webhook is not None:
            options = EndpointOptions(
                url=webhook.url, events=list(webhook.events), name=webhook.name
            )
            await webhooks.create(
                conn, workspace_id=workspace_id, options=options, now=now or datetime.now(UTC)
            )
    return key


async def demo_workspace_id(db: Database) -> str | None:
    """The demo workspace's id, when the database has one."""
    async with db.acquire() as conn:
        found: str | None = await conn.fetchval(*SQL.demo_workspace())
    return found


async def instance_secret(db: Database, name: str) -> bytes:
    """A random secret shared by every replica (made by whichever starts first)."""
    async with db.acquire() as conn:
        await conn.execute(*SQL.offer_instance_secret(name=name, secret=secrets.token_bytes(32)))
        value: bytes = await conn.fetchval(*SQL.instance_secret(name=name))
    return bytes(value)
