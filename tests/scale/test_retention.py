"""Retention by dropping whole day partitions; never a pending delivery; one replica at a time."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, date, datetime, timedelta

from dispatcher.domain.portal import Capabilities
from dispatcher.store import maintenance, portal
from dispatcher.store.database import Database
from tests.conftest import Workspace


async def partitions(db: Database) -> set[str]:
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('deliveries'::regclass, 'events'::regclass, "
            "'delivery_attempts'::regclass)"
        )
    return {r["relname"] for r in rows}


async def history_on(db: Database, ws: Workspace, day: date, status: str, n: int = 3) -> None:
    """n events of `day` with one delivery each, in the state given."""
    moment = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    async with db.transaction() as conn:
        await conn.execute("SELECT dispatcher_ensure_partitions($1, $1)", day)
        hook = await conn.fetchval(
            "INSERT INTO webhooks (id, workspace_id, url, events, secret) "
            "VALUES (dispatcher_new_id('WH'), $1, 'https://h.example.com/', '{contact.updated}', "
            "'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') RETURNING id",
            ws.id,
        )
        for i in range(n):
            event_id = f"EV{day:%Y%m%d}{status}{i}"
            await conn.execute(
                "INSERT INTO events (id, workspace_id, type, source, payload, created_at) "
                "VALUES ($1, $2, 'contact.updated', 'api', $3, $4)",
                event_id, ws.id, json.dumps({"id": event_id}), moment,
            )  # fmt: skip
            await conn.execute(
                "INSERT INTO deliveries (id, workspace_id, webhook_id, event_id, event_type, "
                "status, created_at, next_attempt_at) VALUES (dispatcher_new_id('WD'), $1, $2, $3, "
                "'contact.updated', $4::text, $5::timestamptz, "
                "CASE WHEN $4::text = 'pending' THEN $5::timestamptz END)",
                ws.id, hook, event_id, status, moment,
            )  # fmt: skip
            # Its attempt in the log, which leaves with the delivery's day.
            await conn.execute(
                "INSERT INTO delivery_attempts (id, delivery_id, webhook_id, "
                "delivery_created_at, attempt_number, created_at, response_ms, outcome, "
                "trigger) SELECT dispatcher_new_id('WA'), id, webhook_id, created_at, 1, "
                "created_at, 5, 'http_error', 'schedule' FROM deliveries WHERE event_id = $1",
                event_id,
            )


async def test_expired_settled_days_are_dropped_and_pending_ones_kept(
    db: Database, ws: Workspace
) -> None:
    now = datetime.now(UTC)
    today = now.date()
    old_settled = today - timedelta(days=40)
    old_pending = today - timedelta(days=41)
    recent = today - timedelta(days=10)
    await history_on(db, ws, old_settled, "delivered")
    await history_on(db, ws, old_settled, "failed")
    await history_on(db, ws, old_pending, "pending")
    await history_on(db, ws, recent, "delivered")
    report = await maintenance.run_maintenance(db, now, retention_days=30)
    assert report.ran
    suffix = f"{old_settled:%Y%m%d}"
    assert suffix in report.dropped
    assert f"{old_pending:%Y%m%d}" in report.kept_pending
    left = await partitions(db)
    assert f"deliveries_p{suffix}" not in left and f"events_p{suffix}" not in left
    assert f"delivery_attempts_p{suffix}" not in left
    assert f"delivery_attempts_p{old_pending:%Y%m%d}" in left
    assert f"deliveries_p{old_pending:%Y%m%d}" in left
    assert f"deliveries_p{recent:%Y%m%d}" in left
    # Partitions exist ahead of time.
    assert f"deliveries_p{today + timedelta(days=2):%Y%m%d}" in left
    async with db.acquire() as conn:
        counts = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM deliveries) d, (SELECT count(*) FROM events) e, "
            "(SELECT count(*) FROM delivery_attempts) a"
        )
    assert counts is not None and (counts["d"], counts["e"], counts["a"]) == (6, 6, 6)
    # Once the pending deliveries settle, their day goes too.
    async with db.acquire() as conn:
        await conn.execute("UPDATE deliveries SET status = 'failed', next_attempt_at = NULL")
    again = await maintenance.run_maintenance(db, now, retention_days=30)
    assert f"{old_pending:%Y%m%d}" in again.dropped


async def test_only_one_replica_maintains_at_a_time(db: Database, ws: Workspace) -> None:
    now = datetime.now(UTC)
    await history_on(db, ws, now.date() - timedelta(days=60), "delivered")
    async with db.transaction() as holder:
        # Another replica holds the maintenance lock...
        await holder.execute("SELECT pg_advisory_xact_lock($1)", maintenance._LOCK_KEY)
        skipped = await maintenance.run_maintenance(db, now, retention_days=30)
        assert not skipped.ran and skipped.dropped == []
    # ...and when it is done, the work happens exactly once.
    first, second = await asyncio.gather(
        maintenance.run_maintenance(db, now, retention_days=30),
        maintenance.run_maintenance(db, now, retention_days=30),
    )
    assert len(first.dropped) + len(second.dropped) == 1


async def test_a_dying_maintainer_leaves_nothing_half_done(db: Database, ws: Workspace) -> None:
    day = datetime.now(UTC).date() - timedelta(days=50)
    await history_on(db, ws, day, "delivered")
    suffix = f"{day:%Y%m%d}"
    conn_cm = db.transaction()
    conn = await conn_cm.__aenter__()
    await conn.execute(f"DROP TABLE deliveries_p{suffix}")
    # The process dies here, before dropping the events partition and committing.
    await conn_cm.__aexit__(RuntimeError, RuntimeError("killed"), None)
    left = await partitions(db)
    assert {f"deliveries_p{suffix}", f"events_p{suffix}"} <= left
    report = await maintenance.run_maintenance(db, datetime.now(UTC), retention_days=30)
    assert suffix in report.dropped
    left = await partitions(db)
    assert f"deliveries_p{suffix}" not in left and f"events_p{suffix}" not in left


async def test_portal_sessions_leave_a_retention_period_after_they_end(
    db: Database, ws: Workspace
) -> None:
    """A session's row (its digests, who had a link, when) is kept while events are, then goes;
    one still live, or ended within the period, stays."""
    now = datetime.now(UTC)
    day = timedelta(days=1)
    long_ended, _ = await portal.create(db, ws.id, Capabilities.READ, 900, None, now - 31 * day)
    deleted_early, _ = await portal.create(
        db, ws.id, Capabilities.MANAGE, 3600, None, now - 32 * day
    )
    await portal.delete(db, ws.id, deleted_early.id, now - 32 * day)
    recently_ended, _ = await portal.create(db, ws.id, Capabilities.READ, 900, None, now - 29 * day)
    live, _ = await portal.create(db, ws.id, Capabilities.READ, 86_400, None, now)
    report = await maintenance.run_maintenance(db, now, retention_days=30)
    assert report.portal_sessions_deleted == 2
    async with db.acquire() as conn:
        left = {row["id"] for row in await conn.fetch("SELECT id FROM portal_sessions")}
    assert recently_ended.id in left and live.id in left
    assert long_ended.id not in left and deleted_early.id not in left
    # The next run finds nothing more to delete.
    again = await maintenance.run_maintenance(db, now, retention_days=30)
    assert again.portal_sessions_deleted == 0
