"""POST /v1/events/batch: 1 to 100 events, all or nothing, in one transaction; each event may
carry its own idempotencyKey, replayed as POST /v1/events replays the header's."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import orjson
from aiohttp.test_utils import TestClient
from standardwebhooks.webhooks import Webhook

from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace, wait_for
from tests.engine.helpers import subscribe
from tests.receiver import EngineFactory, Receiver

BATCH = "/v1/events/batch"


def event(n: int, **fields: Any) -> dict[str, Any]:
    return {"type": "contact.updated", "data": {"id": f"CT{n}", "n": n}, **fields}


async def post_batch(client: TestClient[Any, Any], ws: Workspace, events: list[Any]) -> Any:
    return await client.post(BATCH, json={"events": events}, headers=ws.headers)


async def listed(client: TestClient[Any, Any], ws: Workspace) -> list[dict[str, Any]]:
    resp = await client.get("/v1/events?limit=100", headers=ws.headers)
    assert resp.status == 200
    data: list[dict[str, Any]] = (await resp.json())["data"]
    return data


async def counts(db: Database) -> tuple[int, int]:
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM events) e, (SELECT count(*) FROM deliveries) d"
        )
    assert row is not None
    return row["e"], row["d"]


async def test_a_batch_answers_each_envelope_in_request_order(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    sent = [event(n) for n in range(100)]
    sent[7] = {**event(7), "numberId": ws.number_id, "orderingKey": "lane-7"}
    resp = await post_batch(client, ws, sent)
    assert resp.status == 202, await resp.text()
    assert "Idempotent-Replayed" not in resp.headers
    answered = (await resp.json())["data"]
    assert [e["data"] for e in answered] == [e["data"] for e in sent]
    for envelope in answered:
        # The envelope POST /v1/events answers, and nothing else.
        assert list(envelope) == ["id", "type", "apiVersion", "createdAt", "data"]
        assert envelope["id"].startswith("EV") and envelope["type"] == "contact.updated"
    assert len({e["id"] for e in answered}) == 100
    # Each is in the stream as answered.
    stream = {e["id"]: e for e in await listed(client, ws)}
    assert set(stream) == {e["id"] for e in answered}
    one = await client.get(f"/v1/events/{answered[7]['id']}", headers=ws.headers)
    shown = await one.json()
    assert {k: shown[k] for k in answered[7]} == answered[7]
    assert shown["orderingKey"] == "lane-7"


async def test_subscribers_get_signed_deliveries_of_every_event(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    other = await subscribe(client, ws, receiver.url("/deleted"), events=["contact.deleted"])
    sent = [event(1), {"type": "contact.deleted", "data": {"id": "CT2"}}, event(3)]
    resp = await post_batch(client, ws, sent)
    assert resp.status == 202, await resp.text()
    answered = (await resp.json())["data"]
    await make_engine()
    await wait_for(lambda: len(receiver.requests) == 3, message="three deliveries")
    by_path = {
        path: [orjson.loads(Webhook(secret).verify(r.body, r.headers) and r.body) for r in got]
        for path, secret, got in (
            ("/hook", hook["secret"], receiver.at("/hook")),
            ("/deleted", other["secret"], receiver.at("/deleted")),
        )
    }
    # Each subscription got exactly the events it hears, byte for byte their envelopes.
    assert sorted(by_path["/hook"], key=lambda e: e["data"]["id"]) == [answered[0], answered[2]]
    assert by_path["/deleted"] == [answered[1]]


async def test_one_invalid_event_refuses_the_batch_and_stores_nothing(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    await subscribe(client, ws, "https://hooks.example.com/")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"type": "contact.nope", "data": {"id": "CT3"}}, "body.events[3].type"),
        ({"type": "webhook.disabled", "data": {"id": "CT3"}}, "body.events[3].type"),
        ({"type": "contact.updated", "data": {}}, "body.events[3].data"),
        ({"type": "contact.updated", "data": {"id": "CT3"}, "extra": 1}, "body.events[3].extra"),
        (
            {"type": "contact.updated", "data": {"id": "CT3"}, "orderingKey": ""},
            "body.events[3].orderingKey",
        ),
        (
            {"type": "contact.updated", "data": {"id": "CT3"}, "idempotencyKey": "a b"},
            "body.events[3].idempotencyKey",
        ),
        (
            {"type": "contact.updated", "data": {"id": "CT3"}, "numberId": "PN" + "0" * 32},
            "body.events[3].numberId",
        ),
    ]
    for bad, path in cases:
        sent: list[Any] = [event(0), event(1), event(2), bad, event(4)]
        resp = await post_batch(client, ws, sent)
        assert resp.status == 400, (bad, await resp.text())
        error = await resp.json()
        assert error["code"] == "validation_error"
        assert [e["path"] for e in error["errors"]] == [path], error
    assert await listed(client, ws) == []
    assert await counts(db) == (0, 0)


async def test_another_workspaces_number_is_refused_as_post_events_refuses_it(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace
) -> None:
    other = await make_workspace()
    single = await client.post(
        "/v1/events", json=event(1, numberId=other.number_id), headers=ws.headers
    )
    resp = await post_batch(client, ws, [event(0), event(1, numberId=other.number_id)])
    assert single.status == resp.status == 400
    (expected,) = (await single.json())["errors"]
    (error,) = (await resp.json())["errors"]
    assert error == {**expected, "path": "body.events[1].numberId"}
    assert await listed(client, ws) == []


async def test_zero_or_more_than_100_events_are_refused(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    for sent in ([], [event(n) for n in range(101)]):
        resp = await post_batch(client, ws, sent)
        assert resp.status == 400, await resp.text()
        assert [e["path"] for e in (await resp.json())["errors"]] == ["body.events"]
    for body in ({}, {"events": {"type": "contact.updated"}}, {"events": [], "x": 1}):
        resp = await client.post(BATCH, json=body, headers=ws.headers)
        assert resp.status == 400, await resp.text()
    assert await counts(db) == (0, 0)


async def test_a_key_without_events_write_is_refused(
    client: TestClient[Any, Any], make_workspace: MakeWorkspace, db: Database
) -> None:
    reader = await make_workspace(scopes=["events:read", "webhooks:read"])
    resp = await post_batch(client, reader, [event(1)])
    assert resp.status == 403
    assert (await resp.json())["code"] == "forbidden"
    anonymous = await client.post(BATCH, json={"events": [event(1)]})
    assert anonymous.status == 401
    assert await counts(db) == (0, 0)


async def test_the_body_limit_applies(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """The 1 MiB every body has: a batch just under it is taken whole, one over it is 413."""
    near = [event(n) for n in range(100)]
    for sent in near:
        sent["data"]["blob"] = "x" * 10_400
    body = orjson.dumps({"events": near})
    assert 1024 * 1024 - 5_000 < len(body) < 1024 * 1024
    headers = {**ws.headers, "Content-Type": "application/json"}
    taken = await client.post(BATCH, data=io.BytesIO(body), headers=headers)
    assert taken.status == 202, await taken.text()
    near[0]["data"]["blob"] += "x" * 10_000
    over = await client.post(
        BATCH, data=io.BytesIO(orjson.dumps({"events": near})), headers=headers
    )
    assert over.status == 413
    assert (await over.json())["code"] == "payload_too_large"
    assert await counts(db) == (100, 0)


async def test_per_event_keys_replay_like_the_header(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    await subscribe(client, ws, "https://hooks.example.com/")
    sent = [event(0, idempotencyKey="k0"), event(1), event(2, idempotencyKey="k2")]
    first = await post_batch(client, ws, sent)
    assert first.status == 202
    ids = [e["id"] for e in (await first.json())["data"]]
    assert await counts(db) == (3, 3)
    # The same batch again: the keyed events replay, the one without a key is new.
    again = await post_batch(client, ws, sent)
    assert again.status == 202
    assert "Idempotent-Replayed" not in again.headers
    replayed = [e["id"] for e in (await again.json())["data"]]
    assert replayed[0] == ids[0] and replayed[2] == ids[2] and replayed[1] != ids[1]
    assert await counts(db) == (4, 4)
    # Only keyed events, all replayed: the batch says so; key order does not matter.
    only_keyed = [
        {"idempotencyKey": "k2", "data": {"n": 2, "id": "CT2"}, "type": "contact.updated"},
        event(0, idempotencyKey="k0"),
    ]
    replay = await post_batch(client, ws, only_keyed)
    assert replay.status == 202
    assert replay.headers.get("Idempotent-Replayed") == "true"
    assert [e["id"] for e in (await replay.json())["data"]] == [ids[2], ids[0]]
    assert await counts(db) == (4, 4)


async def test_a_key_reused_with_another_event_refuses_the_batch(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    first = await post_batch(client, ws, [event(0, idempotencyKey="k0")])
    assert first.status == 202
    sent = [event(5), event(6), event(9, idempotencyKey="k0")]
    resp = await post_batch(client, ws, sent)
    assert resp.status == 422, await resp.text()
    error = await resp.json()
    assert error["code"] == "idempotency_key_reused"
    assert [e["path"] for e in error["errors"]] == ["body.events[2].idempotencyKey"]
    assert await counts(db) == (1, 0)


async def test_a_key_repeated_within_the_batch_names_the_second(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    sent = [event(0, idempotencyKey="k"), event(1), event(0, idempotencyKey="k")]
    resp = await post_batch(client, ws, sent)
    assert resp.status == 400
    (error,) = (await resp.json())["errors"]
    assert error["path"] == "body.events[2].idempotencyKey"
    assert "body.events[0]" in error["message"]
    assert await counts(db) == (0, 0)


async def test_a_key_is_shared_with_post_events(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """The event's object is the request POST /v1/events fingerprints: either door replays
    what the other published under the key, and refuses another event."""
    single = await client.post(
        "/v1/events", json=event(1), headers={**ws.headers, "Idempotency-Key": "shared"}
    )
    assert single.status == 202
    resp = await post_batch(client, ws, [event(1, idempotencyKey="shared")])
    assert resp.status == 202
    assert (await resp.json())["data"] == [await single.json()]
    other = await post_batch(client, ws, [event(2, idempotencyKey="shared")])
    assert other.status == 422
    await post_batch(client, ws, [event(3, idempotencyKey="from-batch")])
    back = await client.post(
        "/v1/events", json=event(3), headers={**ws.headers, "Idempotency-Key": "from-batch"}
    )
    assert back.status == 202 and back.headers.get("Idempotent-Replayed") == "true"
    assert await counts(db) == (2, 0)


async def test_racing_batches_under_shared_keys_create_each_event_once(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """Batches naming the same keys in opposite orders, at once: no deadlock, one event per
    key, and every answer names the same events."""
    forward = [event(n, idempotencyKey=f"k{n}") for n in range(20)]
    answers = await asyncio.gather(
        *(post_batch(client, ws, forward if i % 2 else forward[::-1]) for i in range(8))
    )
    assert [a.status for a in answers] == [202] * 8
    seen = [{e["data"]["id"]: e["id"] for e in (await a.json())["data"]} for a in answers]
    assert all(ids == seen[0] for ids in seen)
    assert await counts(db) == (20, 0)


async def test_the_document_lists_the_route(client: TestClient[Any, Any]) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    operation = doc["paths"]["/v1/events/batch"]["post"]
    assert "202" in operation["responses"] and "422" in operation["responses"]
    assert "requestBody" in operation


async def test_events_of_one_ordering_key_join_a_fifo_lane_in_request_order(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    await subscribe(client, ws, "https://hooks.example.com/", ordering="fifo")
    sent = [event(n, orderingKey="lane") for n in range(30)]
    resp = await post_batch(client, ws, sent)
    assert resp.status == 202
    answered = [e["id"] for e in (await resp.json())["data"]]
    async with db.acquire() as conn:
        queued = await conn.fetch(
            "SELECT event_id FROM delivery_queue WHERE lane = 'lane' ORDER BY lane_seq"
        )
    assert [row["event_id"] for row in queued] == answered
