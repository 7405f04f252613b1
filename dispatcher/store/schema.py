"""The database's schema version, and the runner that brings a database to it.

Two descriptions of the same database, kept in agreement by tests:

- `schema.sql` is the whole database at the latest version. A database without
  `dispatcher_schema` is made from it in one transaction; it records its own version at the
  bottom (`INSERT INTO dispatcher_schema (version) VALUES (N)`).
- `dispatcher/store/migrations/NNNN_short_name.sql` takes a database from version NNNN - 1 to
  NNNN. Version 1 is the first release's schema.sql, so migrations start at 0002; their
  numbers run without a gap up to schema.sql's version.

The runner applies what a database lacks, each migration once, in order, in a transaction of
its own (a failure leaves the database at the last version that committed, never half-way),
and records the version with its time in the same transaction. Every step holds a
transaction-scoped advisory lock and reads the version again under it, so replicas starting
together serialise: each step is applied once, by whichever holds the lock, and the others
then find nothing to do (a transaction-scoped lock also works through a pooler in
transaction mode; between steps, runs may take turns). A database at a version this code
does not know (a newer release migrated it) is refused: code must not run against a schema it
does not know; see docs/operations.md for upgrades and rollbacks.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import asyncpg
import structlog

from dispatcher.errors import DispatcherError, Overloaded
from dispatcher.store.database import (
    DRIVER_ERRORS,
    Connection,
    Database,
    connect,
    is_unavailable,
    terminate,
    translate,
)
from dispatcher.store.queries import Queries

log = structlog.get_logger("dispatcher.schema")


class SQL(Queries, file="schema_versions.sql"):
    lock_schema: str
    bound_lock_waits: str
    record_version: str
    has_versions: str
    version: str


_LOCK_KEY = 0x64697370  # "disp"
# The first release's schema; a database is never older than this.
BASELINE_VERSION = 1
MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
RECORDED_VERSION = re.compile(
    r"^INSERT INTO dispatcher_schema \(version\) VALUES \((\d+)\)", re.MULTILINE
)
# A migration waits this long for a table lock, then gives up, waits and tries again. While
# an ALTER TABLE waits for its lock, every new statement on that table queues behind it: the
# bound keeps a long transaction elsewhere from turning a migration into an outage.
LOCK_TIMEOUT = 5.0
LOCK_ATTEMPTS = 12
LOCK_RETRY_PAUSE = 1.0
CLOSE_TIMEOUT = 10.0
APPLICATION_NAME = "dispatcher migrate"


class SchemaError(DispatcherError):
    """The database's schema cannot be brought to this release's version: a newer one, a
    migration that failed or could not take its locks, or files that disagree. Not an outage:
    the start-up does not wait for it to pass."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str  # the file name without `.sql`, as `dispatcher migrate` prints it
    sql: str


@dataclass(frozen=True)
class Schema:
    """What this release knows: schema.sql, the version it records, the migrations."""

    sql: str
    version: int
    migrations: tuple[Migration, ...]

    @property
    def latest(self) -> int:
        return max([self.version, *(m.version for m in self.migrations)])

    def problems(self) -> list[str]:
        """Why these files cannot be trusted to agree; empty when they can."""
        found = [m.version for m in self.migrations]
        expected = list(range(BASELINE_VERSION + 1, self.version + 1))
        if found == expected:
            return []
        return [
            f"schema.sql records version {self.version}, so migrations "
            f"{_numbers(expected) or '(none)'} must exist, once each; found "
            f"{_numbers(found) or '(none)'}"
        ]


@dataclass(frozen=True)
class Upgrade:
    """What `upgrade` found and did."""

    before: int | None  # None: a database without dispatcher_schema
    after: int
    applied: tuple[str, ...]  # in order: "schema.sql" or migration names


def _numbers(versions: Iterable[int]) -> str:
    return ", ".join(f"{v:04d}" for v in versions)


def schema_path() -> Path:
    """schema.sql at the repository root, or where a wheel install put it."""
    candidates = [
        Path(__file__).resolve().parents[2] / "schema.sql",
        Path(sys.prefix) / "share" / "dispatcher" / "schema.sql",
    ]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise FileNotFoundError("schema.sql not found in " + ", ".join(map(str, candidates)))


def migrations_dir() -> Traversable:
    """The migrations package's folder, in a checkout or an installed wheel alike."""
    return resources.files("dispatcher.store.migrations")


def recorded_version(sql: str) -> int:
    """The version a schema file records at its bottom."""
    found = RECORDED_VERSION.findall(sql)
    if len(found) != 1:
        raise SchemaError(
            "schema.sql must record its version once: "
            "INSERT INTO dispatcher_schema (version) VALUES (N)"
        )
    return int(found[0])


def load_migrations(directory: Traversable | None = None) -> tuple[Migration, ...]:
    """Every `NNNN_short_name.sql` in `directory`, by number. Another `.sql` file there is an
    error, not something to skip: a misnamed migration silently left out would leave
    databases behind."""
    directory = directory or migrations_dir()
    migrations: list[Migration] = []
    for entry in directory.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = MIGRATION_NAME.match(entry.name)
        if match is None:
            raise SchemaError(
                f"migration file {entry.name!r} is not named NNNN_short_name.sql "
                "(four digits, lower case letters, digits and _)"
            )
        migrations.append(Migration(int(match[1]), entry.name[: -len(".sql")], entry.read_text()))
    migrations.sort(key=lambda m: (m.version, m.name))
    return tuple(migrations)


def load() -> Schema:
    """This release's schema.sql and migrations, as installed."""
    sql = schema_path().read_text()
    return Schema(sql=sql, version=recorded_version(sql), migrations=load_migrations())


def _latest_version() -> int:
    """What the module's SCHEMA_VERSION says: the highest version either description knows.
    Their agreement is checked where it matters (`upgrade` refuses, and a test fails), not at
    import, so that a half-written migration does not break every command."""
    versions = [int(v) for v in RECORDED_VERSION.findall(schema_path().read_text())]
    for entry in migrations_dir().iterdir():
        match = MIGRATION_NAME.match(entry.name)
        if match is not None:
            versions.append(int(match[1]))
    return max(versions, default=BASELINE_VERSION)


# The version this code runs against; `/readyz` and the readiness gauge compare with it.
SCHEMA_VERSION = _latest_version()


async def upgrade(
    db: Database,
    schema: Schema | None = None,
    *,
    lock_timeout: float = LOCK_TIMEOUT,
    lock_attempts: int = LOCK_ATTEMPTS,
    retry_pause: float = LOCK_RETRY_PAUSE,
) -> Upgrade:
    """Bring the database to the latest version; see the module's docstring.

    Runs on a connection of its own, outside the pool: a pool connection's 60 s statement
    timeout would cancel a long migration half-way (it rolls back, but would never finish),
    and a replica waiting for another's migration must wait as long as that takes.
    """
    schema = schema or load()
    problems = schema.problems()
    if problems:
        raise SchemaError("this release's schema files disagree: " + "; ".join(problems))
    # Named, so that pg_stat_activity shows what is waiting or holding a lock during an upgrade.
    conn = await connect(db.url, server_settings={"application_name": APPLICATION_NAME})
    try:
        before: int | None = None
        applied: list[str] = []
        for step in range(len(schema.migrations) + 2):
            found, done = await _step(conn, schema, lock_timeout, lock_attempts, retry_pause)
            if step == 0:
                before = found
            if done is None:
                return Upgrade(before, schema.latest, tuple(applied))
            applied.append(done)
        raise SchemaError("the schema version did not settle (is another release migrating?)")
    except DRIVER_ERRORS as exc:
        if is_unavailable(exc):
            terminate(conn)
        raise translate(exc) from exc
    finally:
        await _close(conn)


async def _step(
    conn: Connection, schema: Schema, lock_timeout: float, lock_attempts: int, pause: float
) -> tuple[int | None, str | None]:
    """One transaction: read the version under the lock and apply what comes next, if
    anything. Returns (the version found, the name of what was applied or None)."""
    name = "the schema lock"
    for attempt in range(1, lock_attempts + 1):
        try:
            async with conn.transaction():
                await conn.execute(SQL.lock_schema, _LOCK_KEY)
                found = await _version(conn)
                name, sql, version = _next(schema, found)
                if sql is None:
                    return found, None
                log.info("schema.applying", name=name, version=version, found=found)
                started = time.monotonic()
                # After the advisory lock: waiting for another replica's migration is not
                # bounded, waiting for a table behind live traffic is.
                await conn.execute(SQL.bound_lock_waits, str(round(lock_timeout * 1000)))
                try:
                    await conn.execute(sql)
                except asyncpg.LockNotAvailableError:
                    raise
                except asyncpg.PostgresError as exc:
                    if is_unavailable(exc):
                        raise
                    raise SchemaError(f"{name} failed, nothing of it was applied: {exc}") from exc
                if name == "schema.sql":
                    if await _version(conn) != version:
                        raise SchemaError(f"schema.sql did not record version {version}")
                else:
                    await conn.execute(SQL.record_version, version)
            log.info("schema.applied", name=name, version=version,
                     seconds=round(time.monotonic() - started, 3))  # fmt: skip
            return found, name
        except asyncpg.LockNotAvailableError as exc:
            if attempt == lock_attempts:
                raise SchemaError(
                    f"{name} could not take its table locks within {lock_timeout:g}s, "
                    f"{lock_attempts} times: a long transaction holds them (see "
                    f"pg_stat_activity and docs/operations.md); nothing of it was applied"
                ) from exc
            log.warning("schema.lock_busy", name=name, attempt=attempt, error=str(exc))
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _next(schema: Schema, found: int | None) -> tuple[str, str | None, int]:
    """(name, SQL, version it leads to) of what a database at `found` needs next; SQL is None
    when it needs nothing."""
    if found is None:
        return "schema.sql", schema.sql, schema.version
    if found == schema.latest:
        return "", None, found
    if found > schema.latest:
        raise SchemaError(
            f"the database is at schema version {found}, newer than this release knows "
            f"({schema.latest}): a newer dispatcher migrated it. Run that release (or a newer "
            "one), or restore the backup taken before the upgrade (docs/operations.md)"
        )
    if found < BASELINE_VERSION:
        raise SchemaError(f"the database records schema version {found}, which never existed")
    migration = next(m for m in schema.migrations if m.version == found + 1)
    return migration.name, migration.sql, migration.version


async def _version(conn: Connection) -> int | None:
    """The recorded version, or None when there is no dispatcher_schema table at all."""
    if not await conn.fetchval(SQL.has_versions):
        return None
    version: int | None = await conn.fetchval(SQL.version)
    if version is None:
        raise SchemaError("dispatcher_schema is empty: this database was not made by dispatcher")
    return version


async def _close(conn: Connection) -> None:
    try:
        await asyncio.wait_for(conn.close(), timeout=CLOSE_TIMEOUT)
    except Exception as exc:  # the work is committed (or rolled back) already
        log.debug("schema.close_failed", error=type(exc).__name__)
        terminate(conn)


async def apply_schema(db: Database) -> int:
    """Bring the database to SCHEMA_VERSION (see `upgrade`); returns the version now."""
    return (await upgrade(db)).after


async def database_checks(db: Database) -> dict[str, bool]:
    """The database's part of readiness, the one definition `/readyz` and `dispatcher_ready`
    share: `database` (it answers) and `schema` (at the version this release runs).

    Overloaded is ready: when no connection comes free in time (DISPATCHER_POOL_ACQUIRE_TIMEOUT)
    every one is busy serving, so the database answers, and the schema is the one this
    process checked before it took traffic. A busy process taken out of rotation would only
    move its load to the others (docs/configuration.md, "Overload"). The statement reads only
    the schema's own table: a long lock on another table (the queue's) does not make a
    process unready."""
    try:
        version = await current_version(db)
    except Overloaded:
        return {"database": True, "schema": True}
    except Exception:
        return {"database": False, "schema": False}
    return {"database": True, "schema": version == SCHEMA_VERSION}


async def current_version(db: Database) -> int | None:
    async with db.acquire() as conn:
        if not await conn.fetchval(SQL.has_versions):
            return None
        version: int | None = await conn.fetchval(SQL.version)
        return version
