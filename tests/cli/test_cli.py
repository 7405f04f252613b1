"""The command line, run as users run it: a subprocess against a real database."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from dispatcher.domain.endpoints import EndpointOptions
from dispatcher.domain.poll import WebhookMode
from dispatcher.store import schema, webhooks, workspaces
from dispatcher.store.database import Database
from tests.processes import cli


async def test_create_workspace_number_and_key(database_url: str, db: Database) -> None:
    code, out, _ = await cli(database_url, "workspaces", "create", "Acme", "--json")
    assert code == 0
    workspace_id = json.loads(out)["id"]
    assert workspace_id.startswith("WS")

    code, out, _ = await cli(database_url, "numbers", "add", workspace_id, "+15555550999", "--json")
    assert code == 0
    assert json.loads(out)["id"].startswith("PN")

    code, out, _ = await cli(
        database_url, "keys", "create", workspace_id,
        "--scope", "messages:read", "--scope", "webhooks:write", "--json",
    )  # fmt: skip
    assert code == 0
    created = json.loads(out)
    assert created["id"].startswith("AK") and created["key"].startswith("dk_")
    key = await workspaces.find_key(db, created["key"])
    assert key is not None
    assert key.workspace_id == workspace_id
    assert key.scopes == {"messages:read", "webhooks:write"}
    async with db.acquire() as conn:
        stored = await conn.fetchval("SELECT key_hash FROM api_keys WHERE id = $1", created["id"])
    assert created["key"].encode() not in bytes(stored)

    code, out, _ = await cli(database_url, "keys", "revoke", created["id"])
    assert code == 0 and created["id"] in out
    assert await workspaces.find_key(db, created["key"]) is None


async def test_readable_output_without_json(database_url: str) -> None:
    code, out, _ = await cli(database_url, "workspaces", "create", "Acme")
    assert code == 0
    assert out.startswith("created workspace WS")


async def test_bad_arguments_exit_non_zero_with_a_message(database_url: str) -> None:
    code, _, err = await cli(database_url, "numbers", "add", "WSx", "555-1234")
    assert code == 2 and "E.164" in err
    code, _, err = await cli(database_url, "keys", "create", "WSx", "--scope", "root")
    assert code == 2 and "invalid choice" in err
    code, _, err = await cli(database_url, "numbers", "add", "WS" + "0" * 32, "+15555550998")
    assert code == 1 and "does not exist" in err
    code, _, err = await cli(database_url, "keys", "revoke", "AK" + "0" * 32)
    assert code == 1 and "does not exist" in err


async def test_unreachable_database_is_a_clear_error() -> None:
    code, _, err = await cli("postgresql://postgres@127.0.0.1:1/nothing", "migrate")
    assert code == 1
    assert "database unavailable" in err


async def test_migrate_is_idempotent(database_url: str) -> None:
    for _ in range(2):
        code, out, _ = await cli(database_url, "migrate")
        assert code == 0
        assert f"version {schema.SCHEMA_VERSION}" in out


async def test_lookalike_numbers_and_blank_names_are_refused(
    database_url: str, db: Database
) -> None:
    code, out, _ = await cli(database_url, "workspaces", "create", "Acme", "--json")
    workspace_id = json.loads(out)["id"]
    for number in (
        "+15557770000\n",
        "+1\u0665\u0665\u0665\u0667\u0667\u0667\u0660\u0660\u0660\u0660",
        "+1\uff15\uff15\uff15\uff17\uff17\uff17\uff10\uff10\uff10\uff10",
    ):
        code, _, err = await cli(database_url, "numbers", "add", workspace_id, number)
        assert code == 2 and "E.164" in err, number
    for name in ("   ", "\u200b", "\t", "\u3000\u200d"):
        code, _, err = await cli(database_url, "workspaces", "create", name)
        assert code == 2 and "visible characters" in err, repr(name)
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM phone_numbers") == 0
        assert await conn.fetchval("SELECT count(*) FROM workspaces") == 1


async def test_portal_create_and_delete(database_url: str, db: Database) -> None:
    """`dispatcher portal create` prints the link once; `portal delete` ends the session."""
    workspace_id = await workspaces.create_workspace(db, "Acme")
    code, out, err = await cli(
        database_url, "portal", "create", "--workspace", workspace_id,
        "--capabilities", "read", "--ttl-seconds", "120",
        "--parent-origin", "https://app.example.com",
        "--base-url", "https://dispatcher.example.com/", "--json",
    )  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert made["id"].startswith("PS") and made["expiresAt"].endswith("Z")
    prefix = f"https://dispatcher.example.com/console/{made['id']}#portal=dpl_"
    assert made["url"].startswith(prefix)
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT capabilities, parent_origin, expires_at - created_at AS ttl"
            " FROM portal_sessions WHERE id = $1",
            made["id"],
        )
    assert row is not None
    assert (row["capabilities"], row["parent_origin"]) == ("read", "https://app.example.com")
    assert row["ttl"].total_seconds() == 120
    code, out, err = await cli(
        database_url, "portal", "delete", "--workspace", workspace_id, made["id"]
    )
    assert code == 0 and made["id"] in out, err
    for args, said in [
        (("--capabilities", "admin"), "invalid choice"),
        (("--capabilities", "read", "--ttl-seconds", "59"), "--ttl-seconds must be 60..86400"),
        (("--capabilities", "read", "--parent-origin", "http://a.example"), "--parent-origin"),
    ]:
        code, _, err = await cli(
            database_url, "portal", "create", "--workspace", workspace_id, *args
        )
        assert code == 2 and said in err, err
    code, _, err = await cli(
        database_url, "portal", "delete", "--workspace", workspace_id, "PS" + "0" * 32
    )
    assert code == 1 and "does not exist" in err


async def test_a_key_limited_to_one_webhook(database_url: str, db: Database) -> None:
    """`keys create --scope webhooks:poll --webhook WH…`: a key that polls that webhook only."""
    workspace_id = await workspaces.create_workspace(db, "Receiver")
    hook, _ = await webhooks.create(
        db,
        workspace_id=workspace_id,
        options=EndpointOptions(url=None, events=["contact.updated"], mode=WebhookMode.POLL),
        now=datetime.now(UTC),
    )
    code, out, _ = await cli(
        database_url, "keys", "create", workspace_id,
        "--scope", "webhooks:poll", "--webhook", hook.id, "--json",
    )  # fmt: skip
    assert code == 0
    key = await workspaces.find_key(db, json.loads(out)["key"])
    assert key is not None and key.scopes == {"webhooks:poll"} and key.webhook_id == hook.id

    code, _, err = await cli(
        database_url, "keys", "create", workspace_id,
        "--scope", "webhooks:read", "--webhook", hook.id,
    )  # fmt: skip
    assert code == 2 and "webhooks:poll" in err
    code, _, err = await cli(
        database_url, "keys", "create", workspace_id,
        "--scope", "webhooks:poll", "--webhook", "WH" + "0" * 32,
    )  # fmt: skip
    assert code == 1 and "is not a webhook of workspace" in err
