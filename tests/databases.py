"""The tests' databases: each test has one of its own, as the template made it.

Cloning the template (`CREATE DATABASE ... TEMPLATE`) costs about a quarter of a second, which
over a thousand tests was most of the suite's time. So a database is cloned once and then
reused: after each test it is put back as the template made it. No connection is left to it;
the tables that have rows are emptied (a DELETE of the rows, when the tests connect as a
superuser, else one TRUNCATE), the template's own rows copied back in, the sequences set back,
the planner's statistics and the activity counters cleared.

That covers what tests do to rows. What they may do to the database itself (ALTER a table,
disable a trigger, CREATE or DROP a function, `ALTER DATABASE ... SET`) is seen, not listed:
every catalog row such a change writes carries a new transaction id (`xmin`), so a
fingerprint of the catalogs taken after the reset and again after the test tells whether the
test changed the schema or the settings. A database that changed is dropped, and the next test
gets a fresh clone. A test that needs a database nobody has used at all (statistics,
`last_autoanalyze`) says so with `@pytest.mark.fresh_database`.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import asyncpg


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


# The catalogs a change to the schema or to the database's settings writes a row in. A row's
# xmin changes when the row is written again (ALTER, ENABLE TRIGGER, CREATE OR REPLACE), not
# when VACUUM or ANALYZE update it in place; the sum of the xmins and the count of rows of each
# change with any such write. Temporary schemas (pg_temp_N, made once per backend that uses a
# temporary table) are left out: they are not the schema.
CATALOGS = (
    "pg_class",
    "pg_attribute",
    "pg_attrdef",
    "pg_constraint",
    "pg_index",
    "pg_trigger",
    "pg_proc",
    "pg_type",
    "pg_rewrite",
    "pg_policy",
    "pg_sequence",
    "pg_extension",
)
FINGERPRINT = (
    "SELECT ARRAY["
    + ", ".join(f"(SELECT count(*) || ':' || sum(xmin::text::bigint) FROM {c})" for c in CATALOGS)
    + ", (SELECT count(*) || ':' || sum(xmin::text::bigint) FROM pg_namespace"
    "     WHERE nspname NOT LIKE 'pg\\_temp\\_%' AND nspname NOT LIKE 'pg\\_toast\\_temp\\_%')"
    ", (SELECT coalesce(string_agg(s.setrole::text || '=' || array_to_string(s.setconfig, ','),"
    "    ';' ORDER BY s.setrole), '') FROM pg_db_role_setting s JOIN pg_database d"
    "    ON d.oid = s.setdatabase WHERE d.datname = current_database())"
    "]"
)

TABLES = """
SELECT c.oid::regclass::text AS name,
       array_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE a.attgenerated = '') AS columns
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'
GROUP BY c.oid
ORDER BY c.oid
"""
SEQUENCES = """
SELECT c.oid::regclass::text AS name, pg_sequence_last_value(c.oid) IS NOT NULL AS called,
       coalesce(pg_sequence_last_value(c.oid), q.seqstart) AS value
FROM pg_class c JOIN pg_sequence q ON q.seqrelid = c.oid
"""


@dataclass
class Table:
    name: str
    columns: list[str]
    rows: bytes | None = None  # the template's rows (binary COPY), when it has any


@dataclass
class Databases:
    """Test databases cloned from `template`, reused after a reset (see the module's text)."""

    server_url: str
    template: str
    admin: asyncpg.Connection
    tables: list[Table]
    sequences: list[tuple[str, int, bool]]
    fingerprint: list[str]  # the template's (a clone's is the same)
    superuser: bool  # may clear the planner's statistics and the activity counters
    free: list[str] = field(default_factory=list)  # reset, for the next test
    # Each database in use or free, with its catalogs' fingerprint when handed out.
    handed: dict[str, list[str]] = field(default_factory=dict)
    clones: int = 0  # how many were cloned (a figure for whoever tunes this)

    @classmethod
    async def open(cls, server_url: str, template: str) -> Databases:
        admin = await asyncpg.connect(server_url)
        conn = await asyncpg.connect(with_database(server_url, template))
        try:
            tables = [Table(r["name"], list(r["columns"])) for r in await conn.fetch(TABLES)]
            for table in tables:
                if await conn.fetchval(f"SELECT EXISTS (SELECT FROM {table.name})"):
                    out = io.BytesIO()
                    await conn.copy_from_query(
                        f"SELECT {', '.join(map(quote, table.columns))} FROM {table.name}",
                        output=out,
                        format="binary",
                    )
                    table.rows = out.getvalue()
            sequences = [(r["name"], r["value"], r["called"]) for r in await conn.fetch(SEQUENCES)]
            fingerprint = await conn.fetchval(FINGERPRINT)
            superuser = await conn.fetchval(
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
            )
        finally:
            await conn.close()
        return cls(server_url, template, admin, tables, sequences, fingerprint, superuser)

    def url(self, name: str) -> str:
        return with_database(self.server_url, name)

    async def take(self, *, fresh: bool = False) -> str:
        if self.free and not fresh:
            return self.free.pop()
        name = f"dispatcher_test_{uuid.uuid4().hex[:12]}"
        await self.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.handed[name] = self.fingerprint
        self.clones += 1
        return name

    async def give_back(self, name: str, *, reuse: bool = True) -> None:
        """Reset the database for the next test, or drop it when the test changed more than
        rows (or `reuse` is false)."""
        before = self.handed.pop(name)
        if reuse:
            # No wait for the reset's commit to reach the disk: only the tests read it.
            conn = await asyncpg.connect(
                self.url(name), server_settings={"synchronous_commit": "off"}
            )
            try:
                await conn.execute(
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"
                )
                if await conn.fetchval(FINGERPRINT) == before:
                    await self._reset(conn)
                    # A DELETE writes no catalog row; a TRUNCATE does (new files).
                    self.handed[name] = (
                        before if self.superuser else await conn.fetchval(FINGERPRINT)
                    )
                    self.free.append(name)
                    return
            finally:
                await conn.close()
        await self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    async def _reset(self, conn: asyncpg.Connection) -> None:
        if self.superuser:
            # The tables rows went into since the last reset (partitions by their own name),
            # from the activity counters: every session of the test has ended, and a session
            # reports its counts before it ends. Asking each table instead would load every
            # partition and index into this new session's cache, at ten times the cost.
            filled = await conn.fetchval(
                "SELECT coalesce(array_agg(relid::regclass::text), '{}') FROM pg_stat_user_tables"
                " WHERE n_tup_ins > 0"
            )
        else:
            used = await conn.fetchval(
                "SELECT ARRAY["
                + ", ".join(f"EXISTS (SELECT FROM {t.name})" for t in self.tables)
                + "]::boolean[]"
            )
            filled = [t.name for t, rows in zip(self.tables, used, strict=True) if rows]
        emptied = sorted({*filled, *(t.name for t in self.tables if t.rows is not None)})
        sequences = "".join(
            f"SELECT setval({literal(name)}, {value}, {called}); "
            for name, value, called in self.sequences
        )
        async with conn.transaction():
            if self.superuser:
                # A DELETE of a test's few rows costs far less than a TRUNCATE, which makes
                # new files for every partition and index it reaches. With the replication
                # role, no trigger runs (the foreign keys' neither): the order does not matter.
                # What ANALYZE learnt from the last test's rows would steer the next one's
                # plans: it goes too, and the activity counters start again from zero.
                await conn.execute(
                    "SET LOCAL session_replication_role = replica; "
                    + "".join(f"DELETE FROM {name}; " for name in emptied)
                    + sequences
                    + "DELETE FROM pg_statistic WHERE starelid IN (SELECT c.oid FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')); "
                    "SELECT pg_stat_reset();"
                )
            elif emptied:
                await conn.execute(f"TRUNCATE {', '.join(emptied)} CASCADE; {sequences}")
            for table in self.tables:
                if table.rows is not None:
                    await conn.copy_to_table(
                        table.name.rpartition(".")[2],
                        schema_name=table.name.rpartition(".")[0] or None,
                        source=io.BytesIO(table.rows),
                        columns=table.columns,
                        format="binary",
                    )

    async def close(self) -> None:
        for name in self.free:
            await self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.free.clear()
        self.handed.clear()
        await self.admin.close()


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
