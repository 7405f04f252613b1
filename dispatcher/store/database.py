"""The connection pool, and the one boundary where driver errors become domain errors.

Nothing outside `store/` sees an asyncpg exception: a failure that means "the server is not
there (right now)" becomes `DatabaseUnavailable` (the API answers 503 `unavailable` with
`Retry-After`; the engine backs off), any other refusal becomes `StoreError`.

One such failure is different: a connection lost while a commit was in flight (a
transaction's COMMIT, or a statement that commits on its own, sent from `acquire(commits=
True)`). The server may have committed and its answer been lost, so "unavailable" (read as
"nothing was stored") would not be true: it becomes `OutcomeUnknown`, which a writer that
chose its rows' ids before sending settles by looking on a fresh connection (`settle`).
A connection lost before the COMMIT was sent stored nothing: `DatabaseUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import asyncpg
import asyncpg.pool
import orjson
import structlog

from dispatcher.errors import DatabaseUnavailable, DispatcherError, OutcomeUnknown, Overloaded
from dispatcher.store.queries import Bound, Queries, Statement

Record: TypeAlias = asyncpg.Record
Connection: TypeAlias = "asyncpg.Connection[Record] | asyncpg.pool.PoolConnectionProxy[Record]"

log = structlog.get_logger("dispatcher.store")


class SQL(Queries, file="notifications.sql"):
    notify: Statement
    keepalive: Statement
    try_lead: Statement


class ConnectionsSQL(Queries, file="connections.sql"):
    end_backend: Statement


T = TypeVar("T")

# Errors that mean "the server is not there (right now)", as opposed to a bad statement.
# TimeoutError (a connect or acquire that took too long) is an OSError since Python 3.3;
# it is named for the reader. asyncpg's InterfaceError covers a connection that is closed or
# was taken back by the pool; ConnectionDoesNotExistError (08003) is a PostgresConnectionError.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,  # sqlstate class 08
    asyncpg.CannotConnectNowError,  # 57P03: starting up, shutting down, in recovery
    asyncpg.AdminShutdownError,  # 57P01
    asyncpg.CrashShutdownError,  # 57P02
    asyncpg.TooManyConnectionsError,  # 53300
    asyncpg.InternalClientError,  # a connection left in a broken protocol state
)
DRIVER_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, asyncpg.PostgresError)

# The same, by sqlstate: a server may answer with a code asyncpg has no class for.
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})

# A release resets the connection (one short statement); one that takes longer than this is
# given up and the connection closed instead.
RELEASE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 10.0
# How long `settle` tries to see what a write whose commit lost its answer did (the request
# waits that long at most, then answers 503 `outcome_unknown`), how long it waits between
# tries, and how long each try waits for the lost connection's backend to end.
SETTLE_TIMEOUT = 5.0
SETTLE_RETRY = 0.2
SETTLE_END_WAIT_MS = 1000

LOST_COMMIT = (
    "the connection to the database was lost while this request's change was being committed, "
    "and the database could not be reached to see whether it was kept: it may have been. "
    "Retry with the same Idempotency-Key"
)

# Whether the task (one API request) has committed a transaction: from then on its waits for a
# connection are no longer bounded, so that it can never be refused after it changed something
# (see `Database.acquire`). A task copies its creator's context, so this is per request.
_COMMITTED: contextvars.ContextVar[bool] = contextvars.ContextVar("committed", default=False)


def start_request() -> None:
    """Mark the running task as a request that has committed nothing yet. Called as each API
    request starts: a server's connections run in a copy of the context the server was
    started in, and that process had committed (its schema, the demo) before it served."""
    _COMMITTED.set(False)


@dataclass
class _Commit:
    """Whether a use's commit has been sent (from then on a lost connection leaves its
    outcome unknown), and the server process that was to carry it out."""

    sent: bool = False
    backend_pid: int | None = None


class StoreError(DispatcherError):
    """The database refused a statement."""


# InterfaceErrors that are about the statement or the client, not the server: a value asyncpg
# cannot encode for its column is a bug to report (500), not an outage to retry (503).
NOT_UNAVAILABLE: tuple[type[BaseException], ...] = (
    asyncpg.exceptions._base.DataError,
    asyncpg.exceptions._base.ClientConfigurationError,
    asyncpg.exceptions._base.UnsupportedClientFeatureError,
    asyncpg.exceptions._base.UnsupportedServerFeatureError,
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` means the server cannot be reached (as opposed to a refused statement)."""
    if isinstance(exc, NOT_UNAVAILABLE):
        return False
    if type(exc) is asyncpg.InterfaceError:
        # The base class also reports misuse (a wrong number of arguments: a bug, 500); only
        # a closed or pool-released connection means the server is away.
        return any(word in str(exc) for word in ("closed", "released", "connection"))
    if isinstance(exc, CONNECTION_ERRORS):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        return (
            state.startswith("08")
            or state in UNAVAILABLE_SQLSTATES
            or "cannot connect now" in str(exc).lower()
        )
    return False


def translate(exc: BaseException) -> DispatcherError:
    if isinstance(exc, asyncpg.QueryCanceledError):
        # 57014: a statement timeout, or a deadline of ours that fails the same way (the
        # payload filters of a fan-out, dispatcher_filter_passes). The transaction is rolled
        # back; nothing of it is stored. Work the database could not finish in time: retry.
        return Overloaded(
            "the database did not finish this request's work within its time limit; nothing "
            "was stored: retry shortly",
            reason="timeout",
        )
    if is_unavailable(exc):
        detail = str(exc).strip()
        reason = type(exc).__name__ + (f" ({detail[:200]})" if detail else "")
        return DatabaseUnavailable(f"database unavailable: {reason}")
    if isinstance(exc, asyncpg.PostgresError):
        return StoreError(f"database error {exc.sqlstate}: {_unquoted(exc)}")
    if isinstance(exc, NOT_UNAVAILABLE):
        return StoreError(f"database client error: {_unquoted(exc)}")
    return DispatcherError(str(exc))


def _unquoted(exc: BaseException) -> str:
    """The error's text, without the value asyncpg quotes when it cannot encode an argument
    ("invalid input for query argument $13: {'a': ..."): that value is request data, and
    this text reaches the log line of a 500. Which argument, and the kind of error, stay."""
    text = str(exc)
    argument = _ARGUMENT.search(text)
    if argument is None:
        return text
    return f"{type(exc).__name__}: invalid input for {argument.group(0)}"


_ARGUMENT = re.compile(r"query argument \$\d+")


def terminate(conn: Connection) -> None:
    """Close a broken connection at once, so that the pool replaces it instead of resetting
    it (a reset can hang on a connection in a broken state).

    Safe whether or not the pool already took the connection back: when the server drops a
    connection, asyncpg returns it to the pool by itself, and the proxy then refuses every
    call with InterfaceError ("released back to the pool"). There is nothing left to close
    then, and that refusal must not turn a 503 into a 500.
    """
    try:
        conn.terminate()
    except Exception as exc:  # released already, or closed: nothing to do
        log.debug("database.terminate_skipped", error=type(exc).__name__)


async def _init_connection(conn: Connection) -> None:
    await conn.set_type_codec(
        "jsonb",
        encoder=lambda value: orjson.dumps(value).decode(),
        decoder=orjson.loads,
        schema="pg_catalog",
    )


async def connect(url: str, **kwargs: Any) -> asyncpg.Connection[Record]:
    """A single connection outside the pool (LISTEN, admin)."""
    try:
        conn: asyncpg.Connection[Record] = await asyncpg.connect(url, **kwargs)
    except DRIVER_ERRORS as exc:
        raise translate(exc) from exc
    try:
        await _init_connection(conn)
    except DRIVER_ERRORS as exc:
        conn.terminate()
        raise translate(exc) from exc
    return conn


async def _no_session_state(conn: Connection) -> None:
    """What the pool runs on a connection it takes back: nothing (asyncpg still rolls back a
    transaction left open). Its default reset (`RESET ALL; UNLISTEN *; CLOSE ALL;
    pg_advisory_unlock_all()`) is one more round trip and statement per use, about a sixth of
    the API's time under load, undoing state this code never leaves: settings are `SET LOCAL`,
    advisory locks are transaction-scoped, and LISTEN has its own connection."""


# TCP keepalives on the server's side of each connection (ignored over a unix socket): a
# backend whose client vanished (a host gone, a link cut) is found out and ended within about
# a minute (idle 10 s, then 5 probes 5 s apart; data unacknowledged for 30 s), instead of
# the kernel's two hours.
KEEPALIVE_SETTINGS = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "5",
    "tcp_user_timeout": "30000",
}


def engine_session(heartbeat_timeout: float) -> dict[str, str]:
    """The session settings of an engine's connections. An engine's transactions are a few
    statements sent back to back; one left open (idle in transaction) for as long as it takes
    an engine to count as dead (DISPATCHER_HEARTBEAT_TIMEOUT) belongs to an engine that is
    stalled (a paused process, a link to Postgres that stopped passing bytes): Postgres ends
    that session, so the row locks it held (the rows of a record, a rate bucket, a lane) are
    free again and live engines take its leases back as for a killed engine. What the stalled
    engine was writing is rolled back; it writes it again if it comes back (the record keeps
    its results in memory until written)."""
    return {
        "idle_in_transaction_session_timeout": str(max(round(heartbeat_timeout * 1000), 1)),
        **KEEPALIVE_SETTINGS,
    }


class Database:
    """A pool of connections. Every use goes through `acquire` or `transaction`.

    It can exist before the server is reachable (`Database(url)`, then `await connect()`), so
    that a process can serve its probes while it waits for Postgres: until connected, every
    use raises DatabaseUnavailable, exactly as during an outage.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        min_size: int = 1,
        max_size: int = 10,
        acquire_timeout: float | None = None,
        session: Mapping[str, str] | None = None,
    ) -> None:
        """`session`: settings every connection of the pool starts with (engine_session)."""
        self._url = url
        self.session = {"application_name": "dispatcher", **KEEPALIVE_SETTINGS, **(session or {})}
        self.min_size = min_size
        self.max_size = max_size
        # How long a use may wait for a connection while all are taken (None: as long as it
        # takes). The slots mirror the pool's connections: waiting for one is waiting for a
        # connection to come free, told apart from opening one (a server that does not
        # answer: DatabaseUnavailable), which the pool's own connect timeout bounds.
        self.acquire_timeout = acquire_timeout
        self._slots = asyncio.Semaphore(max_size)
        self._waiting = 0
        self._pool: asyncpg.Pool | None = None
        self._wake_channels: set[str] = set()
        self._waker: asyncio.Task[None] | None = None
        self.settle_timeout = SETTLE_TIMEOUT

    @classmethod
    async def open(cls, url: str, *, min_size: int = 1, max_size: int = 10) -> Database:
        """A connected pool, or DatabaseUnavailable at once (the CLI's admin commands)."""
        db = cls(url, min_size=min_size, max_size=max_size)
        await db.connect()
        return db

    @property
    def url(self) -> str:
        if self._url is None:
            raise DatabaseUnavailable("database unavailable: no address yet")
        return self._url

    @property
    def connected(self) -> bool:
        return self._pool is not None

    async def connect(self, url: str | None = None) -> None:
        """Open the pool (one attempt); a no-op when open. A caller that bounds it in time
        (asyncio.timeout) may cancel it safely: a pool whose start fails or is cancelled
        closes what it had opened."""
        if url is not None:
            self._url = url
        if self._pool is not None:
            return
        pool = asyncpg.create_pool(
            self.url,
            min_size=self.min_size,
            max_size=self.max_size,
            init=_init_connection,
            reset=_no_session_state,
            command_timeout=60,
            timeout=10,
            server_settings=self.session,
        )
        try:
            await pool
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        self._pool = pool

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise DatabaseUnavailable("database unavailable: not connected yet")
        return self._pool

    def wake(self, channel: str) -> None:
        """NOTIFY `channel` soon, outside any transaction, coalesced.

        Called after a commit that made work for another process (the engines, the carrier).
        A NOTIFY inside the writing transaction would take Postgres's cluster-wide notify lock
        through that commit and its WAL flush, serialising every writer's commit; here, one
        background NOTIFY covers every commit that asked since the last one went out.
        """
        self._wake_channels.add(channel)
        if self._waker is None or self._waker.done():
            self._waker = asyncio.get_running_loop().create_task(self._notify(), name="wake")

    async def _notify(self) -> None:
        while self._wake_channels and self._pool is not None:
            channels = sorted(self._wake_channels)
            self._wake_channels.clear()
            try:
                async with self.acquire() as conn:
                    for channel in channels:
                        await conn.execute(*SQL.notify(channel=channel))
            except DispatcherError as exc:  # a lost wake-up costs a probe interval, not work
                log.debug("database.wake_failed", error=str(exc))

    async def close(self) -> None:
        waker, self._waker = self._waker, None
        if waker is not None and not waker.done():
            waker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waker
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            # close() waits for connections in use; a server that is gone must not hold the
            # exit (on error or timeout, asyncpg terminates every connection instead).
            await asyncio.wait_for(pool.close(), timeout=CLOSE_TIMEOUT)
        except Exception as exc:
            log.debug("database.close_failed", error=type(exc).__name__)

    @asynccontextmanager
    async def acquire(self, *, commits: bool = False) -> AsyncIterator[Connection]:
        """A connection of the pool, for the block.

        With `acquire_timeout`, a use that finds every connection taken waits at most that
        long, then raises Overloaded (the API's 503 `overloaded`): the bound applies to the
        wait only, before the connection is handed out, never to the work done with it. A
        task that has committed a transaction waits as long as it takes instead, so that a
        request is never refused after it changed something.

        `commits`: the block sends one write that commits on its own (no transaction): once
        the connection is lost its outcome is unknown, and it raises OutcomeUnknown instead
        of DatabaseUnavailable (module docstring).
        """
        async with self._use(_Commit(sent=commits)) as conn:
            yield conn

    @asynccontextmanager
    async def _use(self, commit: _Commit) -> AsyncIterator[Connection]:
        pool = self.pool
        await self._take_slot()
        try:
            try:
                conn = await pool.acquire()
            except DRIVER_ERRORS as exc:
                raise translate(exc) from exc
            if commit.sent:
                commit.backend_pid = conn.get_server_pid()
            try:
                yield conn
            except DRIVER_ERRORS as exc:
                if is_unavailable(exc):
                    terminate(conn)
                    if commit.sent:
                        lost = OutcomeUnknown(LOST_COMMIT, backend_pid=commit.backend_pid)
                        raise lost from exc
                raise translate(exc) from exc
            finally:
                await self._release(pool, conn)
        finally:
            self._slots.release()

    async def _take_slot(self) -> None:
        timeout = None if _COMMITTED.get() else self.acquire_timeout
        if timeout is None or not self._slots.locked():
            # A free slot, or no bound: no timer to arm (one per use otherwise, a cost
            # every statement paid).
            await self._slots.acquire()
            return
        self._waiting += 1
        try:
            async with asyncio.timeout(timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise Overloaded(
                f"no database connection came free within {timeout:g} s; retry shortly",
                reason="pool",
            ) from None
        finally:
            self._waiting -= 1

    @staticmethod
    async def _release(pool: asyncpg.Pool, conn: asyncpg.pool.PoolConnectionProxy[Record]) -> None:
        """Give the connection back. This never fails the caller: the work is done (a
        transaction has committed by now), and a connection that cannot be reset is simply
        closed; the pool opens a new one when it is needed."""
        try:
            await pool.release(conn, timeout=RELEASE_TIMEOUT)
        except Exception as exc:
            log.debug("database.release_failed", error=type(exc).__name__)
            terminate(conn)

    @asynccontextmanager
    async def transaction(self, settings: str = "") -> AsyncIterator[Connection]:
        """A connection in a transaction, for the block: committed when it ends, rolled
        back when it raises. A connection lost before the COMMIT was sent raises
        DatabaseUnavailable (nothing was stored); lost once it was sent, OutcomeUnknown.

        `settings`: statements without parameters (`SET LOCAL ...`) sent with the BEGIN, in
        the same round trip (the engine's transactions, whose every round trip waits for an
        event loop that may be busy serving the API)."""
        # A failed COMMIT or ROLLBACK reaches `_use`, which closes a broken connection and
        # translates the error; a successful COMMIT is final whatever the release does.
        commit = _Commit()
        async with self._use(commit) as conn:
            if not settings:
                async with conn.transaction():
                    yield conn
                    # Reached only when the block ended without an error: the COMMIT goes next.
                    commit.backend_pid = conn.get_server_pid()
                    commit.sent = True
            else:
                await conn.execute(f"BEGIN; {settings}")
                try:
                    yield conn
                except BaseException:
                    if not conn.is_closed():
                        with contextlib.suppress(*DRIVER_ERRORS):
                            await conn.execute("ROLLBACK")
                    raise
                commit.backend_pid = conn.get_server_pid()
                commit.sent = True
                await conn.execute("COMMIT")
            _COMMITTED.set(True)

    async def settle(self, lost: OutcomeUnknown, look: Callable[[Connection], Awaitable[T]]) -> T:
        """What a write whose commit lost its answer did, seen on a fresh connection: what
        `look` reads there (whether the write's rows are, by the ids chosen before it was
        sent). First the lost connection's backend is ended, and waited for: until it is
        gone it may still commit (bytes on their way, a commit in progress), so "not there"
        would not be final; once it is gone, it is.

        Tries for `settle_timeout` seconds (the pool opens new connections as the server
        comes back), then raises `lost`: the outcome stays unknown.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settle_timeout
        while True:
            try:
                async with asyncio.timeout_at(deadline), self.acquire() as conn:
                    if lost.backend_pid is None or await conn.fetchval(
                        *ConnectionsSQL.end_backend(
                            pid=lost.backend_pid, wait_ms=SETTLE_END_WAIT_MS
                        )
                    ):
                        return await look(conn)
            except (DatabaseUnavailable, Overloaded, TimeoutError) as exc:
                log.debug("database.settle_retry", error=type(exc).__name__)
            left = deadline - loop.time()
            if left <= 0:
                raise lost
            await asyncio.sleep(min(SETTLE_RETRY, left))

    @property
    def in_use(self) -> int:
        if self._pool is None:
            return 0
        return self._pool.get_size() - self._pool.get_idle_size()

    @property
    def waiting(self) -> int:
        """Uses waiting for a connection to come free now."""
        return self._waiting

    @property
    def size(self) -> int:
        """Connections open in the pool (0 before it is connected)."""
        return 0 if self._pool is None else self._pool.get_size()


async def fetch_one(conn: Connection, sql: Bound) -> Record:
    """One row that must exist (INSERT/UPDATE ... RETURNING of a row we hold); `sql` as in
    `rows.fetch_row`."""
    row = await conn.fetchrow(*sql)
    if row is None:
        raise StoreError("statement returned no row")
    return row
