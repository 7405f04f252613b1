"""The demo receiver (api/demo.py) as a receiver and as a resource: it verifies each request's
Standard Webhooks signature with a demo webhook's secret, keeps the latest requests, and shows
them to the demo workspace's keys only."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from standardwebhooks.webhooks import Webhook

from dispatcher.api import demo
from dispatcher.api.app import create_app
from dispatcher.api.demo import DemoReceiver
from dispatcher.api.framework.context import SCOPES, Services
from dispatcher.store import workspaces
from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace

URL = "http://127.0.0.1:8080/demo/receiver"


@dataclasses.dataclass
class Demo:
    client: TestClient[Any, Any]
    receiver: DemoReceiver
    headers: dict[str, str]
    webhook_id: str


@pytest.fixture
async def demo_app(services: Services, db: Database) -> AsyncIterator[Demo]:
    key = await workspaces.create_demo_if_empty(
        db, "+15555550100", sorted(SCOPES), workspaces.DemoWebhook(URL, ["call.missed"])
    )
    assert key is not None
    workspace_id = await workspaces.demo_workspace_id(db)
    assert workspace_id is not None
    async with db.acquire() as conn:
        webhook_id = await conn.fetchval("SELECT id FROM webhooks WHERE url = $1", URL)
    receiver = DemoReceiver(URL, workspace_id)
    app = create_app(services, receiver)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield Demo(client, receiver, {"Authorization": f"Bearer {key}"}, webhook_id)


async def secret_of(demo_app: Demo) -> str:
    resp = await demo_app.client.get(
        f"/v1/webhooks/{demo_app.webhook_id}/secret", headers=demo_app.headers
    )
    found: str = (await resp.json())["secret"]
    return found


def signed(
    secret: str, body: bytes, message_id: str = "WD1", at: datetime | None = None
) -> dict[str, str]:
    moment = at or datetime.now(UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, moment, body.decode()),
        "Content-Type": "application/json",
    }


EVENT = orjson.dumps({"type": "call.missed", "data": {"id": "AC1", "text": "<img src=x>"}})


async def latest(demo_app: Demo) -> list[dict[str, Any]]:
    resp = await demo_app.client.get("/demo/receiver", headers=demo_app.headers)
    assert resp.status == 200, await resp.text()
    data: list[dict[str, Any]] = (await resp.json())["data"]
    return data


async def test_the_demo_webhook_is_made_with_the_demo(demo_app: Demo) -> None:
    resp = await demo_app.client.get("/v1/webhooks", headers=demo_app.headers)
    (hook,) = (await resp.json())["data"]
    assert (hook["url"], hook["events"], hook["name"]) == (URL, ["call.missed"], "Demo receiver")


async def test_a_signed_delivery_is_verified_and_kept(demo_app: Demo) -> None:
    secret = await secret_of(demo_app)
    resp = await demo_app.client.post("/demo/receiver", data=EVENT, headers=signed(secret, EVENT))
    assert resp.status == 204, await resp.text()
    (got,) = await latest(demo_app)
    assert got["verified"] is True
    assert (got["webhookId"], got["deliveryId"], got["eventType"]) == (
        demo_app.webhook_id,
        "WD1",
        "call.missed",
    )
    assert got["payload"] == orjson.loads(EVENT)
    assert got["receivedAt"].endswith("Z")


async def test_a_bad_signature_is_refused_and_shown_unverified(demo_app: Demo) -> None:
    secret = await secret_of(demo_app)
    other = "whsec_" + "A" * 43 + "="
    stale = datetime.now(UTC) - timedelta(minutes=6)
    tampered = signed(secret, EVENT)
    cases = [
        signed(other, EVENT),  # another secret
        signed(secret, EVENT, at=stale),  # a replay
        {**tampered, "webhook-id": "WD2"},  # the id is signed too
        {"Content-Type": "application/json"},  # no signature at all
    ]
    for headers in cases:
        resp = await demo_app.client.post("/demo/receiver", data=EVENT, headers=headers)
        assert resp.status == 401, await resp.text()
        assert (await resp.json())["code"] == "invalid_signature"
    kept = await latest(demo_app)
    assert len(kept) == len(cases)
    assert all(not k["verified"] and k["webhookId"] is None for k in kept)
    resp = await demo_app.client.post(
        "/demo/receiver", data=b"not json", headers=signed(other, b"x")
    )
    assert resp.status == 401
    assert (await latest(demo_app))[0]["payload"] is None


async def test_the_previous_secret_verifies_during_its_grace(demo_app: Demo) -> None:
    before = await secret_of(demo_app)
    resp = await demo_app.client.post(
        f"/v1/webhooks/{demo_app.webhook_id}/secret/rotate", headers=demo_app.headers
    )
    after = (await resp.json())["secret"]
    for secret in (before, after):
        resp = await demo_app.client.post(
            "/demo/receiver", data=EVENT, headers=signed(secret, EVENT)
        )
        assert resp.status == 204


async def test_only_the_latest_are_kept_newest_first(demo_app: Demo) -> None:
    secret = await secret_of(demo_app)
    for n in range(demo.KEPT + 5):
        resp = await demo_app.client.post(
            "/demo/receiver", data=EVENT, headers=signed(secret, EVENT, message_id=f"WD{n}")
        )
        assert resp.status == 204
    kept = await latest(demo_app)
    assert [k["deliveryId"] for k in kept] == [f"WD{n}" for n in reversed(range(5, demo.KEPT + 5))]


async def test_a_large_body_is_refused_and_not_kept(demo_app: Demo) -> None:
    big = orjson.dumps({"type": "call.missed", "data": {"pad": "x" * demo.MAX_BODY_BYTES}})
    resp = await demo_app.client.post(
        "/demo/receiver", data=big, headers=signed(await secret_of(demo_app), big)
    )
    assert resp.status == 413
    assert await latest(demo_app) == []


async def test_only_the_demo_workspace_reads_it(
    demo_app: Demo, make_workspace: MakeWorkspace, ws: Workspace
) -> None:
    client = demo_app.client
    assert (await client.get("/demo/receiver")).status == 401
    resp = await client.get("/demo/receiver", headers=ws.headers)
    assert resp.status == 404 and (await resp.json())["code"] == "not_found"
    without = await make_workspace(scopes=["messages:read"])
    assert (await client.get("/demo/receiver", headers=without.headers)).status == 403
    resp = await client.get("/demo/receiver", params={"x": "1"}, headers=demo_app.headers)
    assert resp.status == 400


async def test_without_a_demo_there_is_no_receiver(client: TestClient[Any, Any]) -> None:
    assert (await client.post("/demo/receiver", data=EVENT)).status == 404
    assert (await client.get("/demo/receiver")).status == 404


async def test_a_second_start_finds_the_demo_and_makes_nothing(db: Database) -> None:
    hook = workspaces.DemoWebhook(URL, ["call.missed"])
    assert await workspaces.create_demo_if_empty(db, "+15555550100", ["messages:read"], hook)
    assert (
        await workspaces.create_demo_if_empty(db, "+15555550100", ["messages:read"], hook) is None
    )
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM webhooks") == 1
