"""Removing content: an event's (its data, its deliveries' response excerpts, its sends to
come) and a message's text (from it and from the events that carried it), with real receivers
and a real engine; refused retries, skipping recovers, scopes, workspaces, bad input."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.api.framework.context import SCOPES
from dispatcher.carrier import SandboxCarrier
from dispatcher.domain.clock import isoformat
from dispatcher.domain.enums import Scope
from dispatcher.engine.worker import Engine
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import MakeWorkspace, Workspace, wait_for
from tests.engine.helpers import deliveries, get_json, subscribe
from tests.receiver import EngineFactory, Receiver, answer

SECRET = "Ada Lovelace, +15555550199"


async def publish(client: TestClient[Any, Any], ws: Workspace, data_id: str, name: str) -> Any:
    resp = await client.post(
        "/v1/events",
        json={"type": "contact.updated", "data": {"id": data_id, "name": name}},
        headers=ws.headers,
    )
    assert resp.status == 202, await resp.text()
    return await resp.json()


async def expunge(client: TestClient[Any, Any], ws: Workspace, path: str) -> Any:
    resp = await client.post(f"{path}/expunge", headers=ws.headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def by_event(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> dict[str, Any]:
    """A webhook's deliveries by their event's id (which their payload keeps when expunged)."""
    return {d["payload"]["id"]: d for d in await deliveries(client, ws, hook_id)}


async def attempts_of(client: TestClient[Any, Any], ws: Workspace, delivery: Any) -> list[Any]:
    page = await get_json(
        client, ws, f"/v1/webhooks/{delivery['webhookId']}/deliveries/{delivery['id']}/attempts"
    )
    found: list[Any] = page["data"]
    return found


async def until(
    client: TestClient[Any, Any],
    ws: Workspace,
    hook_id: str,
    event_id: str,
    engine: Engine,
    *,
    status: str,
    attempts: int,
) -> Any:
    """The webhook's delivery of the event once it has `attempts` and `status`."""
    seen: dict[str, Any] = {}

    async def reached() -> bool:
        engine.poke()
        seen.update((await by_event(client, ws, hook_id))[event_id])
        return bool(seen["attempts"] >= attempts and seen["status"] == status)

    await wait_for(reached, message=f"{event_id} {status} after {attempts} attempt(s)")
    return seen


async def test_expunge_erases_the_event_and_gives_up_what_is_still_to_send(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
    db: Database,
) -> None:
    """Three endpoints, two events each: one takes them (delivered), one fails them until its
    retries run out (failed), one keeps asking to come back in an hour (pending). Expunging
    one event erases it everywhere; the other event goes on as before."""
    receiver.behaviours["/ok"] = answer(200, body=b"thanks, " + SECRET.encode())
    receiver.behaviours["/fail"] = answer(500, body=b"no thanks, " + SECRET.encode())
    receiver.behaviours["/later"] = answer(503, {"Retry-After": "3600"}, SECRET.encode())
    hooks = {path: (await subscribe(client, ws, receiver.url(f"/{path}")))["id"] for path in
             ("ok", "fail", "later")}  # fmt: skip
    kept = await publish(client, ws, "CT0", "kept")
    gone = await publish(client, ws, "CT1", SECRET)
    # Three attempts: after one second, then after an hour (Retry-After asks for the hour).
    engine = await make_engine(retry_schedule=(1.0, 3600.0), disable_after=10**8)
    for event in (kept, gone):
        await until(client, ws, hooks["ok"], event["id"], engine, status="delivered", attempts=1)
        await until(client, ws, hooks["later"], event["id"], engine, status="pending", attempts=1)
        await until(client, ws, hooks["fail"], event["id"], engine, status="pending", attempts=1)
    clock.advance(2)
    for event in (kept, gone):
        await until(client, ws, hooks["fail"], event["id"], engine, status="pending", attempts=2)
    clock.advance(3600)  # the failing endpoint's last attempt; the other asks for an hour more
    for event in (kept, gone):
        await until(client, ws, hooks["fail"], event["id"], engine, status="failed", attempts=3)
        await until(client, ws, hooks["later"], event["id"], engine, status="pending", attempts=2)
    sent_before = len(receiver.requests)

    erased = await expunge(client, ws, f"/v1/events/{gone['id']}")
    assert erased["id"] == gone["id"] and erased["type"] == gone["type"]
    assert erased["createdAt"] == gone["createdAt"]
    assert erased["data"] is None and erased["expunged"] is True
    assert erased["deliveryCount"] == 3
    statuses = {d["webhookId"]: (d["status"], d["attempts"]) for d in erased["deliveries"]}
    assert statuses == {
        hooks["ok"]: ("delivered", 1),
        hooks["fail"]: ("failed", 3),
        hooks["later"]: ("failed", 2),
    }
    # As GET shows it; and again, the same (nothing changes the second time).
    assert await get_json(client, ws, f"/v1/events/{gone['id']}") == erased
    assert await expunge(client, ws, f"/v1/events/{gone['id']}") == erased
    # (The failing endpoint's exhausted deliveries are in the stream too: delivery.exhausted.)
    listed = (await get_json(client, ws, "/v1/events?type=contact.updated"))["data"]
    assert [(e["id"], e["data"], e["expunged"]) for e in listed] == [
        (gone["id"], None, True),
        (kept["id"], kept["data"], False),
    ]

    for path, hook_id in hooks.items():
        rows = await by_event(client, ws, hook_id)
        erased_delivery, kept_delivery = rows[gone["id"]], rows[kept["id"]]
        assert erased_delivery["payload"] == {**gone, "data": None}, path
        assert erased_delivery["expunged"] is True
        assert kept_delivery["payload"] == kept and kept_delivery["expunged"] is False
        # Every excerpt of the expunged event's attempts is gone; the other event's stay.
        assert {a["responseBody"] for a in await attempts_of(client, ws, erased_delivery)} == {
            None
        }, path
        assert all(
            SECRET in a["responseBody"] for a in await attempts_of(client, ws, kept_delivery)
        )
    given_up = (await by_event(client, ws, hooks["later"]))[gone["id"]]
    assert given_up["lastError"] == "expunged" and given_up["nextAttemptAt"] is None
    async with db.acquire() as conn:
        stored = await conn.fetchval("SELECT payload FROM events WHERE id = $1", gone["id"])
        assert SECRET not in stored and '"data":null' in stored
        assert not await conn.fetchval(
            "SELECT count(*) FROM delivery_queue WHERE event_id = $1", gone["id"]
        )

    # Nothing of it can be sent again: a retry is refused, a recover skips it.
    for hook_id in hooks.values():
        delivery = (await by_event(client, ws, hook_id))[gone["id"]]
        resp = await client.post(
            f"/v1/webhooks/{hook_id}/deliveries/{delivery['id']}/retry", headers=ws.headers
        )
        assert resp.status == 409
        body = await resp.json()
        assert body["code"] == "conflict" and "expunged" in body["message"]
    for path in receiver.behaviours:
        receiver.behaviours[path] = answer(200)
    since = isoformat(clock.now() - timedelta(hours=2))
    recovered = await client.post(
        f"/v1/webhooks/{hooks['fail']}/recover", json={"since": since}, headers=ws.headers
    )
    assert await recovered.json() == {"queued": 1}  # the kept event only
    clock.advance(3600)  # past the hour the pending endpoint asked for
    # The kept event reaches both (due when the expunged one would have been, or earlier).
    await until(client, ws, hooks["fail"], kept["id"], engine, status="delivered", attempts=4)
    await until(client, ws, hooks["later"], kept["id"], engine, status="delivered", attempts=3)
    after = receiver.requests[sent_before:]
    assert sorted(r.path for r in after) == ["/fail", "/later"]
    assert all(kept["id"].encode() in r.body and SECRET.encode() not in r.body for r in after)
    # A delivered delivery of a kept event can still be sent again by hand.
    delivered = (await by_event(client, ws, hooks["ok"]))[kept["id"]]
    retry = f"/v1/webhooks/{hooks['ok']}/deliveries/{delivered['id']}/retry"
    assert (await client.post(retry, headers=ws.headers)).status == 202


async def test_who_may_expunge_what(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace, db: Database
) -> None:
    """`events:write` for events, `messages:write` for messages; another workspace's is not
    there; a body is refused; a test event is not part of the stream. Nothing changes."""
    event = await publish(client, ws, "CT1", SECRET)
    hook = await subscribe(client, ws, "https://hooks.example.com/")
    test = await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)
    test_event_id = (await test.json())["payload"]["id"]
    sent = await client.post(
        "/v1/messages", json={"from": ws.number, "to": "+15555550123", "text": SECRET},
        headers=ws.headers,
    )  # fmt: skip
    msg = await sent.json()
    event_path, message_path = f"/v1/events/{event['id']}", f"/v1/messages/{msg['id']}"
    no_events = await make_workspace(scopes=sorted(SCOPES - {Scope.EVENTS_WRITE}))
    no_messages = await make_workspace(scopes=sorted(SCOPES - {Scope.MESSAGES_WRITE}))
    other = await make_workspace()
    for path, refused in ((event_path, no_events), (message_path, no_messages)):
        assert (await client.post(f"{path}/expunge")).status == 401
        resp = await client.post(f"{path}/expunge", headers=refused.headers)
        assert resp.status == 403
        assert (await resp.json())["code"] == "forbidden"
        resp = await client.post(f"{path}/expunge", headers=other.headers)
        assert resp.status == 404
        assert (await resp.json())["code"] == "not_found"
        resp = await client.post(f"{path}/expunge", json={"reason": "gdpr"}, headers=ws.headers)
        assert resp.status == 400
        assert (await resp.json())["errors"][0]["path"] == "body.reason"
    for path in (
        f"/v1/events/EV{'0' * 32}",
        f"/v1/events/{test_event_id}",
        f"/v1/messages/MS{'0' * 32}",
        "/v1/events/not-an-id",
    ):
        resp = await client.post(f"{path}/expunge", headers=ws.headers)
        assert resp.status == 404, path
    # Nothing was erased.
    assert (await get_json(client, ws, event_path))["data"] == event["data"]
    assert (await get_json(client, ws, message_path))["text"] == SECRET
    async with db.acquire() as conn:
        assert not await conn.fetchval("SELECT count(*) FROM events WHERE expunged_at IS NOT NULL")
        assert not await conn.fetchval(
            "SELECT count(*) FROM messages WHERE expunged_at IS NOT NULL"
        )


async def test_expunging_a_message_erases_its_text_where_it_was_carried(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    db: Database,
    clock: FakeClock,
) -> None:
    """Its text goes from the message, its list, and the data of its events (whose deliveries
    not yet sent go without it); the rest of each event stays, and other messages keep theirs."""
    await subscribe(client, ws, receiver.url(), events=["message.received", "message.delivered"])
    inbound = await client.post(
        "/v1/inbound/messages",
        json={"from": "+15555550777", "to": ws.number, "text": "my address is 1 Main St"},
        headers=ws.headers,
    )
    received = await inbound.json()
    kept = await (
        await client.post(
            "/v1/inbound/messages",
            json={"from": "+15555550777", "to": ws.number, "text": "keep me"},
            headers=ws.headers,
        )
    ).json()
    outgoing = await (
        await client.post(
            "/v1/messages",
            json={"from": ws.number, "to": "+15555550123", "text": "call me on 555"},
            headers=ws.headers,
        )
    ).json()
    carrier = SandboxCarrier(db, clock, delay=0.0)
    assert await carrier.advance() == 1  # queued -> sent
    assert await carrier.advance() == 1  # sent -> delivered: message.delivered
    # Queued, not yet moved: its event will be made after the expunge.
    later = await (
        await client.post(
            "/v1/messages",
            json={"from": ws.number, "to": "+15555550124", "text": "not yet sent"},
            headers=ws.headers,
        )
    ).json()

    for msg in (received, outgoing, later):
        erased = await expunge(client, ws, f"/v1/messages/{msg['id']}")
        assert erased["text"] is None and erased["expunged"] is True
        assert {k: v for k, v in erased.items() if k not in ("text", "expunged", "status")} == {
            k: v for k, v in msg.items() if k not in ("text", "expunged", "status")
        }
        assert await get_json(client, ws, f"/v1/messages/{msg['id']}") == erased
        assert await expunge(client, ws, f"/v1/messages/{msg['id']}") == erased
    listed = {m["id"]: m for m in (await get_json(client, ws, "/v1/messages"))["data"]}
    assert {i: (m["text"], m["expunged"]) for i, m in listed.items()} == {
        received["id"]: (None, True),
        kept["id"]: ("keep me", False),
        outgoing["id"]: (None, True),
        later["id"]: (None, True),
    }
    assert await carrier.advance() == 1  # the expunged one is still carried along
    assert await carrier.advance() == 1

    events = (await get_json(client, ws, "/v1/events"))["data"]
    by_message = {(e["data"]["id"], e["type"]): e for e in events}
    assert len(by_message) == 4
    for message_id, event_type, status in (
        (received["id"], "message.received", "received"),
        (outgoing["id"], "message.delivered", "delivered"),
        (later["id"], "message.delivered", "delivered"),
    ):
        event = by_message[(message_id, event_type)]
        assert event["expunged"] is False  # the event stays; only the text is gone
        assert event["data"]["text"] is None and event["data"]["expunged"] is True
        assert event["data"]["status"] == status
        assert event["data"]["numberId"] == ws.number_id
    untouched = by_message[(kept["id"], "message.received")]["data"]
    assert (untouched["text"], untouched["expunged"]) == ("keep me", False)

    # The deliveries not yet sent go without the text.
    await make_engine()
    await wait_for(lambda: len(receiver.requests) == 4, message="the four events delivered")
    bodies = b"".join(r.body for r in receiver.requests)
    for text in (b"1 Main St", b"call me on 555", b"not yet sent"):
        assert text not in bodies
    assert b"keep me" in bodies


async def test_an_expunge_leaves_no_fingerprint_and_no_ordering_key(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """What an expunge erased cannot be confirmed through the idempotency replay: after it,
    any request under the event's (or the message's) key replays the erased answer (202), the
    true one as a wrong guess, and no fingerprint is left to brute-force. The ordering key
    goes too (it may be personal: a customer's id)."""
    guesses = ("+15555550199", "+15555550100")
    body = {"type": "contact.updated", "data": {"id": "CT1", "phone": guesses[0]},
            "orderingKey": "cu-7"}  # fmt: skip
    headers = {**ws.headers, "Idempotency-Key": "expunged-1"}
    resp = await client.post("/v1/events", json=body, headers=headers)
    assert resp.status == 202, await resp.text()
    event = await get_json(client, ws, f"/v1/events/{(await resp.json())['id']}")
    assert event["orderingKey"] == "cu-7"
    send_headers = {**ws.headers, "Idempotency-Key": "expunged-2"}
    msg_body = {"from": ws.number, "to": "+15555550199", "text": "your code is 1234"}
    msg = await (await client.post("/v1/messages", json=msg_body, headers=send_headers)).json()
    # Before the expunge, a wrong guess is told apart from the true request: 422.
    wrong = {**body, "data": {"id": "CT1", "phone": guesses[1]}}
    assert (await client.post("/v1/events", json=wrong, headers=headers)).status == 422

    erased = await expunge(client, ws, f"/v1/events/{event['id']}")
    assert erased["orderingKey"] is None
    assert (await get_json(client, ws, f"/v1/events/{event['id']}"))["orderingKey"] is None
    listed = (await get_json(client, ws, "/v1/events"))["data"]
    assert [e["orderingKey"] for e in listed if e["id"] == event["id"]] == [None]
    await expunge(client, ws, f"/v1/messages/{msg['id']}")
    async with db.acquire() as conn:
        left = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM events WHERE request_fingerprint IS NOT NULL"
            "        OR ordering_key IS NOT NULL) AS events,"
            " (SELECT count(*) FROM messages WHERE request_fingerprint IS NOT NULL) AS messages"
        )
    assert left is not None and (left["events"], left["messages"]) == (0, 0)

    for phone in guesses:
        guess = {**body, "data": {"id": "CT1", "phone": phone}}
        resp = await client.post("/v1/events", json=guess, headers=headers)
        assert resp.status == 202, phone
        assert resp.headers.get("Idempotent-Replayed") == "true"
        assert (await resp.json())["data"] is None
        text_guess = {**msg_body, "to": phone}
        resp = await client.post("/v1/messages", json=text_guess, headers=send_headers)
        assert resp.status == 202, phone
        assert (await resp.json())["text"] is None
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == 1
        assert await conn.fetchval("SELECT count(*) FROM messages") == 1
