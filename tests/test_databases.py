"""The tests' databases (tests/databases.py): one reused after a test is as the template made it,
and one whose schema or settings a test changed is not reused."""

from __future__ import annotations

import asyncpg
import pytest

from tests.databases import Databases
from tests.store.catalog import describe


async def contents(url: str) -> dict[str, object]:
    """Every table's rows (sorted, as text) and every sequence's state."""
    conn = await asyncpg.connect(url)
    try:
        tables = await conn.fetch(
            "SELECT c.oid::regclass::text AS name FROM pg_class c"
            " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'"
        )
        found: dict[str, object] = {}
        for table in tables:
            rows = await conn.fetch(f"SELECT t::text AS row FROM {table['name']} t")
            found[table["name"]] = sorted(row["row"] for row in rows)
        for seq in await conn.fetch("SELECT sequencename, last_value FROM pg_sequences"):
            found[seq["sequencename"]] = seq["last_value"]
        return found
    finally:
        await conn.close()


async def fill(url: str) -> None:
    """Rows in most tables, partitions among them, and a sequence moved on: what tests do."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("INSERT INTO workspaces (id, name) VALUES ('WSdb', 'db')")
        await conn.execute(
            "INSERT INTO webhooks (id, workspace_id, url, events, secret, ordering)"
            " VALUES ('WHdb', 'WSdb', 'https://x.example.com/', '{contact.updated}',"
            " 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'fifo')"
        )
        await conn.execute(
            "SELECT dispatcher_publish_event("
            "'WSdb', 'contact.updated', '{\"id\": \"CT1\"}', NULL, 'k')"
        )
        await conn.execute("UPDATE dispatcher_schema SET applied_at = applied_at - interval '1d'")
        await conn.execute("SELECT nextval('delivery_lane_seq')")
        await conn.execute("ANALYZE deliveries")
    finally:
        await conn.close()


async def test_a_reused_database_is_as_the_template_made_it(
    databases: Databases, template_db: str
) -> None:
    template = databases.url(template_db)
    name = await databases.take()
    url = databases.url(name)
    await fill(url)
    filled = await contents(url)
    # The filling did fill: a partition of deliveries among others (tables by their own name).
    assert filled["delivery_queue"]
    assert any(rows for table, rows in filled.items() if table.startswith("deliveries_p"))
    held = await asyncpg.connect(url)  # a session the test left open goes too
    await databases.give_back(name)
    assert held.is_closed() or not await _alive(held)
    again = await databases.take()
    try:
        assert again == name  # reused, not cloned
        assert await contents(databases.url(again)) == await contents(template)
        assert await describe(databases.url(again)) == await describe(template)
        conn = await asyncpg.connect(databases.url(again))
        try:
            assert not await conn.fetchval(
                "SELECT count(*) FROM pg_stats WHERE schemaname = 'public'"
            )
        finally:
            await conn.close()
    finally:
        await databases.give_back(again)


async def _alive(conn: asyncpg.Connection) -> bool:
    try:
        await conn.fetchval("SELECT 1")
    except (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, ConnectionError):
        return False
    finally:
        await conn.close()
    return True


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE webhooks ADD COLUMN extra int",
        "ALTER TABLE api_keys DISABLE TRIGGER api_keys_changed",
        "CREATE OR REPLACE FUNCTION dispatcher_json_problem(p_value jsonb) RETURNS text"
        " LANGUAGE sql AS 'SELECT NULL::text'",
        "CREATE INDEX ON events (type)",
        "ALTER DATABASE {database} SET work_mem = '8MB'",
    ],
)
async def test_a_database_whose_schema_or_settings_changed_is_not_reused(
    databases: Databases, server_url: str, change: str
) -> None:
    name = await databases.take()
    conn = await asyncpg.connect(databases.url(name))
    try:
        await conn.execute(change.format(database=f'"{name}"'))
    finally:
        await conn.close()
    await databases.give_back(name)
    admin = await asyncpg.connect(server_url)
    try:
        assert not await admin.fetchval("SELECT count(*) FROM pg_database WHERE datname = $1", name)
    finally:
        await admin.close()
    assert name not in databases.free
