"""Migrations: numbered files applied once each, in order, recorded, under the advisory lock.

A database made by the first release's schema.sql (tests/store/schema_v1.sql, byte for byte
`git show c801a91:schema.sql`) and migrated ends up with the schema of a fresh one; the
deliveries it held survive (tests/store/test_upgrade_path.py). A database newer than the code
is refused; concurrent runs apply each step once; the whole upgrade is one transaction, so a
failing step leaves the database as it was; a step that cannot take its table locks gives up
instead of queueing traffic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from dispatcher.store import schema
from dispatcher.store.database import Database
from tests.conftest import wait_for
from tests.processes import cli
from tests.store.catalog import describe
from tests.store.conftest import NewDatabase, versions


async def migrate(url: str, **options: Any) -> schema.Upgrade:
    db = await Database.open(url, min_size=1, max_size=1)
    try:
        return await schema.upgrade(db, **options)
    finally:
        await db.close()


def test_the_migrations_lead_to_the_version_schema_sql_records() -> None:
    """schema.sql and the migrations describe the same last version: the last migration's
    number is schema.sql's version, and the numbers run from 0002 without a gap."""
    files = schema.load()
    assert files.problems() == []
    numbers = [m.version for m in files.migrations]
    assert numbers == list(range(2, files.version + 1))
    assert numbers[-1] == files.version == schema.SCHEMA_VERSION
    assert files.migrations[0].name == "0002_idempotency_fingerprint"
    for migration in files.migrations:
        # The runner records the version; a file that recorded it too would fail on it.
        assert "dispatcher_schema" not in migration.sql, migration.name


def test_files_that_disagree_are_refused(tmp_path: Path) -> None:
    files = schema.load()
    gap = schema.Schema(files.sql, files.version + 1, files.migrations)
    assert gap.problems(), "a schema.sql ahead of the migrations must be refused"
    extra = schema.Migration(files.version + 1, f"{files.version + 1:04d}_later", "")
    ahead = schema.Schema(files.sql, files.version, (*files.migrations, extra))
    assert ahead.problems(), "a migration beyond schema.sql's version must be refused"
    twice = schema.Schema(files.sql, files.version, (*files.migrations, files.migrations[-1]))
    assert twice.problems()

    (tmp_path / "0002_fine.sql").write_text("SELECT 1;")
    (tmp_path / "notes.txt").write_text("not SQL, ignored")
    assert [m.name for m in schema.load_migrations(tmp_path)] == ["0002_fine"]
    for bad in ("2_short.sql", "0003-dash.sql", "0003_Upper.sql", "0003.sql"):
        (tmp_path / bad).write_text("SELECT 1;")
        with pytest.raises(schema.SchemaError, match="NNNN_short_name"):
            schema.load_migrations(tmp_path)
        (tmp_path / bad).unlink()


async def test_a_migrated_database_has_the_schema_of_a_fresh_one(
    new_database: NewDatabase,
) -> None:
    fresh = await new_database()
    done = await migrate(fresh)
    assert (done.before, done.after, done.applied) == (None, schema.SCHEMA_VERSION, ("schema.sql",))
    old = await new_database(v1=True)
    done = await migrate(old)
    steps = tuple(m.name for m in schema.load().migrations)
    assert (done.before, done.after, done.applied) == (1, schema.SCHEMA_VERSION, steps)
    assert await versions(fresh) == [schema.SCHEMA_VERSION]
    assert await versions(old) == list(range(1, schema.SCHEMA_VERSION + 1))

    expected, got = await describe(fresh), await describe(old)
    assert any(line.startswith("column relname=events | attname=request_fingerprint")
               for line in got)  # fmt: skip
    only_fresh = sorted(set(expected) - set(got))
    only_migrated = sorted(set(got) - set(expected))
    assert (only_fresh, only_migrated) == ([], []), (
        "a migrated database differs from a fresh one (where only a column's position differs:"
        " ALTER TABLE ... ADD COLUMN puts a column last, so schema.sql must list it last in its"
        " CREATE TABLE too):\n  only fresh:\n    "
        + "\n    ".join(only_fresh)
        + "\n  only migrated:\n    "
        + "\n    ".join(only_migrated)
    )

    # Nothing left to do, for either.
    for url in (fresh, old):
        again = await migrate(url)
        assert again == schema.Upgrade(schema.SCHEMA_VERSION, schema.SCHEMA_VERSION, ())


async def test_a_newer_schema_is_refused_at_start_up(database_url: str) -> None:
    """A newer dispatcher migrated this database: this release neither starts nor migrates,
    and touches nothing."""
    newer = schema.SCHEMA_VERSION + 1
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("INSERT INTO dispatcher_schema (version) VALUES ($1)", newer)
    finally:
        await conn.close()
    message = f"the database is at schema version {newer}, newer than this release knows"
    with pytest.raises(schema.SchemaError, match=message):
        await migrate(database_url)
    for command in (["migrate"], ["worker"], ["serve", "--port", "0"]):
        code, _, err = await cli(database_url, *command)
        assert code == 1, (command, err)
        assert message in err and "docs/operations.md" in err, (command, err)
    assert await versions(database_url) == [schema.SCHEMA_VERSION, newer]


async def hold_schema_lock(url: str) -> asyncpg.Connection:
    """A connection in a transaction that holds the runner's advisory lock."""
    holder = await asyncpg.connect(url)
    await holder.execute("BEGIN")
    await holder.execute("SELECT pg_advisory_xact_lock($1)", schema._LOCK_KEY)
    return holder


async def lock_waiters(conn: asyncpg.Connection, mode: str = "advisory") -> int:
    if mode == "advisory":
        sql = """SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND objid = $1::bigint::oid"""
        count: int = await conn.fetchval(sql, schema._LOCK_KEY)
    else:
        sql = "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = $1"
        count = await conn.fetchval(sql, mode)
    return count


async def test_concurrent_migrate_runs_apply_each_step_once(new_database: NewDatabase) -> None:
    """Two `dispatcher migrate` at once on a version-1 database (both made to wait on the lock
    first, so that they really race): every migration is applied once, by one of them, in
    order, and both succeed at the latest version. (The whole upgrade is one transaction under
    the lock: whichever takes it first applies every step, the other then finds nothing to do.)"""
    url = await new_database(v1=True)
    holder = await hold_schema_lock(url)
    try:
        runs = [asyncio.create_task(cli(url, "migrate")) for _ in range(2)]
        await wait_for(
            lambda: _at_least(lock_waiters(holder), 2), message="both runs waiting on the lock"
        )
        await holder.execute("COMMIT")
        results = await asyncio.gather(*runs)
    finally:
        await holder.close()
    steps = [f"applied {m.name}" for m in schema.load().migrations]
    outputs = [out.splitlines() for _, out, _ in results]
    assert [code for code, _, _ in results] == [0, 0], results
    for lines in outputs:
        assert lines[-1] == f"schema at version {schema.SCHEMA_VERSION}"
        assert lines[:-1] == sorted(lines[:-1])  # in order within a run
    assert sorted(outputs[0][:-1] + outputs[1][:-1]) == steps  # each once, all of them
    assert await versions(url) == list(range(1, schema.SCHEMA_VERSION + 1))


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n


async def test_replicas_starting_together_on_an_empty_database(new_database: NewDatabase) -> None:
    url = await new_database()
    holder = await hold_schema_lock(url)
    try:
        runs = [asyncio.create_task(migrate(url)) for _ in range(3)]
        await wait_for(lambda: _at_least(lock_waiters(holder), 3), message="three waiting")
        await holder.execute("COMMIT")
        results = await asyncio.gather(*runs)
    finally:
        await holder.close()
    assert sorted(r.applied for r in results) == [(), (), ("schema.sql",)]
    assert {r.after for r in results} == {schema.SCHEMA_VERSION}
    assert await versions(url) == [schema.SCHEMA_VERSION]


async def test_a_failing_migration_leaves_the_database_as_it_was(
    new_database: NewDatabase,
) -> None:
    """The whole upgrade is one transaction: a migration that fails leaves nothing of the
    upgrade behind, the ones before it included (the database stays at its version), and the
    error names the file."""
    url = await new_database(v1=True)
    files = schema.load()
    good = files.migrations[0]
    broken = schema.Migration(
        3, "0003_broken", "CREATE TABLE half_done (id int); ALTER TABLE nowhere ADD COLUMN x int;"
    )
    fake = schema.Schema(files.sql, 3, (good, broken))
    db = await Database.open(url, min_size=1, max_size=1)
    try:
        with pytest.raises(schema.SchemaError, match="0003_broken failed, nothing of the upgrade"):
            await schema.upgrade(db, fake)
        async with db.acquire() as conn:
            assert await conn.fetchval("SELECT to_regclass('half_done')") is None
            # 0002's column, applied before 0003 failed, is gone with it.
            assert not await conn.fetchval(
                "SELECT count(*) FROM pg_attribute WHERE attrelid = 'events'::regclass "
                "AND attname = 'request_fingerprint'"
            )
    finally:
        await db.close()
    assert await versions(url) == [1]


async def test_a_migration_gives_up_on_locks_it_cannot_take(new_database: NewDatabase) -> None:
    """A long transaction reading events blocks 0002's ALTER TABLE: the migration waits at
    most the lock timeout per try (traffic queued behind it waits no longer), gives up after
    its tries with a clear error, and succeeds once the transaction ends."""
    url = await new_database(v1=True)
    reader = await asyncpg.connect(url)
    try:
        await reader.execute("BEGIN")
        await reader.execute("LOCK TABLE events IN ACCESS SHARE MODE")
        with pytest.raises(schema.SchemaError, match="could not take its table locks"):
            await migrate(url, lock_timeout=0.1, lock_attempts=2, retry_pause=0.05)
        assert await versions(url) == [1]

        run = asyncio.create_task(migrate(url, lock_timeout=0.2, retry_pause=0.05))
        await wait_for(
            lambda: _at_least(lock_waiters(reader, "AccessExclusiveLock"), 1),
            message="the migration waiting for its lock",
        )
        await reader.execute("COMMIT")
        done = await run
    finally:
        await reader.close()
    assert done.before == 1 and done.after == schema.SCHEMA_VERSION
    assert await versions(url) == list(range(1, schema.SCHEMA_VERSION + 1))


async def test_schema_19_drops_the_plain_fingerprints_and_what_expunges_left(
    new_database: NewDatabase,
) -> None:
    """Fingerprints stored before schema 18 were a plain SHA-256 of the request (a guess of
    its content matched them offline): 0018 erases them, and the ordering keys of events
    expunged before it, and leaves every other ordering key."""
    url = await new_database()
    await migrate(url)
    conn = await asyncpg.connect(url)
    try:
        workspace = await conn.fetchval(
            "INSERT INTO workspaces (id, name) VALUES ('WS1', 'w') RETURNING id"
        )
        for event_id, fingerprint, key, expunged in (
            ("EV1", b"plain", "kept", False),
            ("EV2", b"plain", "erased", True),
            ("EV3", None, "also erased", True),
        ):
            await conn.execute(
                "INSERT INTO events (id, workspace_id, type, source, payload, created_at,"
                " request_fingerprint, ordering_key, expunged_at)"
                " VALUES ($1, $2, 'contact.updated', 'api', '{}', now(), $3, $4,"
                "         CASE WHEN $5 THEN now() END)",
                event_id, workspace, fingerprint, key, expunged,
            )  # fmt: skip
        migration = next(m for m in schema.load().migrations if m.version == 18)
        await conn.execute(migration.sql)
        rows = await conn.fetch(
            "SELECT id, request_fingerprint, ordering_key FROM events ORDER BY id"
        )
    finally:
        await conn.close()
    assert [tuple(row) for row in rows] == [
        ("EV1", None, "kept"),
        ("EV2", None, None),
        ("EV3", None, None),
    ]
