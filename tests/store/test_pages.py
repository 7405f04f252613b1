"""The lists' pages (dispatcher/store/pages.py and each `-- name: ..._page` statement): whole
statements whose window and position are always index conditions, open ends included, so that
a generic plan (Postgres makes one for a statement prepared and run often) still walks the
index from the position instead of reading every newer row."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dispatcher.store import (
    attempts,
    conversations,
    deliveries,
    events,
    messages,
    webhooks,
    workspaces,
)
from dispatcher.store.database import Database
from dispatcher.store.pages import EARLIEST, LATEST, paging, window
from dispatcher.store.queries import Bound

SINCE = datetime(2024, 1, 1, tzinfo=UTC)
UNTIL = datetime(2024, 2, 1, tzinfo=UTC)
AFTER = (datetime(2024, 1, 15, tzinfo=UTC), "ID")


def test_a_window_is_open_where_not_given() -> None:
    assert window(SINCE, UNTIL) == {"since": SINCE, "until": UNTIL}
    assert window(None, UNTIL) == {"since": EARLIEST, "until": UNTIL}
    assert window(None, None) == {"since": EARLIEST, "until": LATEST}


def test_a_page_asks_one_row_more_from_its_position() -> None:
    assert paging(None, 50) == {"after_at": LATEST, "after_id": "", "limit": 51}
    assert paging(AFTER, 10) == {"after_at": AFTER[0], "after_id": "ID", "limit": 11}


async def test_the_ends_of_time_go_to_postgres_as_infinity(db: Database) -> None:
    async with db.acquire() as conn:
        ends = await conn.fetchval(
            "SELECT ARRAY[$1::timestamptz::text, $2::timestamptz::text]", EARLIEST, LATEST
        )
    assert ends == ["-infinity", "infinity"]


# Every page statement, bound with every optional filter left out and a position (the case a
# generic plan must still walk from), and the index it walks.
PAGES: list[tuple[str, Bound, str]] = [
    ("webhook_attempts_page", attempts.SQL.webhook_attempts_page(
        webhook_id="WH", outcome=None, **window(None, None), **paging(AFTER, 10)),
     "delivery_attempts"),
    ("conversations_page", conversations.SQL.conversations_page(
        workspace_id="WS", status=None, number_id=None, **paging(AFTER, 10)),
     "conversations_page"),
    ("deliveries_page", deliveries.SQL.deliveries_page(
        workspace_id="WS", webhook_id="WH", status=None, event_type=None, event_id=None,
        **window(None, None), **paging(AFTER, 10)),
     "deliveries"),
    ("events_page", events.SQL.events_page(
        workspace_id="WS", event_type=None, **window(None, None), **paging(AFTER, 10)),
     "events"),
    ("messages_page", messages.SQL.messages_page(
        workspace_id="WS", number_id=None, contact=None, direction=None, **paging(AFTER, 10)),
     "messages_page"),
    ("webhooks_page", webhooks.WEBHOOKS_PAGE(workspace_id="WS", **paging(AFTER, 10)),
     "webhooks_page"),
    ("workspaces_page", workspaces.SQL.workspaces_page(**paging(AFTER, 10)), "workspaces_page"),
    ("keys_page", workspaces.SQL.keys_page(workspace_id="WS", **paging(AFTER, 10)),
     "api_keys_page"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "page", "index"), PAGES, ids=[p[0] for p in PAGES])
async def test_a_generic_plan_walks_the_index_from_the_position(
    db: Database, name: str, page: Bound, index: str
) -> None:
    async with db.transaction() as conn:
        # A generic plan, as after five runs of a prepared statement (it shows the parameters,
        # not the values); on an empty table the planner would rather scan it whole, which
        # says nothing of the conditions' shape.
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        await conn.execute(f"PREPARE page_plan AS {page.sql}")
        values = ", ".join(_literal(value) for value in page.args)
        rows = await conn.fetch(f"EXPLAIN EXECUTE page_plan({values})")
        await conn.execute("DEALLOCATE page_plan")
    plan = "\n".join(row[0] for row in rows)
    conditions = [line for line in plan.splitlines() if "Index Cond" in line]
    assert index in plan, plan
    # The position bounds the index walk, given as a parameter (the row comparison, or its
    # created_at half where the index has no id): no filter left to read every newer row.
    bounded = ("ROW(created_at, id) < ROW($", "(created_at <= $")
    assert any(any(b in line for b in bounded) for line in conditions), plan


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"
