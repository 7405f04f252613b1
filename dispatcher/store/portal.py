"""Portal sessions (docs/console.md, "Portal sessions"). Statements in queries/portal.sql.

A session's link carries a one-time secret; the console exchanges it, once, for a bearer
credential bound to the session. Neither is stored: only their SHA-256 digests are. Every
request made with the credential reads the session's row (no cache), so a session ended by
its time or by a delete is refused at its next request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from dispatcher.domain import ids, portal
from dispatcher.domain.portal import Capabilities
from dispatcher.errors import NotFound
from dispatcher.store.database import Connection, Database, Record
from dispatcher.store.key_cache import ApiKey
from dispatcher.store.queries import Queries, Statement


class SQL(Queries, file="portal.sql"):
    insert_session: Statement
    exchange: Statement
    live_token: Statement
    framing: Statement
    delete_session: Statement
    forget_ended: Statement


@dataclass(frozen=True)
class PortalSession:
    id: str
    workspace_id: str
    capabilities: Capabilities
    parent_origin: str | None
    created_at: datetime
    expires_at: datetime


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def _session(row: Record) -> PortalSession:
    return PortalSession(
        row["id"],
        row["workspace_id"],
        Capabilities(row["capabilities"]),
        row["parent_origin"],
        row["created_at"],
        row["expires_at"],
    )


def is_token(token: str) -> bool:
    """Whether a bearer token is a portal session's credential (not a workspace key)."""
    return token.startswith(portal.TOKEN_PREFIX)


def is_session_key(key: ApiKey) -> bool:
    """Whether a request's caller is a portal session (its `ApiKey` is the session's)."""
    return ids.is_id(key.id, ids.PORTAL_SESSION)


async def create(
    db: Database,
    workspace_id: str,
    capabilities: Capabilities,
    ttl_seconds: int,
    parent_origin: str | None,
    now: datetime,
) -> tuple[PortalSession, str]:
    """A new session and its one-time secret (shown this once: only its digest is stored).
    NotFound when there is no such workspace (or it is the operator sink's)."""
    secret = portal.SECRET_PREFIX + secrets.token_urlsafe(32)
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            *SQL.insert_session(
                id=ids.new_id(ids.PORTAL_SESSION),
                workspace_id=workspace_id,
                capabilities=str(capabilities),
                parent_origin=parent_origin,
                secret_hash=_digest(secret),
                now=now,
                expires_at=now + timedelta(seconds=ttl_seconds),
            )
        )
    if row is None:
        raise NotFound(f"workspace {workspace_id} does not exist")
    return _session(row), secret


async def exchange(db: Database, secret: str, now: datetime) -> tuple[PortalSession, str] | None:
    """The session of `secret` and a new credential for it, once; None when the secret is
    unknown, exchanged already, or its session has ended."""
    if not secret.startswith(portal.SECRET_PREFIX):
        return None
    token = portal.TOKEN_PREFIX + secrets.token_urlsafe(32)
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            *SQL.exchange(secret_hash=_digest(secret), token_hash=_digest(token), now=now)
        )
    return None if row is None else (_session(row), token)


async def find_token(db: Database, token: str, now: datetime) -> ApiKey | None:
    """The caller a live session's credential stands for: the session's id, its workspace and
    the scopes of its capabilities; None when the credential is unknown or its session ended."""
    digest = _digest(token)
    async with db.acquire() as conn:
        row = await conn.fetchrow(*SQL.live_token(token_hash=digest, now=now))
    if row is None or not hmac.compare_digest(bytes(row["token_hash"]), digest):
        return None
    scopes = portal.SCOPES[Capabilities(row["capabilities"])]
    return ApiKey(row["id"], row["workspace_id"], frozenset(str(s) for s in scopes))


async def framing_origin(db: Database, session_id: str, now: datetime) -> str | None:
    """The origin that may frame the console of session `session_id`, while it is live."""
    if not ids.is_id(session_id, ids.PORTAL_SESSION):
        return None
    async with db.acquire() as conn:
        found: str | None = await conn.fetchval(*SQL.framing(id=session_id, now=now))
    return found


async def delete(db: Database, workspace_id: str, session_id: str, now: datetime) -> None:
    """End session `session_id` of `workspace_id` (again: nothing changes); NotFound when the
    workspace has no such session."""
    async with db.acquire() as conn:
        done = await conn.fetchval(
            *SQL.delete_session(id=session_id, workspace_id=workspace_id, now=now)
        )
    if done is None:
        raise NotFound(f"portal session {session_id} does not exist")


async def forget_ended(conn: Connection, before: datetime) -> int:
    """Delete the sessions that ended before `before` (the maintenance loop, which keeps them
    as long as events: an operator can still see who had a link, and when, for that long);
    returns how many."""
    result: str = await conn.execute(*SQL.forget_ended(before=before))
    return int(result.split()[-1])
