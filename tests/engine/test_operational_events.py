"""Operational events, end to end: what the service tells a workspace about its own work
(docs/events.md, "Operational events"), delivered by the real engine to real receivers, and
the operator sink that hears every workspace's.

Each case has a watcher: a subscription that hears the operational types, beside the one the
events are about, which hears them too, and must never receive one about itself."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import standardwebhooks
from aiohttp.test_utils import TestClient

from dispatcher.domain.events import OPERATIONAL_TYPES
from dispatcher.domain.signing import new_secret
from dispatcher.errors import ConfigurationError
from dispatcher.settings import Settings
from dispatcher.store import operator_sink
from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace, wait_for
from tests.engine.helpers import attempted, get_json, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer, sequence

WATCHED = sorted(OPERATIONAL_TYPES)


def bodies(receiver: Receiver, path: str, event_type: str | None = None) -> list[Any]:
    sent = [json.loads(r.body) for r in receiver.at(path)]
    return [b for b in sent if event_type is None or b["type"] == event_type]


async def arrived(receiver: Receiver, path: str, event_type: str, n: int = 1) -> list[Any]:
    await wait_for(
        lambda: len(bodies(receiver, path, event_type)) >= n, message=f"{event_type} at {path}"
    )
    return bodies(receiver, path, event_type)


async def watch(client: TestClient[Any, Any], ws: Workspace, receiver: Receiver) -> Any:
    return await subscribe(client, ws, receiver.url("/watcher"), events=WATCHED)


async def test_an_exhausted_delivery_is_told_to_the_watcher_and_not_to_its_own_endpoint(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/failing"] = answer(503)
    failing = await subscribe(
        client, ws, receiver.url("/failing"), events=["contact.updated", *WATCHED]
    )
    await watch(client, ws, receiver)
    event = await publish(client, ws)
    engine = await make_engine(retry_schedule=(0.01,))

    async def retried() -> bool:
        engine.poke()
        return len(receiver.at("/failing")) >= 2

    await wait_for(retried, message="two attempts")
    (told,) = await arrived(receiver, "/watcher", "delivery.exhausted")
    delivery = (await get_json(client, ws, f"/v1/webhooks/{failing['id']}/deliveries"))["data"][0]
    assert told["data"] == {
        "id": delivery["id"],
        "webhookId": failing["id"],
        "eventId": event["id"],
        "eventType": "contact.updated",
        "attempts": 2,
        "lastError": delivery["lastError"],
    }
    assert delivery["lastError"] == "HTTP 503"
    # In the workspace's stream, like any event.
    listed = await get_json(client, ws, "/v1/events?type=delivery.exhausted")
    assert [e["id"] for e in listed["data"]] == [told["id"]]
    # Never to the subscription it is about: the failing endpoint heard only its two attempts.
    assert [b["type"] for b in bodies(receiver, "/failing")] == ["contact.updated"] * 2


async def test_a_delivery_that_succeeds_after_a_failure_is_recovered(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/flaky"] = sequence(answer(500), answer(200))
    flaky = await subscribe(client, ws, receiver.url("/flaky"))
    await watch(client, ws, receiver)
    await publish(client, ws, "CT1")
    engine = await make_engine(retry_schedule=(0.01, 0.01))

    async def delivered() -> bool:
        engine.poke()
        return len(receiver.at("/flaky")) >= 2

    await wait_for(delivered, message="the retry")
    (told,) = await arrived(receiver, "/watcher", "delivery.recovered")
    delivery = (await get_json(client, ws, f"/v1/webhooks/{flaky['id']}/deliveries"))["data"][0]
    assert told["data"] == {"id": delivery["id"], "webhookId": flaky["id"], "attempts": 2}
    # A first-time success is not news.
    await publish(client, ws, "CT2")
    await wait_for(lambda: len(receiver.at("/flaky")) >= 3, message="the second event")
    await wait_for(
        lambda: len(bodies(receiver, "/watcher")) >= 1, message="the watcher's deliveries"
    )
    assert len(bodies(receiver, "/watcher", "delivery.recovered")) == 1


async def test_a_gone_endpoint_is_disabled_and_told_with_its_last_delivery(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/gone"] = answer(410)
    gone = await subscribe(client, ws, receiver.url("/gone"))
    await watch(client, ws, receiver)
    await publish(client, ws)
    await make_engine()
    (disabled,) = await arrived(receiver, "/watcher", "webhook.disabled")
    (exhausted,) = await arrived(receiver, "/watcher", "delivery.exhausted")
    hook = await get_json(client, ws, f"/v1/webhooks/{gone['id']}")
    assert disabled["data"] == {
        "id": gone["id"],
        "reason": "gone",
        "disabledAt": hook["disabledAt"],
    }
    assert exhausted["data"]["webhookId"] == gone["id"]
    assert exhausted["data"]["lastError"] == "HTTP 410 (gone: webhook disabled)"


async def test_disabling_and_enabling_by_hand_are_told_but_not_to_the_webhook_itself(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    hook = await subscribe(client, ws, receiver.url("/hook"), events=WATCHED)
    await watch(client, ws, receiver)
    await make_engine()
    for enabled in (False, True):
        resp = await client.patch(
            f"/v1/webhooks/{hook['id']}", json={"enabled": enabled}, headers=ws.headers
        )
        assert resp.status == 200, await resp.text()
    (disabled,) = await arrived(receiver, "/watcher", "webhook.disabled")
    (enabled_,) = await arrived(receiver, "/watcher", "webhook.enabled")
    assert disabled["data"]["id"] == hook["id"]
    assert disabled["data"]["reason"] == "manual"
    assert datetime.fromisoformat(disabled["data"]["disabledAt"]).tzinfo is not None
    assert enabled_["data"] == {"id": hook["id"]}
    # A PATCH that changes nothing about it tells nothing.
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"enabled": True}, headers=ws.headers
    )
    assert resp.status == 200
    listed = await get_json(client, ws, "/v1/events")
    assert sorted(e["type"] for e in listed["data"]) == ["webhook.disabled", "webhook.enabled"]
    assert receiver.at("/hook") == []


async def test_an_operational_delivery_that_fails_gives_rise_to_nothing(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    """No cascades: the watcher's own delivery of `webhook.disabled` runs out of attempts,
    and no `delivery.exhausted` is made about it (which would fail, and so on)."""
    receiver.behaviours["/watcher"] = answer(500)
    hook = await subscribe(client, ws, receiver.url("/hook"))
    watcher = await subscribe(client, ws, receiver.url("/watcher"), events=WATCHED)
    other = await subscribe(client, ws, receiver.url("/other"), events=["delivery.exhausted"])
    await make_engine(retry_schedule=())
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"enabled": False}, headers=ws.headers
    )
    assert resp.status == 200

    async def given_up() -> bool:
        data = (await get_json(client, ws, f"/v1/webhooks/{watcher['id']}/deliveries"))["data"]
        return bool(data) and data[0]["status"] == "failed"

    await wait_for(given_up, message="the watcher's delivery given up")
    listed = await get_json(client, ws, "/v1/events")
    assert [e["type"] for e in listed["data"]] == ["webhook.disabled"]
    assert (await get_json(client, ws, f"/v1/webhooks/{other['id']}/deliveries"))["data"] == []


async def test_operational_types_are_the_services_to_publish(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    for event_type in WATCHED:
        resp = await client.post(
            "/v1/events", json={"type": event_type, "data": {"id": "WH1"}}, headers=ws.headers
        )
        assert resp.status == 400, event_type
        body = await resp.json()
        assert "published by the service" in json.dumps(body)
    assert (await get_json(client, ws, "/v1/events"))["data"] == []


async def test_the_operator_sink_hears_every_workspace_with_its_id(
    client: TestClient[Any, Any],
    db: Database,
    make_workspace: MakeWorkspace,
    receiver: Receiver,
    make_engine: EngineFactory,
) -> None:
    secret = new_secret()
    await operator_sink.configure(db, receiver.url("/operator"), secret, datetime.now(UTC))
    first, second = await make_workspace(), await make_workspace()
    receiver.behaviours["/gone"] = answer(410)
    for ws in (first, second):
        await subscribe(client, ws, receiver.url("/gone"))
        await publish(client, ws)
    await make_engine()
    told = await arrived(receiver, "/operator", "webhook.disabled", 2)
    assert sorted(t["data"]["workspaceId"] for t in told) == sorted([first.id, second.id])
    await arrived(receiver, "/operator", "delivery.exhausted", 2)
    # Signed like any delivery, with the configured secret.
    verifier = standardwebhooks.Webhook(secret)
    for request in receiver.at("/operator"):
        verifier.verify(request.body, request.headers)
    # Only there: a workspace's own copy has no workspaceId, and workspaces do not see the
    # sink's events.
    for ws in (first, second):
        events = (await get_json(client, ws, "/v1/events"))["data"]
        assert sorted(e["type"] for e in events) == [
            "contact.updated",
            "delivery.exhausted",
            "webhook.disabled",
        ]
        for listed in events:
            assert "workspaceId" not in listed["data"]


async def test_the_sinks_own_failures_give_rise_to_nothing(
    client: TestClient[Any, Any],
    db: Database,
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
) -> None:
    receiver.behaviours["/operator"] = answer(410)
    receiver.behaviours["/gone"] = answer(410)
    await operator_sink.configure(db, receiver.url("/operator"), new_secret(), datetime.now(UTC))
    await subscribe(client, ws, receiver.url("/gone"))
    await publish(client, ws)
    await make_engine()

    async def sink_settled() -> bool:
        async with db.acquire() as conn:
            n = await conn.fetchval(
                "SELECT count(*) FROM deliveries d JOIN workspaces w ON w.id = d.workspace_id "
                "WHERE w.operator AND d.status = 'failed'"
            )
        return bool(n >= 1)

    await wait_for(sink_settled, message="the sink's delivery given up")
    async with db.acquire() as conn:
        made = await conn.fetch(
            "SELECT e.type FROM events e JOIN workspaces w ON w.id = e.workspace_id "
            "WHERE w.operator ORDER BY e.type"
        )
    # The two events of the workspace's gone endpoint, and nothing about the sink's own 410.
    assert sorted({r["type"] for r in made}) == ["delivery.exhausted", "webhook.disabled"]
    assert len(made) == 2


async def test_the_sink_follows_its_settings(db: Database, receiver: Receiver) -> None:
    now = datetime.now(UTC)

    async def live_sinks() -> list[str]:
        async with db.acquire() as conn:
            rows = await conn.fetch(
                "SELECT h.url FROM webhooks h JOIN workspaces w ON w.id = h.workspace_id "
                "WHERE w.operator AND h.deleted_at IS NULL AND h.disabled_at IS NULL"
            )
        return [r["url"] for r in rows]

    await operator_sink.configure(db, receiver.url("/a"), new_secret(), now)
    await operator_sink.configure(db, receiver.url("/a"), new_secret(), now)
    assert await live_sinks() == [receiver.url("/a")]
    await operator_sink.configure(db, receiver.url("/b"), new_secret(), now)
    assert await live_sinks() == [receiver.url("/b")]
    await operator_sink.configure(db, None, None, now)
    assert await live_sinks() == []


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DISPATCHER_OPERATOR_WEBHOOK_URL": "https://ops.example/hook"}, "is required"),
        (
            {
                "DISPATCHER_OPERATOR_WEBHOOK_URL": "https://ops.example/hook",
                "DISPATCHER_OPERATOR_WEBHOOK_SECRET": "not-a-secret-value",
            },
            "whsec_",
        ),
        (
            {
                "DISPATCHER_OPERATOR_WEBHOOK_URL": "https://ops.example/hook",
                "DISPATCHER_OPERATOR_WEBHOOK_SECRET": "whsec_c2hvcnQ=",
            },
            "24 to 64 bytes",
        ),
        (
            {
                "DISPATCHER_OPERATOR_WEBHOOK_URL": "ftp://ops.example/hook",
                "DISPATCHER_OPERATOR_WEBHOOK_SECRET": new_secret(),
            },
            "DISPATCHER_OPERATOR_WEBHOOK_URL",
        ),
    ],
)
def test_a_sink_without_a_valid_secret_or_url_stops_start_up(
    env: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.from_env(env)
    message = str(refused.value)
    assert words in message
    secret = env.get("DISPATCHER_OPERATOR_WEBHOOK_SECRET")
    if secret and "URL" not in words:
        assert secret not in message  # a secret is never repeated


def test_the_sinks_secret_is_never_in_the_logged_settings() -> None:
    secret = new_secret()
    settings = Settings.from_env(
        {
            "DISPATCHER_OPERATOR_WEBHOOK_URL": "https://ops.example/hook",
            "DISPATCHER_OPERATOR_WEBHOOK_SECRET": secret,
        }
    )
    assert settings.operator_webhook_secret == secret
    assert secret not in repr(settings.redacted())


async def test_a_manual_retry_is_recovered_only_after_a_failure(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    """After a manual retry the attempt log says whether an earlier attempt failed: a retry
    of a delivered delivery is no recovery; of an exhausted one, it is."""
    receiver.behaviours["/flaky"] = sequence(answer(500), answer(200))
    fine = await subscribe(client, ws, receiver.url("/fine"))
    flaky = await subscribe(client, ws, receiver.url("/flaky"))
    await watch(client, ws, receiver)
    await publish(client, ws)
    engine = await make_engine(retry_schedule=())
    await arrived(receiver, "/watcher", "delivery.exhausted")
    for hook in (fine, flaky):
        (delivery,) = (await get_json(client, ws, f"/v1/webhooks/{hook['id']}/deliveries"))["data"]
        resp = await client.post(
            f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/retry", headers=ws.headers
        )
        assert resp.status == 202, await resp.text()
    engine.poke()
    (told,) = await arrived(receiver, "/watcher", "delivery.recovered")
    assert told["data"]["webhookId"] == flaky["id"]
    await attempted(client, ws, fine["id"], attempts=2, engine=engine)
    assert len(bodies(receiver, "/watcher", "delivery.recovered")) == 1
