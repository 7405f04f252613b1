"""Webhook subscriptions: create, read, update, delete, secrets, disabling."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from dispatcher.domain import ids
from dispatcher.domain.signing import new_secret
from dispatcher.store.database import Connection, Database, Record
from dispatcher.store.pages import Filters, Page, Position, fetch_page

COLUMNS = (
    "id, workspace_id, url, events, name, number_ids, max_concurrency, created_at, "
    "disabled_at, disabled_reason"
)
DISABLED_ERROR = "webhook disabled"
DELETED_ERROR = "webhook deleted"


async def create(
    db: Database,
    *,
    workspace_id: str,
    url: str,
    events: Sequence[str],
    name: str | None,
    number_ids: Sequence[str] | None,
    max_concurrency: int | None,
    now: datetime,
) -> tuple[Record, str]:
    """A new live subscription; returns it and its signing secret."""
    secret = new_secret()
    async with db.acquire() as conn:
        row: Record | None = await conn.fetchrow(
            f"""
            INSERT INTO webhooks (id, workspace_id, url, events, name, number_ids, secret,
                max_concurrency, created_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            RETURNING {COLUMNS}
            """,
            ids.new_id(ids.WEBHOOK),
            workspace_id,
            url,
            list(events),
            name,
            None if number_ids is None else list(number_ids),
            secret,
            max_concurrency,
            now,
        )
    assert row is not None
    return row, secret


async def get(conn: Connection, workspace_id: str, webhook_id: str) -> Record | None:
    row: Record | None = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM webhooks "
        "WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL",
        workspace_id,
        webhook_id,
    )
    return row


async def exists(
    conn: Connection, workspace_id: str, webhook_id: str, *, include_deleted: bool = False
) -> bool:
    found = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM webhooks WHERE workspace_id = $1 AND id = $2 "
        "AND ($3 OR deleted_at IS NULL))",
        workspace_id,
        webhook_id,
        include_deleted,
    )
    return bool(found)


async def list_page(db: Database, workspace_id: str, *, limit: int, after: Position | None) -> Page:
    filters = Filters().add("workspace_id = {}", workspace_id).add("deleted_at IS NULL")
    async with db.acquire() as conn:
        return await fetch_page(conn, f"SELECT {COLUMNS} FROM webhooks", filters, limit, after)


async def give_up_pending(conn: Connection, webhook_ids: Sequence[str], reason: str) -> int:
    """Settle as failed the pending deliveries of these webhooks that are not in flight
    (disable, delete).

    A delivery in flight (leased) is left to its attempt: the receiver may be answering right
    now, and the record must say what it answered. The recorder writes that attempt and gives
    up the retry it would have scheduled; a lease handed back unrecorded (its engine died) is
    given up by the next claim that comes across it.
    """
    result: str = await conn.execute(
        """
        WITH gone AS (
            DELETE FROM delivery_queue
            WHERE webhook_id = ANY($1::text[]) AND lease_owner IS NULL
            RETURNING delivery_id, created_at
        )
        UPDATE deliveries d
        SET status = 'failed', last_error = $2, next_attempt_at = NULL
        FROM gone
        WHERE d.id = gone.delivery_id AND d.created_at = gone.created_at
        """,
        list(webhook_ids),
        reason,
    )
    return int(result.split()[-1])


async def disable(
    conn: Connection, webhook_ids: Sequence[str], reason: str, now: datetime
) -> list[str]:
    """Disable live webhooks and give up their pending deliveries; returns those disabled."""
    rows = await conn.fetch(
        "UPDATE webhooks SET disabled_at = $2, disabled_reason = $3 "
        "WHERE id = ANY($1::text[]) AND disabled_at IS NULL AND deleted_at IS NULL RETURNING id",
        list(webhook_ids),
        now,
        reason,
    )
    disabled = [r["id"] for r in rows]
    if disabled:
        await give_up_pending(conn, disabled, DISABLED_ERROR)
    return disabled


async def update(
    db: Database, workspace_id: str, webhook_id: str, changes: dict[str, Any], now: datetime
) -> Record | None:
    """Apply a PATCH: only the keys present in `changes` change; `enabled` moves between
    live and disabled (manual)."""
    columns = {"url": "url", "events": "events", "name": "name", "numberIds": "number_ids",
               "maxConcurrency": "max_concurrency"}  # fmt: skip
    async with db.transaction() as conn:
        current = await conn.fetchrow(
            "SELECT id, disabled_at FROM webhooks "
            "WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL FOR UPDATE",
            workspace_id,
            webhook_id,
        )
        if current is None:
            return None
        sets: list[str] = []
        args: list[Any] = [webhook_id]
        for key, column in columns.items():
            if key in changes:
                args.append(changes[key])
                sets.append(f"{column} = ${len(args)}")
        if sets:
            await conn.execute(f"UPDATE webhooks SET {', '.join(sets)} WHERE id = $1", *args)
        enabled = changes.get("enabled")
        if enabled is False and current["disabled_at"] is None:
            await disable(conn, [webhook_id], "manual", now)
        elif enabled is True and current["disabled_at"] is not None:
            await conn.execute(
                "UPDATE webhooks SET disabled_at = NULL, disabled_reason = NULL, "
                "failing_since = NULL WHERE id = $1",
                webhook_id,
            )
        return await get(conn, workspace_id, webhook_id)


async def delete(db: Database, workspace_id: str, webhook_id: str, now: datetime) -> bool:
    async with db.transaction() as conn:
        deleted = await conn.fetchval(
            "UPDATE webhooks SET deleted_at = $3 "
            "WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL RETURNING id",
            workspace_id,
            webhook_id,
            now,
        )
        if deleted is None:
            return False
        await give_up_pending(conn, [webhook_id], DELETED_ERROR)
    return True


async def secret(db: Database, workspace_id: str, webhook_id: str) -> str | None:
    async with db.acquire() as conn:
        value: str | None = await conn.fetchval(
            "SELECT secret FROM webhooks "
            "WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL",
            workspace_id,
            webhook_id,
        )
    return value


async def rotate_secret(
    db: Database, workspace_id: str, webhook_id: str, grace: timedelta, now: datetime
) -> str | None:
    """A new secret; the previous one keeps signing (beside it) until the grace ends."""
    fresh = new_secret()
    async with db.acquire() as conn:
        done = await conn.fetchval(
            "UPDATE webhooks SET previous_secret = secret, previous_secret_expires_at = $4, "
            "secret = $3 WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL RETURNING id",
            workspace_id,
            webhook_id,
            fresh,
            now + grace,
        )
    return None if done is None else fresh
