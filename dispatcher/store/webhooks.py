"""Webhook subscriptions: create, read, update, delete, secrets, disabling. Statements in
queries/webhooks.sql."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from dispatcher.domain import endpoint_auth, ids, operational
from dispatcher.domain.endpoints import (
    OPTIONS,
    WITHHELD,
    WITHHELD_KEYS,
    WRITE_ONLY,
    EndpointChanges,
    EndpointOptions,
    changed_options,
)
from dispatcher.domain.enums import DisabledReason, Ordering
from dispatcher.domain.signing import new_secret
from dispatcher.errors import NotFound
from dispatcher.store.database import Connection, Database
from dispatcher.store.notifications import DELIVERIES_CHANNEL
from dispatcher.store.operational import publish as publish_operational
from dispatcher.store.pages import Page, Position, fetch_page, paging
from dispatcher.store.queries import Queries, Statement, load, translate
from dispatcher.store.rows import LockedWebhookRow, WebhookRow, as_row, fetch_row


class SQL(Queries, file="webhooks.sql"):
    gone: Statement
    create: Statement
    webhook: Statement
    exists: Statement
    webhooks_page: Statement
    give_up_pending: Statement
    disable: Statement
    lock_webhook: Statement
    enable: Statement
    delete: Statement
    secret: Statement
    rotate_secret: Statement
    demo_secrets: Statement
    filter_matches: Statement
    add_bucket: Statement
    drop_bucket: Statement
    join_lanes: Statement
    leave_lanes: Statement


# A change as the API hands it over: by option (domain/endpoints.py).
WebhookChanges = EndpointChanges

# Seconds a POST /v1/webhooks/{id}/filter/test may take in the database (docs/api.md, Bounds):
# at the bounds it takes a few hundred milliseconds on a 1 MiB `data` (parsing it, mostly).
FILTER_TEST_TIMEOUT = 2.0
DISABLED_ERROR = "webhook disabled"
DELETED_ERROR = "webhook deleted"


def option_columns(table: str = "", *, answered: bool = False) -> str:
    """The endpoint's one column list (domain/endpoints.py's `OPTIONS`, in order), of `table`
    (an alias) when given. `answered`: as the API may see them, each write-only option's values
    WITHHELD (its names kept)."""
    prefix = f"{table}." if table else ""

    def column(option: str) -> str:
        if answered and option == endpoint_auth.AUTH:  # without its client secret
            return f"({prefix}{option} - '{endpoint_auth.WITHHELD_KEY}') AS {option}"
        if answered and option in WRITE_ONLY:
            return (
                f"(SELECT coalesce(jsonb_object_agg(k, '{WITHHELD}'), '{{}}')"
                f" FROM jsonb_object_keys({prefix}{option}) k) AS {option}"
            )
        if answered and option in WITHHELD_KEYS:  # e.g. `tls` without `clientKey`
            kept = "".join(f" - '{key}'" for key in WITHHELD_KEYS[option])
            return f"({prefix}{option}{kept}) AS {option}"
        return prefix + option

    return ", ".join(column(option) for option in OPTIONS)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def with_options(sql: str, table: str = "") -> str:
    """`sql` with the endpoint's column list written in where it says `{options}` (the columns),
    `{answered_options}` (as the API may see them) or `{option_parameters}` (one named
    parameter per option, named after it: `@url, @events, ...`). Done once, at import: every
    name comes from domain/endpoints.py, none from a request."""
    lists = {
        "options": option_columns(table),
        "answered_options": option_columns(table, answered=True),
        "option_parameters": ", ".join(f"@{option}" for option in OPTIONS),
    }
    return _PLACEHOLDER.sub(lambda match: lists[match[1]], sql)


def _with_options(statement: Statement) -> Statement:
    """`statement` with the endpoint's column list written in (`with_options`), its text as
    the file writes it, translated by the loader as the file's statements are."""
    text = with_options(load(SQL.file)[statement.name].text)
    sql, params = translate(text, f"{SQL.file}: {statement.name}")
    return Statement(statement.name, sql, params)


CREATE = _with_options(SQL.create)
WEBHOOK = _with_options(SQL.webhook)
WEBHOOKS_PAGE = _with_options(SQL.webhooks_page)


def update_statement(options: Sequence[str]) -> Statement:
    """Set `options` of webhook `@webhook_id`, each to the parameter named after it. The column
    names are those of domain/endpoints.py (anything else is refused), never a client's: only
    values are parameters. One statement per set of options changed (asyncpg prepares each
    once)."""
    unknown = set(options) - set(OPTIONS)
    if unknown or not options:
        raise ValueError(f"not endpoint options: {sorted(unknown)}")
    assignments = ", ".join(f"{option} = @{option}" for option in options)
    text = f"UPDATE webhooks SET {assignments} WHERE id = @webhook_id"
    sql, params = translate(text, "webhooks.update_statement")
    return Statement("update", sql, params)


def _stored(value: Any) -> Any:
    """An option's value as the driver takes it (a JSON column's codec takes only dicts)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    return value


async def create(
    db: Database | Connection,
    *,
    workspace_id: str,
    options: EndpointOptions,
    now: datetime,
    answer: Callable[[WebhookRow, str], None] | None = None,
) -> tuple[WebhookRow, str]:
    """A new live subscription; returns it and its signing secret. Its options are stored as
    given (the API checked them; a `{}` filter is stored as None: it filters nothing). On a
    connection of its own, or on the caller's (the demo is made in one transaction).

    `answer`, when given, is called with the new webhook and its secret before the insert
    commits (the API renders its answer there): when it raises, nothing is stored, so a
    client is never left with a webhook it was not told of."""
    if answer is not None and isinstance(db, Database):
        async with db.transaction() as conn:
            return await create(
                conn, workspace_id=workspace_id, options=options, now=now, answer=answer
            )
    secret = new_secret()
    if not options.payload_filter:
        options = options._replace(payload_filter=None)
    stored = {option: _stored(value) for option, value in zip(OPTIONS, options, strict=True)}
    made = CREATE(
        id=ids.new_id(ids.WEBHOOK), workspace_id=workspace_id, secret=secret, now=now, **stored
    )
    row = await fetch_row(db, made, WebhookRow)
    assert row is not None  # the insert returns the row it made
    if answer is not None:
        answer(row, secret)
    return row, secret


async def get(conn: Connection, workspace_id: str, webhook_id: str) -> WebhookRow | None:
    return await fetch_row(
        conn, WEBHOOK(workspace_id=workspace_id, webhook_id=webhook_id), WebhookRow
    )


async def exists(
    conn: Connection, workspace_id: str, webhook_id: str, *, include_deleted: bool = False
) -> bool:
    found = await conn.fetchval(
        *SQL.exists(
            workspace_id=workspace_id, webhook_id=webhook_id, include_deleted=include_deleted
        )
    )
    return bool(found)


async def find(db: Database, workspace_id: str, webhook_id: str) -> WebhookRow | None:
    """The workspace's live webhook, or None."""
    async with db.acquire() as conn:
        return await get(conn, workspace_id, webhook_id)


async def require_readable(db: Database, workspace_id: str, webhook_id: str) -> None:
    """Raise NotFound unless the webhook is the workspace's; a deleted one's history (its
    deliveries, attempts and health) stays readable."""
    async with db.acquire() as conn:
        if not await exists(conn, workspace_id, webhook_id, include_deleted=True):
            raise NotFound("webhook not found")


async def list_page(
    db: Database, workspace_id: str, *, limit: int, after: Position | None
) -> Page[WebhookRow]:
    page = WEBHOOKS_PAGE(workspace_id=workspace_id, **paging(after, limit))
    return await fetch_page(db, page, WebhookRow, limit)


async def give_up_pending(conn: Connection, webhook_ids: Sequence[str], reason: str) -> int:
    """Settle as failed the pending deliveries of these webhooks that are not in flight
    (disable, delete).

    A delivery in flight (leased) is left to its attempt: the receiver may be answering right
    now, and the record must say what it answered. The recorder writes that attempt and gives
    up the retry it would have scheduled; a lease handed back unrecorded (its engine died) is
    given up by the next claim that comes across it.
    """
    result: str = await conn.execute(
        *SQL.give_up_pending(webhook_ids=list(webhook_ids), error=reason)
    )
    return int(result.split()[-1])


async def disable(
    conn: Connection, webhook_ids: Sequence[str], reason: DisabledReason, now: datetime
) -> list[str]:
    """Disable live webhooks, give up their pending deliveries and tell their workspaces
    (`webhook.disabled`); returns those disabled (the others were disabled or deleted
    already)."""
    rows = await conn.fetch(*SQL.disable(webhook_ids=list(webhook_ids), now=now, reason=reason))
    disabled = [r["id"] for r in rows]
    if disabled:
        await give_up_pending(conn, disabled, DISABLED_ERROR)
        told = [operational.webhook_disabled(r["workspace_id"], r["id"], reason, now) for r in rows]
        await publish_operational(conn, told, now)
    return disabled


async def update(
    db: Database,
    workspace_id: str,
    webhook_id: str,
    changes: WebhookChanges,
    now: datetime,
    check: Callable[[LockedWebhookRow], None] | None = None,
    answer: Callable[[WebhookRow], None] | None = None,
) -> WebhookRow | None:
    """Apply a change: only the keys present in `changes` change (see `EndpointChanges`),
    in one UPDATE of the options it names;
    when `enabled` changes, the workspace is told (`webhook.enabled`, `webhook.disabled`). A
    rate limit set gets its bucket, one cleared loses it; a change of `ordering` moves the
    queued deliveries into their lanes or out of them. None when the workspace has no such
    live webhook.

    `check`, when given, sees the webhook as it is (locked: its headers and secret headers
    included) before anything changes, and may raise to refuse the change: a rule that
    spans a changed field and a kept one holds against concurrent changes. `answer`, when
    given, sees the webhook as changed before the change commits (the API renders its
    answer there), and may raise to undo it: a change is never kept unanswered."""
    async with db.transaction() as conn:
        locked = await conn.fetchrow(
            *SQL.lock_webhook(workspace_id=workspace_id, webhook_id=webhook_id)
        )
        if locked is None:
            return None
        current = as_row(LockedWebhookRow, locked)
        if check is not None:
            check(current)
        options = changed_options(changes)
        if options:
            given: Mapping[str, object] = changes
            values = {option: _stored(given[option]) for option in options}
            await conn.execute(*update_statement(options)(webhook_id=webhook_id, **values))
        if "rate_limit" in changes:
            bucket = SQL.drop_bucket if changes["rate_limit"] is None else SQL.add_bucket
            await conn.execute(*bucket(webhook_id=webhook_id))
        ordering = changes.get("ordering", current.ordering)
        if ordering != current.ordering:
            if ordering == Ordering.FIFO:
                await conn.execute(*SQL.join_lanes(webhook_id=webhook_id))
            else:
                await conn.execute(*SQL.leave_lanes(webhook_id=webhook_id, now=now))
        enabled = changes.get("enabled")
        if enabled is False and current.disabled_at is None:
            await disable(conn, [webhook_id], DisabledReason.MANUAL, now)
        elif enabled is True and current.disabled_at is not None:
            await conn.execute(*SQL.enable(webhook_id=webhook_id))
            told = [operational.webhook_enabled(workspace_id, webhook_id)]
            await publish_operational(conn, told, now)
        updated = await get(conn, workspace_id, webhook_id)
        if answer is not None and updated is not None:
            answer(updated)
    if enabled is not None or ordering != current.ordering:
        # The operational event's deliveries, or those a fifo -> none change released.
        db.wake(DELIVERIES_CHANNEL)
    return updated


async def delete(db: Database, workspace_id: str, webhook_id: str, now: datetime) -> bool:
    async with db.transaction() as conn:
        deleted = await conn.fetchval(
            *SQL.delete(workspace_id=workspace_id, webhook_id=webhook_id, now=now)
        )
        if deleted is None:
            return False
        await give_up_pending(conn, [webhook_id], DELETED_ERROR)
    return True


async def secret(db: Database, workspace_id: str, webhook_id: str) -> str | None:
    async with db.acquire() as conn:
        value: str | None = await conn.fetchval(
            *SQL.secret(workspace_id=workspace_id, webhook_id=webhook_id)
        )
    return value


async def rotate_secret(
    db: Database, workspace_id: str, webhook_id: str, grace: timedelta, now: datetime
) -> str | None:
    """A new secret; the previous one keeps signing (beside it) until the grace ends."""
    fresh = new_secret()
    async with db.acquire() as conn:
        done = await conn.fetchval(
            *SQL.rotate_secret(
                workspace_id=workspace_id,
                webhook_id=webhook_id,
                secret=fresh,
                expires_at=now + grace,
            )
        )
    return None if done is None else fresh


async def demo_secrets(db: Database, url: str, now: datetime) -> list[tuple[str, list[str]]]:
    """The demo workspace's live webhooks at `url` (the demo receiver), each with the secrets
    that sign its deliveries now (the current one; the previous one too during its grace)."""
    async with db.acquire() as conn:
        rows = await conn.fetch(*SQL.demo_secrets(url=url, now=now))
    return [(r["id"], [r["secret"], *([r["previous"]] if r["previous"] else [])]) for r in rows]


async def filter_matches(
    db: Database,
    workspace_id: str,
    webhook_id: str,
    data: Mapping[str, Any],
    *,
    given: bool,
    payload_filter: Mapping[str, Any] | None,
) -> bool | None:
    """Whether `data` contains the webhook's saved filter, or `payload_filter` when `given`
    (None: no filter, which matches everything); decided by Postgres' `@>`, as fan-out
    decides it. None when the workspace has no such webhook.

    Under a statement timeout (FILTER_TEST_TIMEOUT; past it, Overloaded): its work is bounded
    already (the filter's bounds and the data's, dispatcher_filter_passes), and the timeout
    bounds what is left, the parsing of `data`, so that a flood of tests cannot hold the
    pool's connections."""
    # A transaction of its own for SET LOCAL, committing nothing (read only): not
    # `db.transaction()`, which marks the request as one that has changed something.
    async with db.acquire() as conn, conn.transaction(readonly=True):
        await conn.execute(f"SET LOCAL statement_timeout = {round(FILTER_TEST_TIMEOUT * 1000)}")
        row = await conn.fetchrow(
            *SQL.filter_matches(
                workspace_id=workspace_id,
                webhook_id=webhook_id,
                data=dict(data),
                given=given,
                payload_filter=None if payload_filter is None else dict(payload_filter),
            )
        )
    return None if row is None else bool(row["matches"])


async def gone(db: Database, webhook_ids: list[str]) -> list[str]:
    """Those of `webhook_ids` deleted (or never there)."""
    async with db.acquire() as conn:
        rows = await conn.fetch(*SQL.gone(webhook_ids=webhook_ids))
    return [row["id"] for row in rows]
