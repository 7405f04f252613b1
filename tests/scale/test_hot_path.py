"""The claim's plan and cost do not grow with settled history."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from dispatcher.store import queue
from dispatcher.store.database import Database
from tests.conftest import Workspace


async def claim_plan(db: Database) -> tuple[float, str]:
    now = datetime.now(UTC)
    async with db.acquire() as conn:
        await conn.execute("ANALYZE deliveries")
        await conn.execute("ANALYZE events")
        raw = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + queue.CLAIM, now, "owner", 100, [], 10,
            now + timedelta(seconds=45),
        )  # fmt: skip
    plan: Any = orjson.loads(raw)[0]["Plan"]
    return float(plan["Total Cost"]), orjson.dumps(plan).decode()


async def add_history(db: Database, ws: Workspace, start: int, n: int, pending_every: int) -> None:
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO events (id, workspace_id, type, source, payload) "
            "SELECT 'EV' || g, $1, 'contact.updated', 'api', '{}' "
            "FROM generate_series($2::int, $3::int) g",
            ws.id, start, start + n - 1,
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO deliveries (id, workspace_id, webhook_id, event_id, event_type, status, "
            "created_at, next_attempt_at) "
            "SELECT 'WD' || g, $1, 'WH1', 'EV' || g, 'contact.updated', "
            "CASE WHEN g % $4::int = 0 THEN 'pending' ELSE 'delivered' END, e.created_at, "
            "CASE WHEN g % $4::int = 0 THEN now() END "
            "FROM generate_series($2::int, $3::int) g JOIN events e ON e.id = 'EV' || g",
            ws.id, start, start + n - 1, pending_every,
        )  # fmt: skip


async def test_claim_cost_is_flat_as_history_grows(db: Database, ws: Workspace) -> None:
    async with db.acquire() as conn:
        await conn.execute(
            "INSERT INTO webhooks (id, workspace_id, url, events, secret) "
            "VALUES ('WH1', $1, 'https://x.example.com/', '{contact.updated}', 'whsec_AAAA')",
            ws.id,
        )
    # 100 due rows among 2,000 settled ones...
    await add_history(db, ws, 1, 2_100, pending_every=21)
    small_cost, _ = await claim_plan(db)
    # ...then the same 100 due rows among 200,000 settled ones.
    await add_history(db, ws, 10_000, 200_000, pending_every=10**9)
    big_cost, big_plan = await claim_plan(db)
    # The partition holding the rows is read through an index; only empty ones are scanned.
    seq_scanned = set(re.findall(r'"Seq Scan"[^}]*?"Relation Name":"(\w+)"', big_plan))
    populated = f"deliveries_p{datetime.now(UTC):%Y%m%d}"
    assert populated in big_plan
    assert populated not in seq_scanned, seq_scanned
    assert f"{populated}_next_attempt_at_idx" in big_plan  # the partition's due index
    print(f"\nclaim plan cost: {small_cost:.1f} with 2k settled rows, {big_cost:.1f} with 200k")
    assert big_cost <= small_cost * 1.5
