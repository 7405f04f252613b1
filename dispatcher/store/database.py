"""The connection pool, and the one boundary where driver errors become domain errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import asyncpg
import asyncpg.pool
import orjson

from dispatcher.errors import DatabaseUnavailable, DispatcherError

Record: TypeAlias = asyncpg.Record
Connection: TypeAlias = "asyncpg.Connection[Record] | asyncpg.pool.PoolConnectionProxy[Record]"

# Errors that mean "the server is not there (right now)", as opposed to a bad statement.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InternalClientError,  # a connection left in a broken protocol state
)
DRIVER_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, asyncpg.PostgresError)


class StoreError(DispatcherError):
    """The database refused a statement."""


def translate(exc: BaseException) -> DispatcherError:
    if isinstance(exc, CONNECTION_ERRORS):
        return DatabaseUnavailable(f"database unavailable: {type(exc).__name__}")
    if isinstance(exc, asyncpg.PostgresError):
        return StoreError(f"database error {exc.sqlstate}: {exc}")
    return DispatcherError(str(exc))


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
        await _init_connection(conn)
        return conn
    except DRIVER_ERRORS as exc:
        raise translate(exc) from exc


class Database:
    """A pool of connections. Every use goes through `acquire` or `transaction`."""

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        self.pool = pool
        self.url = url

    @classmethod
    async def open(cls, url: str, *, min_size: int = 1, max_size: int = 10) -> Database:
        try:
            pool = await asyncpg.create_pool(
                url,
                min_size=min_size,
                max_size=max_size,
                init=_init_connection,
                command_timeout=60,
                timeout=10,
                server_settings={"application_name": "dispatcher"},
            )
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        return cls(pool, url)

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Connection]:
        try:
            conn = await self.pool.acquire()
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        try:
            yield conn
        except CONNECTION_ERRORS as exc:
            # A broken connection goes back closed, so the pool replaces it instead of
            # trying to reset it (which can hang on a connection in a broken state).
            conn.terminate()
            raise translate(exc) from exc
        except asyncpg.PostgresError as exc:
            raise translate(exc) from exc
        finally:
            await self.pool.release(conn, timeout=10)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self.acquire() as conn:
            try:
                async with conn.transaction():
                    yield conn
            except CONNECTION_ERRORS:
                conn.terminate()
                raise

    @property
    def in_use(self) -> int:
        return self.pool.get_size() - self.pool.get_idle_size()

    async def ping(self) -> bool:
        try:
            async with self.acquire() as conn:
                await conn.fetchval("SELECT 1")
            return True
        except DispatcherError:
            return False


async def fetch_one(conn: Connection, sql: str, *args: Any) -> Record:
    """One row that must exist (INSERT/UPDATE ... RETURNING of a row we hold)."""
    row = await conn.fetchrow(sql, *args)
    if row is None:
        raise StoreError("statement returned no row")
    return row
