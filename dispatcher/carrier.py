"""Outbound message transport. `sandbox` is the default carrier: it needs no telecom account.

The sandbox moves each outgoing message `queued -> sent -> delivered`, one step per
`DISPATCHER_SANDBOX_DELAY` seconds, and fails deterministically (`undelivered`) for the test
numbers below, so every path (and its webhook events) can be tried for free.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import structlog

from dispatcher.domain.clock import Clock
from dispatcher.errors import DispatcherError
from dispatcher.store import messages
from dispatcher.store.database import Database
from dispatcher.store.notifications import DELIVERIES_CHANNEL

# Documented in docs/messages.md: sending to these ends `undelivered`.
SANDBOX_FAILING_NUMBERS: frozenset[str] = frozenset({"+15005550001", "+15005550002"})

log = structlog.get_logger(__name__)


class SandboxCarrier:
    def __init__(self, db: Database, clock: Clock, delay: float, batch: int = 200) -> None:
        self.db = db
        self.clock = clock
        self.delay = timedelta(seconds=delay)
        self.batch = batch
        self.wake = asyncio.Event()

    async def advance(self) -> int:
        """Move every due message one step; returns how many moved."""
        now = self.clock.now()
        async with self.db.transaction() as conn:
            due = await messages.claim_carrier_due(conn, now, self.batch)
            for row in due:
                if row["status"] == "queued":
                    await messages.move_status(
                        conn,
                        row["id"],
                        "sent",
                        now=now,
                        carrier_due_at=now + self.delay,
                        event_type=None,
                    )
                elif row["to_number"] in SANDBOX_FAILING_NUMBERS:
                    await messages.move_status(
                        conn,
                        row["id"],
                        "undelivered",
                        now=now,
                        carrier_due_at=None,
                        event_type="message.failed",
                    )
                else:
                    await messages.move_status(
                        conn,
                        row["id"],
                        "delivered",
                        now=now,
                        carrier_due_at=None,
                        event_type="message.delivered",
                    )
        if any(row["status"] != "queued" for row in due):
            self.db.wake(DELIVERIES_CHANNEL)  # events were made: wake the engines
        return len(due)

    async def run(self, poll_interval: float = 0.5) -> None:
        """Advance forever; woken early by new messages (NOTIFY dispatcher_carrier)."""
        while True:
            try:
                while await self.advance() >= self.batch:
                    pass
            except DispatcherError as exc:
                log.warning("carrier.advance_failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=poll_interval)
            self.wake.clear()
