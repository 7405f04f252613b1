"""A short timer that refreshes the gauges a scrape cannot compute cheaply itself: queue
depth and age, what waits for its endpoint (rate limit, concurrency, ordering lane) apart from
what no engine claims, pool use, and the process's own readiness (for the `dispatcher_ready`
alert), and the endpoints' rates adapted by flow control; it also frees the per-webhook series
of deleted webhooks. And the partition maintenance loop.

Both loops log a database error and try again next time; anything else ends the loop, and the
process's supervisor then stops the process (dispatcher/supervision.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from dispatcher import metrics
from dispatcher.domain.clock import Clock
from dispatcher.errors import DispatcherError
from dispatcher.settings import Settings
from dispatcher.store import flow_control, maintenance, queue, schema, webhooks
from dispatcher.store.database import Database

log = structlog.get_logger("dispatcher")
# An endpoint's concurrency without max_concurrency of its own (DISPATCHER_MAX_CONCURRENCY_
# PER_WEBHOOK): every slot leased is what holds its backlog back.
DEFAULT_CONCURRENCY = Settings.max_concurrency_per_webhook


async def refresh_once(
    db: Database,
    clock: Clock,
    engine_running: Callable[[], bool],
    default_concurrency: int = DEFAULT_CONCURRENCY,
) -> bool:
    """Refresh the gauges once; whether the process is ready: what `/readyz` answers 200 to
    (the database's checks, store/schema.py, and `engine_running()`, the process's own
    readiness beyond the database's), set first, apart from the queue's gauges (a statement
    on the queue that waits on a lock leaves readiness as it is)."""
    ready = all((await schema.database_checks(db)).values()) and engine_running()
    metrics.READY.set(1 if ready else 0)
    metrics.DB_POOL_IN_USE.set(db.in_use)
    metrics.DB_POOL_SIZE.set(db.size)
    try:
        now = clock.now()
        due, oldest = await queue.due_summary(db, now)
        metrics.QUEUE_DUE.set(due)
        metrics.QUEUE_OLDEST_AGE.set(oldest)
        held = await queue.held_summary(db, now, default_concurrency)
        for reason, rows in held.rows.items():
            metrics.QUEUE_HELD.labels(reason).set(rows)
        metrics.QUEUE_OLDEST_UNCLAIMED_AGE.set(held.oldest_unclaimed)
        # Flow control: the endpoints whose rate the receivers' 429s adapted, as every engine
        # left it (the database's), each its series.
        metrics.EFFECTIVE_RATES.replace(
            await flow_control.adapted_rates(db, metrics.WEBHOOK_SERIES.limit)
        )
        series = metrics.WEBHOOK_SERIES.ids()
        if series:
            metrics.WEBHOOK_SERIES.forget(await webhooks.gone(db, series))
    except DispatcherError as exc:
        log.debug("monitor.refresh_failed", error=str(exc))
    return ready


async def run(
    db: Database,
    clock: Clock,
    engine_running: Callable[[], bool],
    interval: float = 5.0,
    default_concurrency: int = DEFAULT_CONCURRENCY,
) -> None:
    while True:
        await refresh_once(db, clock, engine_running, default_concurrency)
        await asyncio.sleep(interval)


async def maintain(db: Database, clock: Clock, retention_days: int, interval: float) -> None:
    """Create partitions ahead and drop expired ones, now and then (one replica at a time)."""
    while True:
        try:
            report = await maintenance.run_maintenance(db, clock.now(), retention_days)
            if report.ran and (
                report.created
                or report.dropped
                or report.kept_pending
                or report.lanes_advanced
                or report.portal_sessions_deleted
            ):
                log.info(
                    "maintenance.done",
                    created=report.created,
                    dropped=report.dropped,
                    kept_pending=report.kept_pending,
                    lanes_advanced=report.lanes_advanced,
                    portal_sessions_deleted=report.portal_sessions_deleted,
                )
            if report.in_default:
                log.warning("maintenance.rows_in_default_partition", rows=report.in_default)
        except DispatcherError as exc:
            log.warning("maintenance.failed", error=str(exc))
        await asyncio.sleep(interval)
