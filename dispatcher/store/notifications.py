"""LISTEN on a dedicated connection, reconnecting with backoff when it is lost.

NOTIFY is only a wake-up: missing one costs at most a poll interval, never a delivery. After
every (re)connect the callback fires once, to catch up on anything sent while we were away.

The engines' listener can also lead: the connection that holds the session-level advisory
lock `POLLER_LOCK` is the one poller of the database (dispatcher/engine/worker.py, `_poll`).
The lock lives and dies with the listening session, so a poller whose process or connection
goes away frees it at once, and another engine takes it at its next try.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from dispatcher.errors import DatabaseUnavailable, DispatcherError
from dispatcher.store.database import DRIVER_ERRORS, SQL, Connection, connect, translate

log = structlog.get_logger("dispatcher.store")

DELIVERIES_CHANNEL = "dispatcher_deliveries"  # new deliveries: wakes the engines
# The session-level advisory lock whose holder is the database's one poller
# ("dispoll" in ASCII: a key no other lock of ours uses, the same in every release).
POLLER_LOCK = 0x64_69_73_70_6F_6C_6C
# How long a statement on the listening connection may take (asyncpg's own timeout).
STATEMENT_TIMEOUT = 5.0
WATCH_ERRORS: tuple[type[BaseException], ...] = (*DRIVER_ERRORS, TimeoutError)

T = TypeVar("T")


class Listener:
    def __init__(self, url: str, channel: str, on_notify: Callable[[], None]) -> None:
        self.url = url
        self.channel = channel
        self.on_notify = on_notify
        self.connected = False
        # Whether this session holds POLLER_LOCK (lost with the session).
        self.leading = False
        self._conn: Any = None
        # One statement at a time on the connection (keepalive, lock, probe, notify).
        self._using = asyncio.Lock()

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
                self._conn = conn
                self.connected = True
                backoff = 0.2
                self.on_notify()
                await self._watch(lost)
            except WATCH_ERRORS as exc:
                log.warning("listener.lost", channel=self.channel, error=type(exc).__name__)
            finally:
                self.connected = False
                self.leading = False
                self._conn = None
                if not conn.is_closed():
                    conn.terminate()

    async def use(self, statement: Callable[[Connection], Awaitable[T]]) -> T:
        """Run `statement` on the listening connection (one at a time); DatabaseUnavailable
        while it is not connected. Errors are translated (dispatcher.errors). The statement
        bounds its own wait (STATEMENT_TIMEOUT): the poller runs this 40 times a second, and
        a task per call (asyncio.wait_for) would be most of its cost."""
        async with self._using:
            conn = self._conn
            if conn is None:
                raise DatabaseUnavailable("database unavailable: the listener is not connected")
            try:
                return await statement(conn)
            except DRIVER_ERRORS as exc:
                raise translate(exc) from exc

    async def try_lead(self) -> bool:
        """Take POLLER_LOCK if nobody holds it; whether this session holds it now."""
        if not self.leading:
            held = await self.use(
                lambda conn: conn.fetchval(
                    *SQL.try_lead(key=POLLER_LOCK), timeout=STATEMENT_TIMEOUT
                )
            )
            self.leading = bool(held)
        return self.leading

    async def announce(self) -> None:
        """Wake every engine (this one too): the poller found due work."""
        await self.use(
            lambda conn: conn.execute(*SQL.notify(channel=self.channel), timeout=STATEMENT_TIMEOUT)
        )

    async def _watch(self, lost: asyncio.Event) -> None:
        """Wait for the connection to drop; a cheap query now and then notices a dead socket."""
        while not lost.is_set():
            try:
                await asyncio.wait_for(lost.wait(), timeout=5.0)
            except TimeoutError:
                try:
                    await self.use(
                        lambda conn: conn.fetchval(*SQL.keepalive(), timeout=STATEMENT_TIMEOUT)
                    )
                except DispatcherError as exc:
                    raise TimeoutError from exc

    def _notified(self, *_: Any) -> None:
        self.on_notify()
