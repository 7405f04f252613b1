"""Two workspaces with every resource type: the other's key sees nothing, changes nothing."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from tests.conftest import MakeWorkspace


async def test_every_resource_is_invisible_to_another_workspace(
    client: TestClient[Any, Any], make_workspace: MakeWorkspace
) -> None:
    a, b = await make_workspace(), await make_workspace()

    async def call(method: str, path: str, who: Any, body: Any = None) -> Any:
        return await client.request(method, path, json=body, headers=who.headers)

    sent = {"from": a.number, "to": "+15555550123", "text": "secret plans"}
    msg = await (await call("POST", "/v1/messages", a, sent)).json()
    (conv,) = (await (await call("GET", "/v1/conversations", a)).json())["data"]
    subscription = {"url": "https://a.example.com/", "events": ["contact.updated"]}
    hook = await (await call("POST", "/v1/webhooks", a, subscription)).json()
    await call("POST", "/v1/events", a, {"type": "contact.updated", "data": {"id": "CT1"}})
    (delivery,) = (await (await call("GET", f"/v1/webhooks/{hook['id']}/deliveries", a)).json())[
        "data"
    ]
    # B's view of A's resources: 404 everywhere, nothing leaked.
    attempts = [
        ("GET", f"/v1/messages/{msg['id']}", None),
        ("GET", f"/v1/conversations/{conv['id']}", None),
        ("POST", f"/v1/conversations/{conv['id']}/status", {"status": "done"}),
        ("GET", f"/v1/webhooks/{hook['id']}", None),
        ("PATCH", f"/v1/webhooks/{hook['id']}", {"enabled": False}),
        ("DELETE", f"/v1/webhooks/{hook['id']}", None),
        ("GET", f"/v1/webhooks/{hook['id']}/secret", None),
        ("POST", f"/v1/webhooks/{hook['id']}/secret/rotate", None),
        ("GET", f"/v1/webhooks/{hook['id']}/deliveries", None),
        ("GET", f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}", None),
        ("POST", f"/v1/webhooks/{hook['id']}/test", None),
        ("POST", f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/retry", None),
        ("POST", f"/v1/webhooks/{hook['id']}/recover", {"since": hook["createdAt"]}),
    ]
    for method, path, body in attempts:
        resp = await call(method, path, b, body)
        text = await resp.text()
        assert resp.status == 404, (method, path, resp.status)
        assert "secret plans" not in text and hook["secret"] not in text
    # Lists and cursors: B sees only its own (empty) lists; A's cursors are refused.
    for path in ("/v1/messages", "/v1/conversations", "/v1/webhooks"):
        assert (await (await call("GET", path, b)).json())["data"] == []
    await call("POST", "/v1/messages", a, {"from": a.number, "to": "+15555550124", "text": "2"})
    cursor = (await (await call("GET", "/v1/messages?limit=1", a)).json())["nextCursor"]
    resp = await call("GET", f"/v1/messages?limit=1&cursor={cursor}", b)
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_cursor"
    # A's resources are untouched.
    same = await (await call("GET", f"/v1/webhooks/{hook['id']}", a)).json()
    assert same["disabledAt"] is None
    (conv_after,) = (await (await call("GET", "/v1/conversations?limit=1", a)).json())["data"][:1]
    assert conv_after["status"] == "open"
    secret = await (await call("GET", f"/v1/webhooks/{hook['id']}/secret", a)).json()
    assert secret["secret"] == hook["secret"]
