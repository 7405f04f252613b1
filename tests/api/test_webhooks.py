"""Webhook subscriptions: create, read, list, PATCH semantics, delete, secrets, isolation."""

from __future__ import annotations

import base64
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace

URL = "https://hooks.example.com/in"


async def create(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"url": URL, "events": ["message.received"], **fields}
    resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def patch(client: TestClient[Any, Any], ws: Workspace, hook_id: str, body: Any) -> Any:
    return await client.patch(f"/v1/webhooks/{hook_id}", json=body, headers=ws.headers)


async def test_create_and_read(client: TestClient[Any, Any], ws: Workspace) -> None:
    hook = await create(client, ws)
    assert hook["id"].startswith("WH")
    assert hook["url"] == URL and hook["events"] == ["message.received"]
    assert hook["name"] is None and hook["numberIds"] is None
    assert hook["disabledAt"] is None and hook["disabledReason"] is None
    assert hook["maxConcurrency"] == 10
    secret = hook.pop("secret")
    assert secret.startswith("whsec_")
    assert 24 <= len(base64.b64decode(secret.removeprefix("whsec_"))) <= 64
    got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert got == hook
    assert "secret" not in got
    revealed = await client.get(f"/v1/webhooks/{hook['id']}/secret", headers=ws.headers)
    assert (await revealed.json()) == {"secret": secret}


async def test_create_with_everything(client: TestClient[Any, Any], ws: Workspace) -> None:
    hook = await create(
        client, ws, name="CRM", numberIds=[ws.number_id], maxConcurrency=3,
        events=["call.missed", "message.received"],
    )  # fmt: skip
    assert hook["name"] == "CRM"
    assert hook["numberIds"] == [ws.number_id]
    assert hook["maxConcurrency"] == 3
    assert hook["events"] == ["call.missed", "message.received"]


async def test_create_validation(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    other = await make_workspace()
    cases: list[tuple[dict[str, Any], str, str | None]] = [
        ({"url": "/relative"}, "body.url", None),
        ({"url": "ftp://x.example.com/"}, "body.url", None),
        ({"url": "https://user:pw@x.example.com/"}, "body.url", "credentials"),
        ({"url": "https://x.example.com/" + "a" * 2048}, "body.url", None),
        ({"url": 5}, "body.url", None),
        ({"events": []}, "body.events", None),
        ({"events": ["message.exploded"]}, "body.events", "message.exploded"),
        ({"events": ["webhook.test"]}, "body.events", "webhook.test"),
        ({"events": ["call.missed", "call.missed"]}, "body.events", "repeat"),
        ({"events": "call.missed"}, "body.events", None),
        ({"numberIds": [other.number_id]}, "body.numberIds", other.number_id),
        ({"maxConcurrency": 0}, "body.maxConcurrency", None),
        ({"secret": "whsec_x"}, "body.secret", "unknown field"),
    ]
    for fields, path, mentions in cases:
        body = {"url": URL, "events": ["message.received"], **fields}
        resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
        assert resp.status == 400, fields
        error = await resp.json()
        assert error["code"] == "validation_error"
        paths = [e["path"] for e in error["errors"]]
        assert path in paths, (fields, error)
        if mentions:
            assert mentions in error["message"], (fields, error)
    listed = await (await client.get("/v1/webhooks", headers=ws.headers)).json()
    assert listed["data"] == []


async def test_patch_semantics(client: TestClient[Any, Any], ws: Workspace) -> None:
    hook = await create(client, ws, name="first", numberIds=[ws.number_id])
    hid = hook["id"]

    async def ok(body: Any) -> Any:
        resp = await patch(client, ws, hid, body)
        assert resp.status == 200, await resp.text()
        return await resp.json()

    # Absent keeps everything.
    same = await ok({})
    assert same["name"] == "first" and same["numberIds"] == [ws.number_id]
    # events replaces the whole list.
    assert (await ok({"events": ["call.missed"]}))["events"] == ["call.missed"]
    # name: "" clears, a string sets, null clears.
    assert (await ok({"name": ""}))["name"] is None
    assert (await ok({"name": "second"}))["name"] == "second"
    assert (await ok({"name": None}))["name"] is None
    # numberIds: null hears every number; a list hears only those.
    assert (await ok({"numberIds": None}))["numberIds"] is None
    assert (await ok({"numberIds": [ws.number_id]}))["numberIds"] == [ws.number_id]
    assert (await ok({"numberIds": []}))["numberIds"] == []
    # url and maxConcurrency.
    assert (await ok({"url": "https://new.example.com/x"}))["url"] == "https://new.example.com/x"
    assert (await ok({"maxConcurrency": 2}))["maxConcurrency"] == 2
    assert (await ok({"maxConcurrency": None}))["maxConcurrency"] == 10
    # Bad values change nothing.
    before = await (await client.get(f"/v1/webhooks/{hid}", headers=ws.headers)).json()
    bad: dict[str, Any]
    for bad in ({"url": None}, {"events": None}, {"enabled": None}, {"events": []},
                {"events": ["nope.nope"]}, {"enabled": "yes"}, {"colour": 1},
                {"numberIds": ["PN" + "0" * 32]}):  # fmt: skip
        resp = await patch(client, ws, hid, bad)
        assert resp.status == 400, bad
    after = await (await client.get(f"/v1/webhooks/{hid}", headers=ws.headers)).json()
    assert after == before


async def test_disable_gives_up_pending_and_enable_keeps_them_given_up(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await create(client, ws, events=["contact.updated"])
    hid = hook["id"]
    await client.post(
        "/v1/events", json={"type": "contact.updated", "data": {"id": "CT1"}}, headers=ws.headers
    )
    off = await (await patch(client, ws, hid, {"enabled": False})).json()
    assert off["disabledReason"] == "manual" and off["disabledAt"] is not None
    (delivery,) = (
        await (await client.get(f"/v1/webhooks/{hid}/deliveries", headers=ws.headers)).json()
    )["data"]
    assert delivery["status"] == "failed"
    assert delivery["lastError"] == "webhook disabled"
    assert delivery["nextAttemptAt"] is None
    # Disabled: new events are not fanned out to it.
    await client.post(
        "/v1/events", json={"type": "contact.updated", "data": {"id": "CT2"}}, headers=ws.headers
    )
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM deliveries") == 1
    on = await (await patch(client, ws, hid, {"enabled": True})).json()
    assert on["disabledAt"] is None and on["disabledReason"] is None
    again = await client.get(f"/v1/webhooks/{hid}/deliveries/{delivery['id']}", headers=ws.headers)
    assert (await again.json())["status"] == "failed"


async def test_delete(client: TestClient[Any, Any], ws: Workspace) -> None:
    hook = await create(client, ws, events=["contact.updated"])
    hid = hook["id"]
    await client.post(
        "/v1/events", json={"type": "contact.updated", "data": {"id": "CT1"}}, headers=ws.headers
    )
    resp = await client.delete(f"/v1/webhooks/{hid}", headers=ws.headers)
    assert resp.status == 204
    assert (await client.get(f"/v1/webhooks/{hid}", headers=ws.headers)).status == 404
    assert (await client.delete(f"/v1/webhooks/{hid}", headers=ws.headers)).status == 404
    assert (await patch(client, ws, hid, {"name": "x"})).status == 404
    # Its delivery records stay readable, given up.
    listed = await client.get(f"/v1/webhooks/{hid}/deliveries", headers=ws.headers)
    (delivery,) = (await listed.json())["data"]
    assert delivery["status"] == "failed" and delivery["lastError"] == "webhook deleted"
    assert (await (await client.get("/v1/webhooks", headers=ws.headers)).json())["data"] == []


async def test_rotate_secret(client: TestClient[Any, Any], ws: Workspace, db: Database) -> None:
    hook = await create(client, ws)
    resp = await client.post(f"/v1/webhooks/{hook['id']}/secret/rotate", headers=ws.headers)
    assert resp.status == 200
    fresh = (await resp.json())["secret"]
    assert fresh.startswith("whsec_") and fresh != hook["secret"]
    revealed = await client.get(f"/v1/webhooks/{hook['id']}/secret", headers=ws.headers)
    assert (await revealed.json())["secret"] == fresh
    async with db.acquire() as conn:
        previous = await conn.fetchval(
            "SELECT previous_secret FROM webhooks WHERE id = $1", hook["id"]
        )
    assert previous == hook["secret"]


async def test_list_pages(client: TestClient[Any, Any], ws: Workspace) -> None:
    made = [(await create(client, ws, name=f"h{i}"))["id"] for i in range(5)]
    first = await (await client.get("/v1/webhooks?limit=3", headers=ws.headers)).json()
    second = await (
        await client.get(f"/v1/webhooks?limit=3&cursor={first['nextCursor']}", headers=ws.headers)
    ).json()
    seen = [h["id"] for h in first["data"] + second["data"]]
    assert seen == list(reversed(made))
    assert second["nextCursor"] is None


async def test_isolation_and_scopes(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    hook = await create(client, ws)
    hid = hook["id"]
    other = await make_workspace()
    delivery = await (await client.post(f"/v1/webhooks/{hid}/test", headers=ws.headers)).json()
    calls = [
        ("GET", f"/v1/webhooks/{hid}", None),
        ("PATCH", f"/v1/webhooks/{hid}", {"name": "mine"}),
        ("DELETE", f"/v1/webhooks/{hid}", None),
        ("GET", f"/v1/webhooks/{hid}/secret", None),
        ("POST", f"/v1/webhooks/{hid}/secret/rotate", None),
        ("GET", f"/v1/webhooks/{hid}/deliveries", None),
        ("GET", f"/v1/webhooks/{hid}/deliveries/{delivery['id']}", None),
        ("POST", f"/v1/webhooks/{hid}/test", None),
        ("POST", f"/v1/webhooks/{hid}/deliveries/{delivery['id']}/retry", None),
        ("POST", f"/v1/webhooks/{hid}/recover", {"since": hook["createdAt"]}),
    ]
    for method, path, body in calls:
        resp = await client.request(method, path, json=body, headers=other.headers)
        assert resp.status == 404, (method, path)
        assert hook["secret"] not in await resp.text()
    still = await (await client.get(f"/v1/webhooks/{hid}", headers=ws.headers)).json()
    assert still["name"] is None
    reader = await make_workspace(scopes=["webhooks:read"])
    resp = await client.post("/v1/webhooks", json={"url": URL, "events": ["call.missed"]},
                             headers=reader.headers)  # fmt: skip
    assert resp.status == 403
    writer = await make_workspace(scopes=["webhooks:write"])
    assert (await client.get("/v1/webhooks", headers=writer.headers)).status == 403
