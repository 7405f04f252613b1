"""Outbound message transport. `sandbox` is the default carrier: it needs no telecom account.

The sandbox moves each outgoing message `queued -> sent -> delivered`, one step per
`DISPATCHER_SANDBOX_DELAY` seconds, and fails deterministically (`undelivered`) for the test
numbers below, so every path (and its webhook events) can be tried for free.

It polls (twice a second by default) rather than being woken: a message becomes due only
`DISPATCHER_SANDBOX_DELAY` after its previous step, so a wake-up when it is sent could not
move it any sooner, and would cost the API a NOTIFY per message.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import structlog

from dispatcher.domain.clock import Clock
from dispatcher.domain.enums import MessageStatus
from dispatcher.errors import DispatcherError
from dispatcher.store import messages
from dispatcher.store.database import Database
from dispatcher.store.notifications import DELIVERIES_CHANNEL
from dispatcher.store.rows import MessageRow

# Documented in docs/messages.md: sending to these ends `undelivered`.
SANDBOX_FAILING_NUMBERS: frozenset[str] = frozenset({"+15005550001", "+15005550002"})

log = structlog.get_logger(__name__)


class SandboxCarrier:
    def __init__(self, db: Database, clock: Clock, delay: float, batch: int = 200) -> None:
        self.db = db
        self.clock = clock
        self.delay = timedelta(seconds=delay)
        self.batch = batch

    def step(self, row: MessageRow, now: datetime) -> messages.CarrierMove:
        """What the sandbox does next with a due message: queued -> sent, then delivered (or
        undelivered for the failing test numbers)."""
        if row.status == MessageStatus.QUEUED:
            return messages.CarrierMove(row.id, MessageStatus.SENT, now + self.delay, None)
        if row.to_number in SANDBOX_FAILING_NUMBERS:
            return messages.CarrierMove(row.id, MessageStatus.UNDELIVERED, None, "message.failed")
        return messages.CarrierMove(row.id, MessageStatus.DELIVERED, None, "message.delivered")

    async def advance(self) -> int:
        """Move every due message one step; returns how many moved."""
        now = self.clock.now()
        async with self.db.transaction() as conn:
            due = await messages.claim_carrier_due(conn, now, self.batch)
            await messages.move_statuses(conn, [self.step(row, now) for row in due], now=now)
        if any(row.status != MessageStatus.QUEUED for row in due):
            self.db.wake(DELIVERIES_CHANNEL)  # events were made: wake the engines
        return len(due)

    async def run(self, poll_interval: float = 0.5) -> None:
        """Advance forever, every `poll_interval` seconds (at once again after a full batch).
        A database outage is logged and waited out; anything else ends the task, and the
        process's supervisor stops the process (see dispatcher/supervision.py)."""
        while True:
            try:
                while await self.advance() >= self.batch:
                    pass
            except DispatcherError as exc:
                log.warning("carrier.advance_failed", error=str(exc))
            await asyncio.sleep(poll_interval)
