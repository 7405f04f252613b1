"""The database's schema version, and the runner that brings a database to it.

Three files describe the same database, kept in agreement by tests:

- `schema.sql` is the whole database at the latest version, its functions excepted. A
  database without `dispatcher_schema` is made from it; it records its own version at the
  bottom (`INSERT INTO dispatcher_schema (version) VALUES (N)`).
- `dispatcher/store/migrations/NNNN_short_name.sql` takes a database from version NNNN - 1 to
  NNNN: its tables, columns, indexes, triggers and data. Version 1 is the first release's
  schema.sql, so migrations start at 0002; their numbers run without a gap up to schema.sql's
  version.
- `dispatcher/store/functions.sql` holds every function, as the latest version has them: a
  repeatable file (Flyway's pattern), applied by every upgrade, so a migration never restates
  a function and a function is changed in place.

The runner applies what a database lacks in ONE transaction: functions.sql with its bodies
unchecked (so that schema.sql and the migrations may use a function: a trigger, a generated
column, a default), then schema.sql (a fresh database) or each migration the database lacks,
in order, each recorded with its time, then functions.sql again, checked against the schema
now there. A failure leaves the database as it was, never half-way; an application's outbox
transaction sees the schema and the functions of one version, the old or the new, never a mix
(docs/operations.md, "Functions"). The transaction holds a transaction-scoped advisory lock
and reads the version under it, so replicas starting together serialise: the upgrade is
applied once, by whichever holds the lock, and the others then find nothing to do (a
transaction-scoped lock also works through a pooler in transaction mode). A database at a
version this code does not know (a newer release migrated it) is refused: code must not run
against a schema it does not know; see docs/operations.md for upgrades and rollbacks.
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
from dispatcher.store.queries import Queries, Statement

log = structlog.get_logger("dispatcher.schema")


class SQL(Queries, file="schema_versions.sql"):
    lock_schema: Statement
    bound_lock_waits: Statement
    lock_tables: Statement
    check_function_bodies: Statement
    record_version: Statement
    has_versions: Statement
    version: Statement


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
    """What this release knows: schema.sql, the version it records, the migrations, and the
    functions (functions.sql; empty: none, a test's release without functions)."""

    sql: str
    version: int
    migrations: tuple[Migration, ...]
    functions: str = ""

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


def functions_sql() -> str:
    """functions.sql, in a checkout or an installed wheel alike."""
    return resources.files("dispatcher.store").joinpath("functions.sql").read_text()


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
    return Schema(
        sql=sql,
        version=recorded_version(sql),
        migrations=load_migrations(),
        functions=functions_sql(),
    )


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
        return await _upgrade(conn, schema, lock_timeout, lock_attempts, retry_pause)
    except DRIVER_ERRORS as exc:
        if is_unavailable(exc):
            terminate(conn)
        raise translate(exc) from exc
    finally:
        await _close(conn)


async def _upgrade(
    conn: Connection, schema: Schema, lock_timeout: float, lock_attempts: int, pause: float
) -> Upgrade:
    """One transaction: read the version under the lock and apply everything the database
    lacks (see the module's docstring); tried again, whole, when a table lock could not be
    taken in time."""
    name = "the schema lock"
    for attempt in range(1, lock_attempts + 1):
        try:
            async with conn.transaction():
                await conn.execute(*SQL.lock_schema(key=_LOCK_KEY))
                found = await _version(conn)
                steps = _steps(schema, found)
                if not steps:
                    return Upgrade(found, schema.latest, ())
                log.info("schema.upgrading", found=found, steps=[step[0] for step in steps])
                started = time.monotonic()
                # After the advisory lock: waiting for another replica's upgrade is not
                # bounded, waiting for a table behind live traffic is.
                milliseconds = str(round(lock_timeout * 1000))
                await conn.execute(*SQL.bound_lock_waits(milliseconds=milliseconds))
                if found is not None:
                    name = "the upgrade's table locks"
                    await conn.execute(*SQL.lock_tables())
                if schema.functions:
                    # Bodies unchecked: they may name what the steps below make.
                    name = "functions.sql"
                    await conn.execute(*SQL.check_function_bodies(on="off"))
                    await _apply(conn, name, schema.functions)
                    await conn.execute(*SQL.check_function_bodies(on="on"))
                for name, sql, version in steps:
                    log.info("schema.applying", name=name, version=version)
                    await _apply(conn, name, sql)
                    if name == "schema.sql":
                        if await _version(conn) != version:
                            raise SchemaError(f"schema.sql did not record version {version}")
                    else:
                        await conn.execute(*SQL.record_version(version=version))
                if schema.functions:
                    name = "functions.sql"  # again, each body checked against the schema now
                    await _apply(conn, name, schema.functions)
            log.info("schema.upgraded", found=found, version=schema.latest,
                     seconds=round(time.monotonic() - started, 3))  # fmt: skip
            return Upgrade(found, schema.latest, tuple(step[0] for step in steps))
        except asyncpg.LockNotAvailableError as exc:
            if attempt == lock_attempts:
                raise SchemaError(
                    f"{name} could not take its table locks within {lock_timeout:g}s, "
                    f"{lock_attempts} times: a long transaction holds them (see "
                    f"pg_stat_activity and docs/operations.md); nothing of the upgrade was "
                    f"applied"
                ) from exc
            log.warning("schema.lock_busy", name=name, attempt=attempt, error=str(exc))
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


async def _apply(conn: Connection, name: str, sql: str) -> None:
    """One file of the upgrade, in its transaction; a failure names the file. A file of
    comments alone (a version whose change was to functions only) sends nothing."""
    if not re.sub(r"--[^\n]*", "", sql).strip():
        return
    try:
        await conn.execute(sql)
    except asyncpg.LockNotAvailableError:
        raise
    except asyncpg.PostgresError as exc:
        if is_unavailable(exc):
            raise
        raise SchemaError(f"{name} failed, nothing of the upgrade was applied: {exc}") from exc


def _steps(schema: Schema, found: int | None) -> list[tuple[str, str, int]]:
    """(name, SQL, version it leads to) of each file a database at `found` needs, in order;
    empty when it needs nothing."""
    steps: list[tuple[str, str, int]] = []
    while (step := _next(schema, found))[1] is not None:
        name, sql, version = step
        assert sql is not None
        steps.append((name, sql, version))
        found = version
    return steps


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
    if not await conn.fetchval(*SQL.has_versions()):
        return None
    version: int | None = await conn.fetchval(*SQL.version())
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
        if not await conn.fetchval(*SQL.has_versions()):
            return None
        version: int | None = await conn.fetchval(*SQL.version())
        return version
