"""The process's background tasks are supervised: one that ends while the process runs stops it.

Every loop beside the API (the engine's claim loop, recorder, heartbeat and listener, the
sandbox carrier, the gauges and the partition maintenance) is written to run until the process
stops: each logs and waits out a database outage itself. One that ends anyway has met a bug,
and a process left running without it is half alive: it answers `/readyz` 200 while nothing
delivers, or its leases are handed to others while it still sends. So, as procrastinate's
worker does with its side tasks (`_monitor_side_tasks`), the first task to end is logged with
its exception, the process reports not ready at once (`/readyz` 503 naming the task,
`dispatcher_ready 0`), stops as it does on SIGTERM (attempts in flight finish, results are
written), and exits 1, so that the orchestrator starts a fresh one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from dispatcher import metrics
from dispatcher.errors import DispatcherError

log = structlog.get_logger("dispatcher")


class BackgroundTaskFailed(DispatcherError):
    """A background task ended while the process was running."""


class Supervisor:
    """Watches long-running tasks until `close`; the first to end sets `stop`.

    Done-callbacks rather than a watching task: nothing to start or cancel, and no task can
    end unnoticed, however early (one that has ended before `watch` is reported at once).
    """

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self._watching = True
        self._on_failure: list[Callable[[str], None]] = []
        self.failure: BackgroundTaskFailed | None = None

    @property
    def healthy(self) -> bool:
        """No watched task has ended: part of the process's readiness."""
        return self.failure is None

    def on_failure(self, callback: Callable[[str], None]) -> None:
        """Call `callback(task_name)` when a watched task ends (once, for the first)."""
        self._on_failure.append(callback)

    def watch(self, *tasks: asyncio.Task[Any]) -> None:
        for task in tasks:
            task.add_done_callback(self._ended)

    def close(self) -> None:
        """Stop watching: the process is stopping, and its tasks end on purpose now."""
        self._watching = False

    def raise_failure(self) -> None:
        """Raise BackgroundTaskFailed if a task ended (after shutdown: the exit status is 1)."""
        if self.failure is not None:
            raise self.failure

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if not self._watching or self.failure is not None:
            return
        name = task.get_name()
        # Reading the exception here also marks it retrieved: the shutdown may await the task
        # again without asyncio reporting it a second time.
        error = None if task.cancelled() else task.exception()
        reason = "cancelled" if task.cancelled() else repr(error) if error else "returned"
        log.error(
            "background_task.failed",
            task=name,
            reason=reason,
            consequence="not ready; the process stops and exits 1",
            exc_info=error,
        )
        self.failure = BackgroundTaskFailed(
            f"the background task {name!r} ended unexpectedly ({reason}); the process stopped"
        )
        metrics.READY.set(0)
        for callback in self._on_failure:
            callback(name)
        self._stop.set()
