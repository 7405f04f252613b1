"""Payload filters: stored and returned, applied by fan-out (every door) and by recover, not by
test deliveries; and `POST /v1/webhooks/{id}/filter/test`, which answers as fan-out decides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from dispatcher.domain.endpoints import EndpointOptions
from dispatcher.store import webhooks
from dispatcher.store.database import Database
from tests.api.payload_filters import URL, delivered_ids, filter_test, publish, subscribe
from tests.clock import FakeClock
from tests.conftest import MakeWorkspace, Workspace


async def test_a_filter_is_stored_returned_and_patched(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    wanted = {"direction": "incoming", "tags": ["vip"], "address": {"city": "Paris"}}
    hook = await subscribe(client, ws, filter=wanted)
    assert hook["filter"] == wanted
    hid = hook["id"]
    got = await (await client.get(f"/v1/webhooks/{hid}", headers=ws.headers)).json()
    assert got["filter"] == wanted
    assert (await subscribe(client, ws, filter={}))["filter"] is None  # {} is stored as null

    async def ok(body: Any) -> Any:
        resp = await client.patch(f"/v1/webhooks/{hid}", json=body, headers=ws.headers)
        assert resp.status == 200, await resp.text()
        return (await resp.json())["filter"]

    assert await ok({}) == wanted  # absent keeps
    assert await ok({"filter": {"a": 1}}) == {"a": 1}  # replaced whole
    assert await ok({"filter": {}}) is None
    assert await ok({"filter": {"a": 1}}) == {"a": 1}
    assert await ok({"filter": None}) is None


BAD_FILTERS: list[Any] = [
    [],
    [{"direction": "incoming"}],
    "direction=incoming",
    1,
    True,
    {"k": "v" * 4096},
    {"k": list(range(1500))},
]


async def test_a_bad_filter_is_refused_naming_it_and_changes_nothing(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    for bad in BAD_FILTERS:
        resp = await client.post(
            "/v1/webhooks",
            json={"url": URL, "events": ["contact.updated"], "filter": bad},
            headers=ws.headers,
        )
        assert resp.status == 400, bad
        error = await resp.json()
        assert [e["path"] for e in error["errors"]] == ["body.filter"], error
    assert (await (await client.get("/v1/webhooks", headers=ws.headers)).json())["data"] == []
    hook = await subscribe(client, ws, filter={"kept": True}, name="kept")
    for bad in BAD_FILTERS:
        resp = await client.patch(
            f"/v1/webhooks/{hook['id']}", json={"name": "changed", "filter": bad},
            headers=ws.headers,
        )  # fmt: skip
        assert resp.status == 400, bad
        assert [e["path"] for e in (await resp.json())["errors"]] == ["body.filter"]
    got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert got["filter"] == {"kept": True} and got["name"] == "kept"
    # At the limit, accepted: 4096 bytes of compact JSON, whatever the request's spacing.
    at_limit = {"k": "v" * (4096 - len('{"k":""}'))}
    assert (await subscribe(client, ws, filter=at_limit))["filter"] == at_limit


DATA = {
    "id": "CT1",
    "direction": "incoming",
    "tags": ["vip", "new"],
    "score": 1,
    "address": {"city": "Paris", "zip": "75001", "lines": ["1 rue", "2e"]},
    "nothing": None,
}

# (filter, whether DATA contains it, as Postgres' @> says)
CONTAINMENT: list[tuple[dict[str, Any], bool]] = [
    ({"direction": "incoming"}, True),
    ({"direction": "outgoing"}, False),
    ({"direction": "Incoming"}, False),  # values compare exactly
    ({"Direction": "incoming"}, False),  # and so do keys
    ({"id": "CT1", "direction": "incoming"}, True),
    ({"id": "CT1", "direction": "outgoing"}, False),  # every pair must be there
    ({"tags": ["vip"]}, True),  # an array contains any subset of its elements
    ({"tags": ["new", "vip"]}, True),  # in any order
    ({"tags": ["vip", "vip"]}, True),  # duplicates ignored
    ({"tags": ["old"]}, False),
    ({"tags": []}, True),
    ({"tags": "vip"}, False),  # a scalar is not contained in an array below the top level
    ({"score": 1.0}, True),  # numbers compare by value
    ({"score": "1"}, False),  # not by text
    ({"address": {"city": "Paris"}}, True),  # nested objects contain their subsets
    ({"address": {"city": "Lyon"}}, False),
    ({"address": {}}, True),
    ({"address": {"lines": ["2e"]}}, True),
    ({"address": "Paris"}, False),
    ({"nothing": None}, True),
    ({"absent": None}, False),  # null is a value, not "no such key"
    ({"missing": "x"}, False),
]


@pytest.mark.parametrize(("wanted", "contained"), CONTAINMENT, ids=repr)
async def test_fan_out_and_the_filter_test_agree(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    wanted: dict[str, Any],
    contained: bool,
) -> None:
    hook = await subscribe(client, ws, filter=wanted)
    every = await subscribe(client, ws)
    await publish(client, ws, DATA)
    assert await delivered_ids(db, hook["id"]) == (["CT1"] if contained else [])
    assert await delivered_ids(db, every["id"]) == ["CT1"]
    saved = await filter_test(client, ws, hook["id"], {"data": DATA})
    assert saved.status == 200, await saved.text()
    assert await saved.json() == {"matches": contained}
    given = await filter_test(client, ws, every["id"], {"data": DATA, "filter": wanted})
    assert await given.json() == {"matches": contained}


async def test_every_door_of_fan_out_applies_the_filter(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """The API, inbound messages (the service's own events) and the SQL outbox."""
    incoming = await subscribe(client, ws, ["message.received", "contact.updated"],
                               filter={"direction": "incoming"})  # fmt: skip
    outgoing = await subscribe(client, ws, ["message.received", "contact.updated"],
                               filter={"direction": "outgoing"})  # fmt: skip
    resp = await client.post(
        "/v1/inbound/messages",
        json={"from": "+15555550001", "to": ws.number, "text": "hi"},
        headers=ws.headers,
    )
    assert resp.status == 201, await resp.text()
    async with db.acquire() as conn:
        await conn.fetchval(
            "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb)",
            ws.id, {"id": "OUTBOX", "direction": "incoming"},
        )  # fmt: skip
        counts = {
            r["webhook_id"]: r["n"]
            for r in await conn.fetch(
                "SELECT webhook_id, count(*) AS n FROM deliveries GROUP BY webhook_id"
            )
        }
    assert counts == {incoming["id"]: 2}
    assert outgoing["id"] not in counts


async def test_recover_applies_the_filter(
    client: TestClient[Any, Any], ws: Workspace, db: Database, clock: FakeClock
) -> None:
    since = isoformat(clock.now() - timedelta(seconds=1))
    hook = await subscribe(client, ws)
    # Failed deliveries made before the filter: recovered only if the filter passes them.
    await publish(client, ws, {"id": "old-match", "keep": True})
    await publish(client, ws, {"id": "old-other", "keep": False})
    async with db.acquire() as conn:
        await conn.execute("DELETE FROM delivery_queue")
        await conn.execute(
            "UPDATE deliveries SET status = 'failed', next_attempt_at = NULL WHERE webhook_id = $1",
            hook["id"],
        )
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"filter": {"keep": True}, "enabled": False},
        headers=ws.headers,
    )  # fmt: skip
    assert resp.status == 200
    # Missed while disabled: created only if the filter passes them.
    await publish(client, ws, {"id": "missed-match", "keep": True})
    await publish(client, ws, {"id": "missed-other", "keep": False})
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": True}, headers=ws.headers)
    resp = await client.post(
        f"/v1/webhooks/{hook['id']}/recover", json={"since": since}, headers=ws.headers
    )
    assert resp.status == 202
    assert await resp.json() == {"queued": 2}
    listed = await (
        await client.get(f"/v1/webhooks/{hook['id']}/deliveries?status=pending", headers=ws.headers)
    ).json()
    assert sorted(d["payload"]["data"]["id"] for d in listed["data"]) == [
        "missed-match",
        "old-match",
    ]


async def test_a_test_delivery_ignores_the_filter(
    client: TestClient[Any, Any], ws: Workspace, db: Database, clock: FakeClock
) -> None:
    hook = await subscribe(client, ws, filter={"never": "there"})
    resp = await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)
    assert resp.status == 202
    test_delivery = await resp.json()
    assert test_delivery["event"] == "webhook.test" and test_delivery["status"] == "pending"
    # Failed, then recovered: a test delivery is never filtered out.
    async with db.acquire() as conn:
        await conn.execute("DELETE FROM delivery_queue")
        await conn.execute("UPDATE deliveries SET status = 'failed', next_attempt_at = NULL")
    since = isoformat(clock.now() - timedelta(minutes=1))
    resp = await client.post(
        f"/v1/webhooks/{hook['id']}/recover", json={"since": since}, headers=ws.headers
    )
    assert await resp.json() == {"queued": 1}


async def test_the_filter_test_endpoint(client: TestClient[Any, Any], ws: Workspace) -> None:
    hook = await subscribe(client, ws, filter={"direction": "incoming"})
    plain = await subscribe(client, ws)
    incoming, outgoing = {"id": "x", "direction": "incoming"}, {"direction": "outgoing"}

    async def matches(hook_id: str, body: Any, key: Workspace = ws) -> bool:
        resp = await filter_test(client, key, hook_id, body)
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
        assert set(answer) == {"matches"}
        return bool(answer["matches"])

    assert await matches(hook["id"], {"data": incoming}) is True
    assert await matches(hook["id"], {"data": outgoing}) is False
    assert await matches(hook["id"], {"data": {}}) is False
    # A filter given replaces the saved one; null or {} is no filter, which passes all.
    assert await matches(hook["id"], {"data": outgoing, "filter": {"direction": "outgoing"}})
    assert await matches(hook["id"], {"data": outgoing, "filter": None}) is True
    assert await matches(hook["id"], {"data": outgoing, "filter": {}}) is True
    assert await matches(plain["id"], {"data": outgoing}) is True  # none saved
    assert await matches(plain["id"], {"data": {}}) is True
    # Trying a filter saves nothing.
    got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert got["filter"] == {"direction": "incoming"}


async def test_the_filter_test_refuses_bad_bodies(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    hook = await subscribe(client, ws)
    cases: list[tuple[Any, str]] = [
        ({}, "body.data"),
        ({"filter": {"a": 1}}, "body.data"),
        ({"data": None}, "body.data"),
        ({"data": [1]}, "body.data"),
        ({"data": "x"}, "body.data"),
        ({"data": {}, "filter": []}, "body.filter"),
        ({"data": {}, "filter": "a"}, "body.filter"),
        ({"data": {}, "filter": {"k": "v" * 4096}}, "body.filter"),
        ({"data": {}, "other": 1}, "body.other"),
    ]
    for body, path in cases:
        resp = await filter_test(client, ws, hook["id"], body)
        assert resp.status == 400, body
        assert path in [e["path"] for e in (await resp.json())["errors"]], body


async def test_the_filter_test_needs_webhooks_read_and_the_workspaces_own_webhook(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace, db: Database
) -> None:
    hook = await subscribe(client, ws, filter={"a": 1})
    body = {"data": {"a": 1}}
    # Another workspace's webhook is not found, whatever its scopes.
    for other in (await make_workspace(scopes=["webhooks:read"]), await make_workspace()):
        resp = await filter_test(client, other, hook["id"], body)
        assert resp.status == 404, await resp.text()
    writer_only = await make_workspace(scopes=["webhooks:write", "messages:read"])
    resp = await filter_test(client, writer_only, hook["id"], body)
    assert resp.status == 403
    assert "webhooks:read" in (await resp.json())["message"]
    # Its own webhook, with webhooks:read alone.
    reader = await make_workspace(scopes=["webhooks:read"])
    options = EndpointOptions(url=URL, events=["contact.updated"], payload_filter={"a": 1})
    own, _ = await webhooks.create(
        db, workspace_id=reader.id, options=options, now=datetime.now(UTC)
    )
    resp = await filter_test(client, reader, own.id, body)
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"matches": True}
    resp = await filter_test(client, reader, own.id, {"data": {"a": 2}})
    assert await resp.json() == {"matches": False}
    # A deleted webhook is gone for this too.
    await client.delete(f"/v1/webhooks/{hook['id']}", headers=ws.headers)
    resp = await filter_test(client, ws, hook["id"], body)
    assert resp.status == 404
