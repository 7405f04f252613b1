"""LISTEN on a dedicated connection, reconnecting with backoff when it is lost.

NOTIFY is only a wake-up: missing one costs at most a poll interval, never a delivery. After
every (re)connect the callback fires once, to catch up on anything sent while we were away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from dispatcher.errors import DispatcherError
from dispatcher.store.database import DRIVER_ERRORS, SQL, connect

log = structlog.get_logger("dispatcher.store")

DELIVERIES_CHANNEL = "dispatcher_deliveries"  # new deliveries: wakes the engines
WATCH_ERRORS: tuple[type[BaseException], ...] = (*DRIVER_ERRORS, TimeoutError)


class Listener:
    def __init__(self, url: str, channel: str, on_notify: Callable[[], None]) -> None:
        self.url = url
        self.channel = channel
        self.on_notify = on_notify
        self.connected = False

    async def run(self) -> None:
        backoff = 0.2
        while True:
            lost = asyncio.Event()
            try:
                conn = await connect(self.url, timeout=10)
            except DispatcherError as exc:
                if self.connected or backoff == 0.2:
                    log.warning("listener.disconnected", channel=self.channel, error=str(exc))
                self.connected = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            try:
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await conn.add_listener(self.channel, self._notified)
                if not self.connected:
                    log.info("listener.connected", channel=self.channel)
                self.connected = True
                backoff = 0.2
                self.on_notify()
                await self._watch(conn, lost)
            except WATCH_ERRORS as exc:
                log.warning("listener.lost", channel=self.channel, error=type(exc).__name__)
            finally:
                self.connected = False
                if not conn.is_closed():
                    conn.terminate()

    async def _watch(self, conn: Any, lost: asyncio.Event) -> None:
        """Wait for the connection to drop; a cheap query now and then notices a dead socket."""
        while not lost.is_set():
            try:
                await asyncio.wait_for(lost.wait(), timeout=5.0)
            except TimeoutError:
                await asyncio.wait_for(conn.fetchval(SQL.keepalive), timeout=5.0)

    def _notified(self, *_: Any) -> None:
        self.on_notify()
