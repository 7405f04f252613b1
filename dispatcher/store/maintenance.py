"""Partitions ahead of time, and retention by dropping whole expired partitions.

Every replica runs the loop; a transaction-scoped advisory lock lets exactly one do the work at
a time, and each step is one transaction, so a replica dying mid-way leaves nothing half-done
(the next run simply does the rest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from dispatcher.store.database import Database

_LOCK_KEY = 0x64697372  # "disr"
_PARTITION = re.compile(r"^deliveries_p(\d{8})$")
PARTITIONS_AHEAD_DAYS = 2


@dataclass
class Report:
    ran: bool = False
    created: int = 0
    dropped: list[str] = field(default_factory=list)  # days, YYYYMMDD
    kept_pending: list[str] = field(default_factory=list)  # expired but still pending
    in_default: int = 0  # rows outside every daily partition


async def run_maintenance(db: Database, now: datetime, retention_days: int) -> Report:
    report = Report()
    today = now.date()
    async with db.transaction() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _LOCK_KEY):
            return report  # another replica is on it
        report.ran = True
        report.created = await conn.fetchval(
            "SELECT dispatcher_ensure_partitions($1, $2)",
            today - timedelta(days=1),
            today + timedelta(days=PARTITIONS_AHEAD_DAYS),
        )
        report.in_default = await conn.fetchval(
            "SELECT (SELECT count(*) FROM events_default)"
            " + (SELECT count(*) FROM deliveries_default)"
        )
        names = await conn.fetch(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'deliveries'::regclass"
        )
    # A day's partition expires when its whole day is older than the retention period.
    cutoff = today - timedelta(days=retention_days)
    expired = sorted(
        match.group(1)
        for row in names
        if (match := _PARTITION.match(row["relname"])) is not None and _day(match.group(1)) < cutoff
    )
    for suffix in expired:
        if await _drop_day(db, suffix):
            report.dropped.append(suffix)
        else:
            report.kept_pending.append(suffix)
    return report


def _day(suffix: str) -> date:
    return datetime.strptime(suffix, "%Y%m%d").date()


async def _drop_day(db: Database, suffix: str) -> bool:
    """Drop one day of events and deliveries together, unless a delivery there is pending."""
    deliveries, events = f"deliveries_p{suffix}", f"events_p{suffix}"
    async with db.transaction() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _LOCK_KEY):
            return False
        # Waits briefly for statements in flight; never stalls the claim path for long.
        await conn.execute("SET LOCAL lock_timeout = '5s'")
        # Locked first, so no retry or recover can make a row pending between check and drop.
        await conn.execute(f"LOCK TABLE {deliveries} IN ACCESS EXCLUSIVE MODE")
        if await conn.fetchval(
            f"SELECT EXISTS (SELECT 1 FROM {deliveries} WHERE status = 'pending')"
        ):
            return False
        # Nothing pending means no queue row for that day; one left by a hand edit of the
        # history would point at nothing once the day is gone.
        day = _day(suffix)
        await conn.execute(
            "DELETE FROM delivery_queue WHERE created_at >= $1 AND created_at < $2",
            datetime(day.year, day.month, day.day, tzinfo=UTC),
            datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1),
        )
        await conn.execute(f"DROP TABLE {deliveries}")
        await conn.execute(f"DROP TABLE IF EXISTS {events}")
    return True
