"""A short timer that refreshes the gauges a scrape cannot compute cheaply itself: queue
depth and age, pool use, and the process's own readiness (for the `dispatcher_ready` alert)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from dispatcher import metrics
from dispatcher.domain.clock import Clock
from dispatcher.errors import DispatcherError
from dispatcher.store import queue, schema
from dispatcher.store.database import Database

log = structlog.get_logger("dispatcher")


async def refresh_once(db: Database, clock: Clock, engine_running: Callable[[], bool]) -> bool:
    ready = False
    try:
        due, oldest = await queue.due_summary(db, clock.now())
        metrics.QUEUE_DUE.set(due)
        metrics.QUEUE_OLDEST_AGE.set(oldest)
        ready = await schema.current_version(db) == schema.SCHEMA_VERSION and engine_running()
    except DispatcherError as exc:
        log.debug("monitor.refresh_failed", error=str(exc))
    metrics.DB_POOL_IN_USE.set(db.in_use)
    metrics.DB_POOL_SIZE.set(db.pool.get_size())
    metrics.READY.set(1 if ready else 0)
    return ready


async def run(
    db: Database, clock: Clock, engine_running: Callable[[], bool], interval: float = 5.0
) -> None:
    while True:
        await refresh_once(db, clock, engine_running)
        await asyncio.sleep(interval)
