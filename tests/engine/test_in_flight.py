"""The record tells what the receiver saw, whatever is disabled, deleted, retried or
recovered while an attempt is in flight."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from dispatcher.engine import worker
from dispatcher.store import queue
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import deliveries, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer


async def in_flight(receiver: Receiver, path: str = "/hook") -> None:
    await wait_for(lambda: receiver.in_flight.get(path, 0) >= 1, message="a request in flight")


async def by_event(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> dict[str, Any]:
    return {d["payload"]["data"]["id"]: d for d in await deliveries(client, ws, hook_id)}


async def settled(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, data_id: str, attempts: int = 1
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def done() -> bool:
        seen.update((await by_event(client, ws, hook_id))[data_id])
        return bool(seen["attempts"] >= attempts and seen["status"] != "pending")

    await wait_for(done, message=f"{data_id} settled after {attempts} attempt(s)")
    return seen


async def test_disabled_during_a_successful_attempt_is_delivered(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = receiver.hang
    hook = await subscribe(client, ws, receiver.url(), maxConcurrency=1)
    await publish(client, ws, "sent")
    await publish(client, ws, "waiting")
    await make_engine()
    await in_flight(receiver)
    off = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"enabled": False}, headers=ws.headers
    )
    assert off.status == 200
    rows = await by_event(client, ws, hook["id"])
    # Not yet attempted: given up at once. In flight: left to its attempt.
    assert rows["waiting"]["status"] == "failed"
    assert rows["waiting"]["attempts"] == 0
    assert rows["waiting"]["lastError"] == "webhook disabled"
    assert rows["sent"]["status"] == "pending"
    receiver.release.set()
    sent = await settled(client, ws, hook["id"], "sent")
    assert sent["status"] == "delivered"
    assert sent["attempts"] == 1
    assert sent["responseStatus"] == 200
    assert sent["lastError"] is None
    assert sent["deliveredAt"] is not None
    # Enable and recover: the delivered one is never sent again; the given-up one is.
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": True}, headers=ws.headers)
    since = isoformat(clock.now() - timedelta(minutes=5))
    recovered = await client.post(
        f"/v1/webhooks/{hook['id']}/recover", json={"since": since}, headers=ws.headers
    )
    assert await recovered.json() == {"queued": 1}
    waiting = await settled(client, ws, hook["id"], "waiting")
    assert waiting["status"] == "delivered"
    bodies = [r.body for r in receiver.requests]
    assert len(bodies) == 2
    assert sum(b"sent" in b for b in bodies) == 1


async def test_deleted_during_a_successful_attempt_is_delivered(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/hook"] = receiver.hang
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws, "sent")
    await make_engine()
    await in_flight(receiver)
    gone = await client.delete(f"/v1/webhooks/{hook['id']}", headers=ws.headers)
    assert gone.status == 204
    receiver.release.set()
    sent = await settled(client, ws, hook["id"], "sent")
    assert (sent["status"], sent["attempts"], sent["responseStatus"]) == ("delivered", 1, 200)


async def test_disabled_during_a_failed_attempt_records_it_and_gives_up(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    release = asyncio.Event()

    async def hang_then_fail(request: web.Request) -> web.StreamResponse:
        await asyncio.wait_for(release.wait(), timeout=30)
        return web.Response(status=500)

    receiver.behaviours["/hook"] = hang_then_fail
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws, "failed")
    await make_engine()
    await in_flight(receiver)
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": False}, headers=ws.headers)
    release.set()
    failed = await settled(client, ws, hook["id"], "failed")
    assert failed["status"] == "failed"
    assert failed["attempts"] == 1
    assert failed["responseStatus"] == 500
    assert failed["lastError"] == "HTTP 500 (webhook disabled)"
    assert failed["nextAttemptAt"] is None
    # It failed: after enable, recover sends it again (and only it).
    receiver.behaviours["/hook"] = answer(200)
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": True}, headers=ws.headers)
    since = isoformat(clock.now() - timedelta(minutes=5))
    recovered = await client.post(
        f"/v1/webhooks/{hook['id']}/recover", json={"since": since}, headers=ws.headers
    )
    assert await recovered.json() == {"queued": 1}
    again = await settled(client, ws, hook["id"], "failed", attempts=2)
    assert again["status"] == "delivered"
    assert len(receiver.requests) == 2


async def test_retry_of_a_delivery_in_flight_is_a_conflict_and_sends_nothing(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws, "x")
    await make_engine(retry_schedule=())  # one attempt, then given up
    first = await settled(client, ws, hook["id"], "x")
    assert first["status"] == "failed"
    receiver.behaviours["/hook"] = receiver.hang
    retry_url = f"/v1/webhooks/{hook['id']}/deliveries/{first['id']}/retry"
    assert (await client.post(retry_url, headers=ws.headers)).status == 202
    await in_flight(receiver)
    answers = await asyncio.gather(*(client.post(retry_url, headers=ws.headers) for _ in range(50)))
    assert {a.status for a in answers} == {409}
    body = await answers[0].json()
    assert body["code"] == "conflict"
    assert "being attempted" in body["message"]
    receiver.release.set()
    done = await settled(client, ws, hook["id"], "x", attempts=2)
    assert done["status"] == "delivered"
    assert done["attempts"] == 2
    assert len(receiver.requests) == 2
    assert receiver.peak["/hook"] == 1


async def test_a_lease_that_ran_out_on_a_disabled_webhook_is_given_up_not_sent(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    """An engine died with the attempt in flight, and the webhook was disabled meanwhile."""
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws, "orphan")
    async with db.acquire() as conn:  # leased by an engine that no longer beats
        await conn.execute(
            "UPDATE delivery_queue SET lease_owner = 'engine-dead', due_at = 'infinity'"
        )
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": False}, headers=ws.headers)
    assert (await by_event(client, ws, hook["id"]))["orphan"]["status"] == "pending"
    await make_engine()
    orphan = await settled(client, ws, hook["id"], "orphan", attempts=0)
    assert orphan["status"] == "failed"
    assert orphan["lastError"] == "webhook disabled"
    assert orphan["nextAttemptAt"] is None
    assert receiver.requests == []


async def test_leases_of_a_claim_whose_answer_was_lost_are_handed_back(
    client: TestClient[Any, Any],
    db: Database,
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim that commits while its connection is cut leases rows to an engine that never
    hears of them: it beats on, so no other engine takes them back. It hands them back
    itself (after a failed claim, and at an interval): each is then sent, once, and the
    endpoint's slots are free again."""
    hook = await subscribe(client, ws, receiver.url(), maxConcurrency=2)
    for name in ("lost-1", "lost-2", "after"):
        await publish(client, ws, name)
    engine = await make_engine(start=False)
    # The lost claim: committed under the engine's name, its answer dropped.
    lost = await queue.claim(
        db, owner=engine.owner, now=clock.now(), limit=10, default_concurrency=10
    )
    assert len(lost.rows) == 2  # the endpoint's every slot
    monkeypatch.setattr(worker, "RECONCILE_SECONDS", 0.05)  # read at each reconciliation
    await engine.start()
    rows = {name: await settled(client, ws, hook["id"], name) for name in ("lost-1", "lost-2")}
    rows["after"] = await settled(client, ws, hook["id"], "after")
    assert {name: row["status"] for name, row in rows.items()} == dict.fromkeys(
        ("lost-1", "lost-2", "after"), "delivered"
    )
    assert sorted(r.headers["webhook-id"] for r in receiver.requests) == sorted(
        row["id"] for row in rows.values()
    )


async def test_reconciling_leaves_the_leases_of_attempts_in_flight_alone(
    client: TestClient[Any, Any],
    db: Database,
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Handing back what the engine does not hold never takes an attempt from under it: a
    hanging request keeps its lease through many reconciliations, and is sent once."""
    receiver.behaviours["/hook"] = receiver.hang
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws, "hanging")
    monkeypatch.setattr(worker, "RECONCILE_SECONDS", 0.01)  # read at each reconciliation
    engine = await make_engine()
    await in_flight(receiver)
    for _ in range(5):  # reconciliations meanwhile: each claim loop turn after 10 ms
        engine.poke()
        await wait_for(lambda: engine.reconciliations > 0, message="a reconciliation")
        engine.reconciliations = 0
    async with db.acquire() as conn:
        owner = await conn.fetchval("SELECT lease_owner FROM delivery_queue")
    assert owner == engine.owner
    receiver.release.set()
    rows = await settled(client, ws, hook["id"], "hanging")
    assert rows["status"] == "delivered"
    assert len(receiver.requests) == 1
