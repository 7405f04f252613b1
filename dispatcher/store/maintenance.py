"""Partitions ahead of time, retention by dropping whole expired partitions (and deleting the
few rows kept outside them: health rollups, ended portal sessions), and ordering lanes whose
head went without an attempt settling it (they move on to their next delivery).

Every replica runs the loop; a transaction-scoped advisory lock lets exactly one do the work at
a time, and each step is one transaction, so a replica dying mid-way leaves nothing half-done
(the next run simply does the rest). Statements in queries/maintenance.sql.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from dispatcher.domain.health import rollup_cutoffs
from dispatcher.store import portal, stats
from dispatcher.store.database import Database
from dispatcher.store.queries import Queries, Statement

_LOCK_KEY = 0x64697372  # "disr"
_PARTITION = re.compile(r"^deliveries_p(\d{8})$")
PARTITIONS_AHEAD_DAYS = 2


class SQL(Queries, file="maintenance.sql"):
    try_lock: Statement
    ensure_partitions: Statement
    advance_lanes: Statement
    rows_in_default: Statement
    delivery_partitions: Statement
    bound_lock_waits: Statement
    lock_day: Statement
    day_has_pending: Statement
    forget_queued: Statement
    drop_day: Statement


@dataclass
class Report:
    ran: bool = False
    created: int = 0
    dropped: list[str] = field(default_factory=list)  # days, YYYYMMDD
    kept_pending: list[str] = field(default_factory=list)  # expired but still pending
    in_default: int = 0  # rows outside every daily partition
    rollups_deleted: int = 0  # endpoint health rollup rows past their use or retention
    lanes_advanced: int = 0  # ordering lanes whose head had gone without settling by attempt
    portal_sessions_deleted: int = 0  # portal sessions ended longer ago than the retention


async def run_maintenance(db: Database, now: datetime, retention_days: int) -> Report:
    report = Report()
    today = now.date()
    async with db.transaction() as conn:
        if not await conn.fetchval(*SQL.try_lock(key=_LOCK_KEY)):
            return report  # another replica is on it
        report.ran = True
        report.created = await conn.fetchval(
            *SQL.ensure_partitions(
                first_day=today - timedelta(days=1),
                last_day=today + timedelta(days=PARTITIONS_AHEAD_DAYS),
            ),
        )
        report.lanes_advanced = await conn.fetchval(*SQL.advance_lanes(now=now))
        report.in_default = await conn.fetchval(*SQL.rows_in_default())
        names = await conn.fetch(*SQL.delivery_partitions())
        report.rollups_deleted = await stats.forget_before(
            conn, rollup_cutoffs(now, retention_days)
        )
        report.portal_sessions_deleted = await portal.forget_ended(
            conn, now - timedelta(days=retention_days)
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
    """Drop one day of events, deliveries and their attempts together, unless a delivery there
    is pending."""
    day = _day(suffix)
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    end = start + timedelta(days=1)
    async with db.transaction() as conn:
        if not await conn.fetchval(*SQL.try_lock(key=_LOCK_KEY)):
            return False
        await conn.execute(*SQL.bound_lock_waits())
        await conn.execute(SQL.lock_day.sql.format(day=suffix))
        if await conn.fetchval(*SQL.day_has_pending(start=start, end=end)):
            return False
        await conn.execute(*SQL.forget_queued(start=start, end=end))
        await conn.execute(SQL.drop_day.sql.format(day=suffix))
    return True
