"""A list page's work is bounded in time (docs/api.md, "Bounds"): a filter its index does not
cover, over a long window with few matches, reads every row of the window; past the page's
time limit the statement is cancelled in the database and the answer is a 503 `overloaded`
saying how to narrow the page, and the service goes on answering."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from dispatcher.store import deliveries, pages
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for

EVENTS = 30_000


async def many_events(db: Database, ws: Workspace) -> None:
    """EVENTS events of one type, one a minute back from now (three weeks)."""
    async with db.acquire() as conn:
        await conn.execute(
            "SELECT dispatcher_append_event('EV' || lpad(g::text, 32, '0'), $1,"
            " 'contact.updated', NULL, 'api', json_build_object('id', 'x'),"
            " now() - g * interval '1 minute', NULL, NULL, NULL, NULL, NULL, NULL)"
            " FROM generate_series(1, $2) g",
            ws.id,
            EVENTS,
        )


async def test_a_page_past_its_time_limit_is_a_503_and_is_cancelled(
    client: TestClient[Any, Any], ws: Workspace, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await many_events(db, ws)
    path = "/v1/events?type=order.paid&limit=100"  # no event of the type: the whole window
    monkeypatch.setattr(pages, "PAGE_TIMEOUT", 0.001)
    resp = await client.get(path, headers=ws.headers)
    assert resp.status == 503, await resp.text()
    error = await resp.json()
    assert error["code"] == "overloaded"
    assert "since" in error["message"] and "until" in error["message"]
    assert resp.headers["Retry-After"]

    async def cancelled() -> bool:
        async with db.acquire() as conn:
            running = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE state = 'active' AND query LIKE '%FROM events%type%'"
                " AND pid <> pg_backend_pid()"
            )
        return bool(running == 0)

    await wait_for(cancelled, within=10, message="the cancelled page gone from the database")
    monkeypatch.undo()
    # Within the limit, the same page answers (nothing matches), and so does the next.
    resp = await client.get(path, headers=ws.headers)
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"data": [], "nextCursor": None}
    resp = await client.get("/v1/events?limit=1", headers=ws.headers)
    assert resp.status == 200
    assert len((await resp.json())["data"]) == 1


async def test_a_recover_past_its_time_limit_is_a_503_and_changes_nothing(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A recover reads every event of its window: each of its statements has a time limit,
    past which the whole recover rolls back."""
    resp = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/in", "events": ["contact.updated"],
              "filter": {"wanted": True}},
        headers=ws.headers,
    )  # fmt: skip
    hook = (await resp.json())["id"]
    async with db.acquire() as conn:  # created "before" the events: backdate the webhook
        await conn.execute(
            "UPDATE webhooks SET created_at = now() - interval '14 days' WHERE id = $1", hook
        )
    await many_events(db, ws)
    monkeypatch.setattr(deliveries, "RECOVER_TIMEOUT", 0.001)
    body = {"since": isoformat(clock.now() - timedelta(days=14) + timedelta(minutes=1))}
    resp = await client.post(f"/v1/webhooks/{hook}/recover", json=body, headers=ws.headers)
    assert resp.status == 503, await resp.text()
    assert (await resp.json())["code"] == "overloaded"
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM deliveries") == 0
    monkeypatch.undo()
    resp = await client.post(f"/v1/webhooks/{hook}/recover", json=body, headers=ws.headers)
    assert resp.status == 202, await resp.text()
    assert await resp.json() == {"queued": 0}  # no event passes the filter
