"""Pull delivery (docs/webhooks.md, "Poll mode"): a poll webhook has no url and no deliveries;
GET /v1/webhooks/{id}/poll pages through the events its filters select, oldest first, as the
envelopes a push delivery sends, with an iterator that never misses nor repeats an event, a
transaction that commits late included; a key may be limited to polling one webhook."""

from __future__ import annotations

import base64
from typing import Any

import asyncpg
from aiohttp.test_utils import TestClient

from dispatcher.domain.poll import MAX_LIMIT
from dispatcher.store.database import Database
from tests.conftest import ADMIN_HEADERS, MakeWorkspace, Workspace, wait_for

TYPE = "contact.updated"


async def create_poll(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"mode": "poll", "events": [TYPE], **fields}
    resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def publish(
    client: TestClient[Any, Any], ws: Workspace, data: dict[str, Any], **fields: Any
) -> Any:
    body = {"type": TYPE, "data": data, **fields}
    resp = await client.post("/v1/events", json=body, headers=ws.headers)
    assert resp.status == 202, await resp.text()
    return await resp.json()


async def poll(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, status: int = 200, **query: Any
) -> Any:
    resp = await client.get(f"/v1/webhooks/{hook_id}/poll", params=query, headers=ws.headers)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def drain(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, iterator: str, limit: int = 100
) -> tuple[list[dict[str, Any]], str]:
    """Every event there is after `iterator`, page by page, and the iterator after them."""
    seen: list[dict[str, Any]] = []
    while True:
        page = await poll(client, ws, hook_id, iterator=iterator, limit=limit)
        seen += page["data"]
        iterator = page["iterator"]
        if page["done"]:
            return seen, iterator


async def test_a_poll_webhook_has_no_url_and_a_push_webhook_needs_one(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    hook = await create_poll(client, ws)
    assert hook["mode"] == "poll" and hook["url"] is None
    got = await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)
    assert (await got.json())["mode"] == "poll"

    refused = await client.post(
        "/v1/webhooks",
        json={"mode": "poll", "url": "https://hooks.example.com/in", "events": [TYPE]},
        headers=ws.headers,
    )
    assert refused.status == 400
    assert [e["path"] for e in (await refused.json())["errors"]] == ["body.url"]

    missing = await client.post("/v1/webhooks", json={"events": [TYPE]}, headers=ws.headers)
    assert missing.status == 400
    assert [e["path"] for e in (await missing.json())["errors"]] == ["body.url"]

    push = await client.post(
        "/v1/webhooks", json={"url": "https://hooks.example.com/in", "events": [TYPE]},
        headers=ws.headers,
    )  # fmt: skip
    assert push.status == 201 and (await push.json())["mode"] == "push"

    patched = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"url": "https://hooks.example.com/x"},
        headers=ws.headers,
    )  # fmt: skip
    assert patched.status == 400
    bad_mode = await client.post(
        "/v1/webhooks", json={"mode": "pull", "events": [TYPE]}, headers=ws.headers
    )
    assert bad_mode.status == 400


async def test_pages_oldest_first_without_repeats_or_misses(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await create_poll(client, ws)
    start = await poll(client, ws, hook["id"])  # a new consumer starts now
    assert start["data"] == [] and start["done"] is True
    published = [await publish(client, ws, {"id": f"CT{i}"}) for i in range(25)]
    seen: list[dict[str, Any]] = []
    iterator = start["iterator"]
    pages = 0
    while True:
        page = await poll(client, ws, hook["id"], iterator=iterator, limit=7)
        pages += 1
        assert len(page["data"]) <= 7
        seen += page["data"]
        iterator = page["iterator"]
        if page["done"]:
            break
    assert pages == 4
    # The envelopes a push delivery sends, oldest first, each once.
    assert seen == published
    again = await poll(client, ws, hook["id"], iterator=iterator)
    assert again["data"] == [] and again["done"] is True
    later = await publish(client, ws, {"id": "CT-later"})
    assert (await drain(client, ws, hook["id"], again["iterator"]))[0] == [later]
    # No deliveries are made for a poll webhook.
    async with db.acquire() as conn:
        made = await conn.fetchval(
            "SELECT count(*) FROM deliveries WHERE webhook_id = $1", hook["id"]
        )
        queued = await conn.fetchval(
            "SELECT count(*) FROM delivery_queue WHERE webhook_id = $1", hook["id"]
        )
    assert made == 0 and queued == 0


async def test_a_new_consumer_starts_now_or_at_since(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    hook = await create_poll(client, ws)
    before = await publish(client, ws, {"id": "CT-before"})
    start = await poll(client, ws, hook["id"])
    assert start["data"] == [] and start["done"] is True
    after = await publish(client, ws, {"id": "CT-after"})
    assert (await drain(client, ws, hook["id"], start["iterator"]))[0] == [after]

    since = await poll(client, ws, hook["id"], since=before["createdAt"])
    assert since["data"] == [before, after] and since["done"] is True
    one = await poll(client, ws, hook["id"], since=before["createdAt"], limit=1)
    assert one["data"] == [before] and one["done"] is False
    rest, _ = await drain(client, ws, hook["id"], one["iterator"])
    assert rest == [after]
    none = await poll(client, ws, hook["id"], since="2999-01-01T00:00:00Z")
    assert none["data"] == [] and none["done"] is True


async def test_the_webhooks_filters_select_the_events(
    client: TestClient[Any, Any], make_workspace: MakeWorkspace
) -> None:
    ws = await make_workspace()
    other_number = await make_workspace()  # another workspace's events are never polled
    hook = await create_poll(client, ws, numberIds=[ws.number_id], filter={"tier": "gold"})
    start = await poll(client, ws, hook["id"])
    taken = await publish(client, ws, {"id": "CT1", "tier": "gold"}, numberId=ws.number_id)
    await publish(client, ws, {"id": "CT2", "tier": "silver"}, numberId=ws.number_id)
    await publish(client, ws, {"id": "CT3", "tier": "gold"})  # no number
    resp = await client.post(
        "/v1/events", json={"type": "message.received", "data": {"id": "CT4", "tier": "gold"},
                            "numberId": ws.number_id}, headers=ws.headers,
    )  # fmt: skip
    assert resp.status in (202, 400)  # another type, whatever its data
    await publish(client, other_number, {"id": "CT5", "tier": "gold"})
    assert (await drain(client, ws, hook["id"], start["iterator"]))[0] == [taken]


async def test_a_late_commit_is_not_missed(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """An event whose transaction began first and commits last (created_at earlier than
    events polled already) is still polled, once, after the commit."""
    hook = await create_poll(client, ws)
    start = await poll(client, ws, hook["id"])
    first = await publish(client, ws, {"id": "CT-first"})
    conn: asyncpg.Connection = await asyncpg.connect(db.url)
    try:
        held = conn.transaction()
        await held.start()
        late_id = await conn.fetchval(
            "SELECT dispatcher_publish_event($1, $2, $3::jsonb, NULL, NULL)",
            ws.id, TYPE, '{"id": "CT-late"}',
        )  # fmt: skip
        after = [await publish(client, ws, {"id": f"CT-after{i}"}) for i in range(3)]
        seen, iterator = await drain(client, ws, hook["id"], start["iterator"], limit=2)
        # Only what is older than the open transaction: never past the late event's place.
        assert [e["id"] for e in seen] in ([], [first["id"]])
        assert late_id not in [e["id"] for e in seen]
        await held.commit()
    finally:
        await conn.close()
    everything = list(seen)

    async def all_seen() -> bool:
        nonlocal iterator
        more, iterator = await drain(client, ws, hook["id"], iterator, limit=2)
        everything.extend(more)
        return len(everything) >= 5

    await wait_for(all_seen, message="every event polled")
    ids = [e["id"] for e in everything]
    assert len(ids) == len(set(ids)) == 5
    assert set(ids) == {first["id"], late_id, *(e["id"] for e in after)}
    assert ids.index(late_id) < ids.index(after[0]["id"])  # its transaction is the older


async def test_bad_iterators_and_limits_are_400(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    hook = await create_poll(client, ws)
    forged = base64.urlsafe_b64encode(b'{"t":-1,"i":""}').rstrip(b"=").decode()
    for bad in ["garbage", "!!!", forged, base64.urlsafe_b64encode(b"[1]").decode()]:
        body = await poll(client, ws, hook["id"], 400, iterator=bad)
        assert [e["path"] for e in body["errors"]] == ["query.iterator"]
    for limit in [0, MAX_LIMIT + 1, "x"]:
        body = await poll(client, ws, hook["id"], 400, limit=limit)
        assert [e["path"] for e in body["errors"]] == ["query.limit"]
    start = await poll(client, ws, hook["id"], limit=MAX_LIMIT)
    body = await poll(
        client, ws, hook["id"], 400, iterator=start["iterator"], since="2026-01-01T00:00:00Z"
    )
    assert [e["path"] for e in body["errors"]] == ["query.since"]


async def test_push_webhooks_are_not_polled_and_poll_webhooks_have_no_deliveries(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    push = await client.post(
        "/v1/webhooks", json={"url": "https://hooks.example.com/in", "events": [TYPE]},
        headers=ws.headers,
    )  # fmt: skip
    await poll(client, ws, (await push.json())["id"], 409)
    hook = await create_poll(client, ws)
    test = await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)
    assert test.status == 409
    await poll(client, ws, "WH" + "0" * 32, 404)


async def test_a_key_limited_to_one_webhook_polls_only_it(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    hook = await create_poll(client, ws)
    other = await create_poll(client, ws)
    made = await client.post(
        f"/v1/admin/workspaces/{ws.id}/keys",
        json={"scopes": ["webhooks:poll"], "webhookId": hook["id"], "name": "receiver"},
        headers=ADMIN_HEADERS,
    )
    assert made.status == 201, await made.text()
    created = await made.json()
    assert created["scopes"] == ["webhooks:poll"] and created["webhookId"] == hook["id"]
    receiver = Workspace(ws.id, ws.number, ws.number_id, created["key"])

    start = await poll(client, receiver, hook["id"])
    event = await publish(client, ws, {"id": "CT1"})
    assert (await drain(client, receiver, hook["id"], start["iterator"]))[0] == [event]
    await poll(client, receiver, other["id"], 403)
    listed = await client.get("/v1/webhooks", headers=receiver.headers)
    assert listed.status == 403
    keys = await client.get(f"/v1/admin/workspaces/{ws.id}/keys", headers=ADMIN_HEADERS)
    by_id = {k["id"]: k for k in (await keys.json())["data"]}
    assert by_id[created["id"]]["webhookId"] == hook["id"]

    # A key without webhooks:poll cannot be limited; a webhook of nobody's cannot be named.
    for body in [
        {"scopes": ["webhooks:read"], "webhookId": hook["id"]},
        {"scopes": ["webhooks:poll"], "webhookId": "WH" + "0" * 32},
        {"scopes": ["webhooks:poll"], "webhookId": "nope"},
    ]:
        refused = await client.post(
            f"/v1/admin/workspaces/{ws.id}/keys", json=body, headers=ADMIN_HEADERS
        )
        assert refused.status == 400, await refused.text()
        assert [e["path"] for e in (await refused.json())["errors"]] == ["body.webhookId"]

    # A key with webhooks:read (not limited) may poll too; one without either may not.
    await poll(client, ws, other["id"])
    events_only = await client.post(
        f"/v1/admin/workspaces/{ws.id}/keys", json={"scopes": ["events:write"]},
        headers=ADMIN_HEADERS,
    )  # fmt: skip
    writer = Workspace(ws.id, ws.number, ws.number_id, (await events_only.json())["key"])
    await poll(client, writer, hook["id"], 403)
