"""The engine never sends an expunged event's data: a pending delivery is given up, not sent;
an attempt in flight at the expunge is recorded as it happened, without its response excerpt
and without a retry; a lease handed back unrecorded is given up when claimed."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import REGISTRY

from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import deliveries, get_json, publish, subscribe
from tests.receiver import EngineFactory, Receiver

SECRET = b"SECRET-CT1"


async def expunge(client: TestClient[Any, Any], ws: Workspace, event_id: str) -> Any:
    resp = await client.post(f"/v1/events/{event_id}/expunge", headers=ws.headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def delivery_of(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, event_id: str
) -> Any:
    (found,) = [d for d in await deliveries(client, ws, hook_id) if d["payload"]["id"] == event_id]
    return found


async def settled(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, event_id: str
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def done() -> bool:
        seen.update(await delivery_of(client, ws, hook_id, event_id))
        return bool(seen["status"] != "pending")

    await wait_for(done, message=f"the delivery of {event_id} settled")
    return seen


async def delivered_barrier(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, receiver: Receiver
) -> None:
    """Publish another event and wait until it is delivered: the engine has claimed past
    whatever was due before it (a proof that what was not sent, was not sent)."""
    barrier = await publish(client, ws, "CT-barrier")
    await settled(client, ws, hook_id, barrier["id"])
    assert any(barrier["id"].encode() in r.body for r in receiver.requests)


def given_up_expunged() -> float:
    return (
        REGISTRY.get_sample_value("dispatcher_deliveries_given_up_total", {"reason": "expunged"})
        or 0.0
    )


async def test_a_pending_delivery_of_an_expunged_event_is_never_sent(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    event = await publish(client, ws, SECRET.decode())
    await expunge(client, ws, event["id"])
    await make_engine()
    await delivered_barrier(client, ws, hook["id"], receiver)
    assert len(receiver.requests) == 1 and SECRET not in receiver.requests[0].body
    given_up = await delivery_of(client, ws, hook["id"], event["id"])
    assert (given_up["status"], given_up["attempts"], given_up["lastError"]) == (
        "failed",
        0,
        "expunged",
    )


async def test_an_attempt_in_flight_fails_and_is_given_up_without_its_excerpt(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    release = asyncio.Event()

    async def hang_then_fail(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if SECRET not in body:
            return web.Response(status=200)
        await asyncio.wait_for(release.wait(), timeout=30)
        return web.Response(status=500, body=b"could not store " + SECRET)

    receiver.behaviours["/hook"] = hang_then_fail
    hook = await subscribe(client, ws, receiver.url())
    event = await publish(client, ws, SECRET.decode())
    before = given_up_expunged()
    engine = await make_engine(retry_schedule=(1.0,), disable_after=10**8)
    await wait_for(lambda: receiver.in_flight.get("/hook", 0) >= 1, message="in flight")
    erased = await expunge(client, ws, event["id"])
    # Left to its attempt meanwhile.
    assert [d["status"] for d in erased["deliveries"]] == ["pending"]
    release.set()
    failed = await settled(client, ws, hook["id"], event["id"])
    assert failed["attempts"] == 1 and failed["responseStatus"] == 500
    assert failed["lastError"] == "HTTP 500 (expunged)"
    assert failed["nextAttemptAt"] is None
    assert failed["payload"]["data"] is None and failed["expunged"] is True
    (attempt,) = (
        await get_json(client, ws, f"/v1/webhooks/{hook['id']}/deliveries/{failed['id']}/attempts")
    )["data"]
    assert (attempt["outcome"], attempt["responseStatus"]) == ("http_error", 500)
    assert attempt["responseBody"] is None
    await wait_for(lambda: given_up_expunged() == before + 1, message="the give-up counted")
    # Its retry would have been due a second later: never sent.
    clock.advance(5)
    engine.poke()
    await delivered_barrier(client, ws, hook["id"], receiver)
    assert sum(SECRET in r.body for r in receiver.requests) == 1


async def test_an_attempt_in_flight_that_succeeds_is_delivered_without_its_excerpt(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    release = asyncio.Event()

    async def hang_then_echo(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        await asyncio.wait_for(release.wait(), timeout=30)
        return web.Response(status=200, body=b"got " + body)

    receiver.behaviours["/hook"] = hang_then_echo
    hook = await subscribe(client, ws, receiver.url())
    event = await publish(client, ws, SECRET.decode())
    await make_engine()
    await wait_for(lambda: receiver.in_flight.get("/hook", 0) >= 1, message="in flight")
    await expunge(client, ws, event["id"])
    release.set()
    delivered = await settled(client, ws, hook["id"], event["id"])
    # What happened, truthfully: the receiver took it.
    assert (delivered["status"], delivered["attempts"], delivered["lastError"]) == (
        "delivered",
        1,
        None,
    )
    (attempt,) = (
        await get_json(
            client, ws, f"/v1/webhooks/{hook['id']}/deliveries/{delivered['id']}/attempts"
        )
    )["data"]
    assert attempt["outcome"] == "success" and attempt["responseBody"] is None


async def test_a_lease_handed_back_after_the_expunge_is_given_up_not_sent(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    receiver: Receiver,
    make_engine: EngineFactory,
) -> None:
    """An engine claimed the delivery (in flight, as far as the expunge can tell) and died."""
    hook = await subscribe(client, ws, receiver.url())
    event = await publish(client, ws, SECRET.decode())
    async with db.acquire() as conn:  # leased by an engine that no longer beats
        await conn.execute(
            "UPDATE delivery_queue SET lease_owner = 'engine-dead', due_at = 'infinity'"
        )
    erased = await expunge(client, ws, event["id"])
    assert [d["status"] for d in erased["deliveries"]] == ["pending"]
    await make_engine()
    orphan = await settled(client, ws, hook["id"], event["id"])
    assert (orphan["status"], orphan["attempts"], orphan["lastError"]) == ("failed", 0, "expunged")
    await delivered_barrier(client, ws, hook["id"], receiver)
    assert all(SECRET not in r.body for r in receiver.requests)
