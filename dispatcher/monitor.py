"""A short timer that refreshes the gauges a scrape cannot compute cheaply itself: queue
depth and age, pool use, and the process's own readiness (for the `dispatcher_ready` alert);
and the partition maintenance loop.

Both loops log a database error and try again next time; anything else ends the loop, and the
process's supervisor then stops the process (dispatcher/supervision.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from dispatcher import metrics
from dispatcher.domain.clock import Clock
from dispatcher.errors import DispatcherError
from dispatcher.store import maintenance, queue, schema
from dispatcher.store.database import Database

log = structlog.get_logger("dispatcher")


async def refresh_once(db: Database, clock: Clock, engine_running: Callable[[], bool]) -> bool:
    """Refresh the gauges once; whether the process is ready (schema current and
    `engine_running()`, the process's own readiness beyond the database's)."""
    ready = False
    try:
        due, oldest = await queue.due_summary(db, clock.now())
        metrics.QUEUE_DUE.set(due)
        metrics.QUEUE_OLDEST_AGE.set(oldest)
        ready = await schema.current_version(db) == schema.SCHEMA_VERSION and engine_running()
    except DispatcherError as exc:
        log.debug("monitor.refresh_failed", error=str(exc))
    metrics.DB_POOL_IN_USE.set(db.in_use)
    metrics.DB_POOL_SIZE.set(db.size)
    metrics.READY.set(1 if ready else 0)
    return ready


async def run(
    db: Database, clock: Clock, engine_running: Callable[[], bool], interval: float = 5.0
) -> None:
    while True:
        await refresh_once(db, clock, engine_running)
        await asyncio.sleep(interval)


async def maintain(db: Database, clock: Clock, retention_days: int, interval: float) -> None:
    """Create partitions ahead and drop expired ones, now and then (one replica at a time)."""
    while True:
        try:
            report = await maintenance.run_maintenance(db, clock.now(), retention_days)
            if report.ran and (
                report.created or report.dropped or report.kept_pending or report.lanes_advanced
            ):
                log.info(
                    "maintenance.done",
                    created=report.created,
                    dropped=report.dropped,
                    kept_pending=report.kept_pending,
                    lanes_advanced=report.lanes_advanced,
                )
            if report.in_default:
                log.warning("maintenance.rows_in_default_partition", rows=report.in_default)
        except DispatcherError as exc:
            log.warning("maintenance.failed", error=str(exc))
        await asyncio.sleep(interval)
