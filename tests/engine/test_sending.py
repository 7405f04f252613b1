"""One attempt end to end: headers, signatures, and every kind of failure."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient
from standardwebhooks.webhooks import Webhook

from dispatcher import __version__
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import attempted, only_delivery, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer


async def test_success_is_signed_and_recorded(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    event = await publish(client, ws)
    await make_engine()
    delivery = await attempted(client, ws, hook["id"])
    (request,) = receiver.requests
    # Verified with the reference implementation of Standard Webhooks.
    verified = Webhook(hook["secret"]).verify(request.body, request.headers)
    assert verified == event
    assert request.headers["webhook-id"] == delivery["id"]
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == f"dispatcher/{__version__}"
    assert orjson.loads(request.body) == delivery["payload"]
    assert delivery["status"] == "delivered"
    assert delivery["responseStatus"] == 200
    assert isinstance(delivery["responseMs"], int)
    assert delivery["deliveredAt"] is not None
    assert delivery["nextAttemptAt"] is None
    assert delivery["lastError"] is None


async def test_rotation_signs_with_both_secrets(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    rotated = await client.post(f"/v1/webhooks/{hook['id']}/secret/rotate", headers=ws.headers)
    fresh = (await rotated.json())["secret"]
    await publish(client, ws)
    await make_engine()
    await attempted(client, ws, hook["id"])
    (request,) = receiver.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    Webhook(hook["secret"]).verify(request.body, request.headers)
    Webhook(fresh).verify(request.body, request.headers)


async def test_rotation_grace_ends(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    rotated = await client.post(f"/v1/webhooks/{hook['id']}/secret/rotate", headers=ws.headers)
    fresh = (await rotated.json())["secret"]
    clock.advance(86400 + 1)
    await publish(client, ws)
    await make_engine()
    await attempted(client, ws, hook["id"])
    (request,) = receiver.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 1
    Webhook(fresh).verify(request.body, request.headers)


async def test_server_error_schedules_a_retry(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = answer(503)
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    await make_engine()
    delivery = await attempted(client, ws, hook["id"])
    assert delivery["status"] == "pending"
    assert delivery["lastError"] == "HTTP 503"
    assert delivery["responseStatus"] == 503
    next_at = datetime.fromisoformat(delivery["nextAttemptAt"])
    assert timedelta(seconds=4) < next_at - clock.now() < timedelta(seconds=6)


async def test_redirect_is_a_failure_and_not_followed(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/hook"] = answer(302, {"Location": receiver.url("/elsewhere")})
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    await make_engine()
    delivery = await attempted(client, ws, hook["id"])
    assert delivery["status"] == "pending"
    assert delivery["responseStatus"] == 302
    assert delivery["lastError"].startswith("HTTP 302")
    assert receiver.at("/elsewhere") == []


async def test_gone_gives_up_and_disables(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/hook"] = answer(410)
    hook = await subscribe(client, ws, receiver.url(), maxConcurrency=1)
    await publish(client, ws, "first")
    await make_engine()
    await wait_for(lambda: len(receiver.requests) >= 1)

    async def disabled() -> bool:
        got = await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)
        return bool((await got.json())["disabledReason"] == "gone")

    await wait_for(disabled, message="webhook disabled as gone")
    delivery = await only_delivery(client, ws, hook["id"])
    assert delivery["status"] == "failed"
    assert delivery["responseStatus"] == 410
    assert delivery["nextAttemptAt"] is None
    assert len(receiver.requests) == 1


async def test_retry_after_is_honoured(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/seconds"] = answer(429, {"Retry-After": "120"})
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=600), usegmt=True)
    receiver.behaviours["/date"] = answer(503, {"Retry-After": when})
    receiver.behaviours["/huge"] = answer(429, {"Retry-After": "999999"})
    hooks = [await subscribe(client, ws, receiver.url(p)) for p in ("/seconds", "/date", "/huge")]
    await publish(client, ws)
    await make_engine()
    delays = []
    for hook in hooks:
        delivery = await attempted(client, ws, hook["id"])
        next_at = datetime.fromisoformat(delivery["nextAttemptAt"])
        delays.append((next_at - clock.now()).total_seconds())
    assert 115 < delays[0] < 125
    assert 500 < delays[1] < 700
    assert 35000 < delays[2] <= 36000  # capped at the schedule's largest delay


async def test_timeout(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/hook"] = receiver.hang
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    await make_engine(request_timeout=0.3)
    delivery = await attempted(client, ws, hook["id"])
    assert delivery["lastError"] == "timeout after 0.3s"
    assert delivery["responseStatus"] is None
    assert delivery["responseMs"] >= 300
    assert delivery["status"] == "pending"


async def test_connection_refused(
    client: TestClient[Any, Any], ws: Workspace, make_engine: EngineFactory
) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hook = await subscribe(client, ws, f"http://127.0.0.1:{port}/hook")
    await publish(client, ws)
    await make_engine()
    delivery = await attempted(client, ws, hook["id"])
    assert delivery["lastError"] == "connection refused"
    assert delivery["responseStatus"] is None


async def test_oversized_response_is_cut_off(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        chunk = b"x" * 65536
        try:
            for _ in range(160):  # 10 MiB, unless the client stops reading first
                await response.write(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    receiver.behaviours["/hook"] = huge
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    engine = await make_engine()
    delivery = await attempted(client, ws, hook["id"])
    assert delivery["status"] == "delivered"
    assert engine.in_flight == 0


async def test_loopback_is_blocked_by_default(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    literal = await subscribe(client, ws, receiver.url())
    named = await subscribe(client, ws, f"http://localhost:{receiver.port}/hook")
    await publish(client, ws)
    await make_engine(allowed_cidrs=())
    for hook in (literal, named):
        delivery = await attempted(client, ws, hook["id"])
        assert delivery["lastError"] == (
            "blocked: loopback address (set DISPATCHER_ALLOWED_CIDRS to allow it)"
        ), delivery
        assert delivery["status"] == "pending"
    assert receiver.requests == []


async def test_disabled_webhook_test_delivery_is_sent(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": False}, headers=ws.headers)
    resp = await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)
    test_delivery = await resp.json()
    await make_engine()
    await wait_for(lambda: len(receiver.requests) == 1)
    body = Webhook(hook["secret"]).verify(receiver.requests[0].body, receiver.requests[0].headers)
    assert body["type"] == "webhook.test"
    assert receiver.requests[0].headers["webhook-id"] == test_delivery["id"]


async def test_manual_retry_resends_with_the_same_webhook_id(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    await make_engine()
    delivery = await attempted(client, ws, hook["id"])
    assert delivery["status"] == "delivered"
    resp = await client.post(
        f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/retry", headers=ws.headers
    )
    assert resp.status == 202
    await wait_for(lambda: len(receiver.requests) == 2, message="the retried request")
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == delivery["id"]
    assert first.body == second.body
    again = await attempted(client, ws, hook["id"], attempts=2)
    assert again["status"] == "delivered"
