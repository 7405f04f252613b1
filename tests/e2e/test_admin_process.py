"""The admin API as operators run it: DISPATCHER_ADMIN_TOKEN read at start-up (a short one
stops the process, naming the variable and never the value), then a tenant onboarded and
offboarded through a real `dispatcher serve`, the token never in any output."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from dispatcher.errors import ConfigurationError
from dispatcher.settings import Settings
from tests.processes import free_port, read_until, start, stop, until_ready

TOKEN = "e2e-admin-token-" + "fedcba9876543210" * 2


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["worker"], ["migrate"]])
async def test_a_short_token_stops_start_up_naming_the_variable_only(
    database_url: str, command: list[str]
) -> None:
    short = "hunter2-but-longer-than-that"  # 28 characters
    proc = await start(database_url, *command, DISPATCHER_ADMIN_TOKEN=short)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 2, err
    text = (out + err).decode()
    assert "DISPATCHER_ADMIN_TOKEN" in text and "at least 32" in text
    assert short not in text and "hunter2" not in text
    assert text.strip().splitlines()[-1].startswith("dispatcher: error: DISPATCHER_ADMIN_TOKEN")


def test_the_token_setting_is_validated_and_never_shown() -> None:
    assert Settings.from_env({}).admin_token is None
    assert Settings.from_env({"DISPATCHER_ADMIN_TOKEN": ""}).admin_token is None
    settings = Settings.from_env({"DISPATCHER_ADMIN_TOKEN": TOKEN})
    assert settings.admin_token == TOKEN
    assert TOKEN not in repr(settings) and TOKEN not in repr(settings.redacted())
    assert settings.redacted()["admin_token"] == "***"
    for bad in (
        "x" * 31,
        "x" * 31 + " ",
        " " + "x" * 40,
        "x" * 20 + "\u00e9" * 20,
        "x" * 40 + "\t",
    ):
        with pytest.raises(ConfigurationError, match="DISPATCHER_ADMIN_TOKEN") as refused:
            Settings.from_env({"DISPATCHER_ADMIN_TOKEN": bad})
        assert bad.strip() not in str(refused.value)


async def test_an_operator_onboards_and_offboards_a_tenant(database_url: str) -> None:
    port = free_port()
    proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_ADMIN_TOKEN=TOKEN,
                       DISPATCHER_DEMO="off")  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    admin = {"Authorization": f"Bearer {TOKEN}"}
    try:
        assert proc.stderr is not None
        started = orjson.loads(await read_until(proc.stderr, r'^(\{.*"dispatcher\.start".*\})$'))
        assert started["settings"]["admin_token"] == "***"
        async with aiohttp.ClientSession() as http:
            await until_ready(http, base)

            async def post(path: str, body: object, status: int = 201) -> dict[str, object]:
                async with http.post(f"{base}{path}", json=body, headers=admin) as resp:
                    assert resp.status == status, await resp.text()
                    found: dict[str, object] = await resp.json()
                    return found

            made = await post("/v1/admin/workspaces", {"name": "Acme"})
            tenant = f"/v1/admin/workspaces/{made['id']}"
            await post(f"{tenant}/numbers", {"number": "+15555550700"})
            await post(f"{tenant}/numbers", {"number": "+15555550700"}, status=409)
            key = await post(f"{tenant}/keys", {"scopes": ["messages:write"], "name": "CRM"})
            auth = {"Authorization": f"Bearer {key['key']}"}
            message = {"from": "+15555550700", "to": "+15555550123", "text": "Hello!"}
            async with http.post(f"{base}/v1/messages", json=message, headers=auth) as resp:
                assert resp.status == 202, await resp.text()
            async with http.get(f"{base}/v1/admin/workspaces", headers=auth) as resp:
                assert resp.status == 403
            async with http.delete(f"{base}{tenant}/keys/{key['id']}", headers=admin) as resp:
                assert resp.status == 204
            async with http.post(f"{base}/v1/messages", json=message, headers=auth) as resp:
                assert resp.status == 401
    finally:
        code, err = await stop(proc)
    assert code == 0, err
    assert TOKEN not in err


async def test_without_the_token_the_process_has_no_admin_api(database_url: str) -> None:
    port = free_port()
    proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_ENGINE="off")
    try:
        assert proc.stdout is not None
        key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        async with aiohttp.ClientSession() as http:
            for headers in (
                {"Authorization": f"Bearer {TOKEN}"},
                {"Authorization": f"Bearer {key}"},
            ):
                async with http.get(
                    f"http://127.0.0.1:{port}/v1/admin/workspaces", headers=headers
                ) as resp:
                    assert resp.status == 404
                    assert (await resp.json())["code"] == "not_found"
    finally:
        code, err = await stop(proc)
    assert code == 0, err
