"""Idempotency-Key: only the identical request replays; another request under a used key is
422 `idempotency_key_reused` and creates nothing (the IETF Idempotency-Key draft's choice)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict

from dispatcher.api.framework.idempotency import request_fingerprint
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace

FIRST = b'{"type": "contact.updated", "data": {"id": "CT1", "tags": ["a", "b"], "n": 1}}'


async def post(client: TestClient[Any, Any], ws: Workspace, raw: bytes, key: str) -> Any:
    headers = {**ws.headers, "Content-Type": "application/json", "Idempotency-Key": key}
    return await client.post("/v1/events", data=raw, headers=headers)


async def counts(db: Database) -> tuple[int, int]:
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM events) e, (SELECT count(*) FROM deliveries) d"
        )
    assert row is not None
    return row["e"], row["d"]


async def subscribe(client: TestClient[Any, Any], ws: Workspace) -> None:
    resp = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/", "events": ["contact.updated"]},
        headers=ws.headers,
    )
    assert resp.status == 201


# The first request written otherwise: key order, white space and escapes do not matter.
SAME = [
    FIRST,
    b'{"data":{"n":1,"tags":["a","b"],"id":"CT1"},"type":"contact.updated"}',
    b'\n{ "type" :\t"contact.updated",\r\n "data" : { "id" : "CT1" , "n" : 1 ,'
    b' "tags" : [ "a" , "b" ] } }\n',
    b'{"type": "contact.updated", "data": {"id": "\\u0043T1", "tags": ["\\u0061", "b"], "n": 1}}',
]


@pytest.mark.parametrize(
    "other",
    [
        # List order matters.
        b'{"type": "contact.updated", "data": {"id": "CT1", "tags": ["b", "a"], "n": 1}}',
        # Every value matters.
        b'{"type": "contact.updated", "data": {"id": "CT2", "tags": ["a", "b"], "n": 1}}',
        b'{"type": "contact.updated", "data": {"id": "CT1", "tags": ["a", "b"], "n": 2}}',
        b'{"type": "contact.updated", "data": {"id": "CT1", "tags": ["a", "b"], "n": "1"}}',
        b'{"type": "contact.deleted", "data": {"id": "CT1", "tags": ["a", "b"], "n": 1}}',
        # A field added or removed, even one that is null.
        b'{"type": "contact.updated", "data": {"id": "CT1", "tags": ["a", "b"], "n": 1, "x": 0}}',
        b'{"type": "contact.updated", "data": {"id": "CT1", "tags": ["a", "b"]}}',
        b'{"type": "contact.updated", "numberId": null,'
        b' "data": {"id": "CT1", "tags": ["a", "b"], "n": 1}}',
    ],
)
async def test_only_the_identical_request_replays(
    client: TestClient[Any, Any], ws: Workspace, db: Database, other: bytes
) -> None:
    await subscribe(client, ws)
    first = await post(client, ws, FIRST, "key-1")
    assert first.status == 202
    assert await counts(db) == (1, 1)
    refused = await post(client, ws, other, "key-1")
    assert refused.status == 422, await refused.text()
    error = await refused.json()
    assert error["code"] == "idempotency_key_reused"
    assert error["status"] == 422 and error["title"] and error["message"]
    assert error["trace"] == refused.headers["X-Request-Id"]
    assert "Idempotent-Replayed" not in refused.headers
    assert await counts(db) == (1, 1)
    # The key still belongs to the first request, which replays however it is written.
    for same in SAME:
        again = await post(client, ws, same, "key-1")
        assert again.status == 202, (same, await again.text())
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert await again.json() == await first.json()
    assert await counts(db) == (1, 1)


async def test_racing_requests_under_one_key(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """Ten different bodies at once under one key: one event, nine refusals; ten identical
    bodies at once under another key: one event, nine replays of it."""
    await subscribe(client, ws)
    bodies = [b'{"type": "contact.updated", "data": {"id": "CT%d"}}' % i for i in range(10)]
    answers = await asyncio.gather(*(post(client, ws, b, "race-a") for b in bodies))
    assert sorted(a.status for a in answers) == [202] + [422] * 9
    assert await counts(db) == (1, 1)
    same = await asyncio.gather(*(post(client, ws, bodies[0], "race-b") for _ in range(10)))
    assert [a.status for a in same] == [202] * 10
    ids = {(await a.json())["id"] for a in same}
    assert len(ids) == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in same) == 9
    assert await counts(db) == (2, 2)


async def test_an_event_stored_before_fingerprints_replays_as_before(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """Rows written by schema version 1 carry no fingerprint: any body under their key
    replays them, as it did then."""
    first = await post(client, ws, FIRST, "old-key")
    async with db.acquire() as conn:
        await conn.execute("UPDATE events SET request_fingerprint = NULL")
    other = b'{"type": "contact.updated", "data": {"id": "CT9"}}'
    again = await post(client, ws, other, "old-key")
    assert again.status == 202
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert (await again.json())["id"] == (await first.json())["id"]


async def test_the_key_must_be_visible_ascii(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    for key in ("with space", "tab\there", "ключ", "caf\u00e9", "k" * 256):
        resp = await post(client, ws, FIRST, key)
        assert resp.status == 400, (key, await resp.text())
        error = await resp.json()
        assert error["code"] == "validation_error"
        assert [e["path"] for e in error["errors"]] == ["header.Idempotency-Key"]
    assert await counts(db) == (0, 0)
    for key in ("k", "!~\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}", "K" * 255):
        resp = await post(client, ws, FIRST, key)
        assert resp.status == 202, (key, await resp.text())


async def test_a_repeated_key_header_is_refused(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    for values in (("a", "b"), ("a", "a")):
        headers: CIMultiDict[str] = CIMultiDict(ws.headers)
        headers["Content-Type"] = "application/json"
        for value in values:
            headers.add("Idempotency-Key", value)
        resp = await client.post("/v1/events", data=FIRST, headers=headers)
        assert resp.status == 400, await resp.text()
        error = await resp.json()
        assert [e["path"] for e in error["errors"]] == ["header.Idempotency-Key"]
    assert await counts(db) == (0, 0)


# -- POST /v1/messages: the same rules, so that a retried send never sends the text twice ------


async def send(
    client: TestClient[Any, Any], ws: Workspace, key: str | None, text: str = "hello"
) -> Any:
    headers = {**ws.headers} if key is None else {**ws.headers, "Idempotency-Key": key}
    body = {"from": ws.number, "to": "+15555550123", "text": text}
    return await client.post("/v1/messages", json=body, headers=headers)


async def messages_stored(db: Database) -> int:
    async with db.acquire() as conn:
        count: int = await conn.fetchval("SELECT count(*) FROM messages")
    return count


async def test_a_retried_send_answers_the_first_message(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    first = await send(client, ws, "send-1")
    assert first.status == 202
    assert "Idempotent-Replayed" not in first.headers
    again = await send(client, ws, "send-1")
    assert again.status == 202
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert await again.json() == await first.json()
    assert await messages_stored(db) == 1
    # The same request written otherwise is the same request.
    raw = b'{"text":"hello","to":"+15555550123",  "from":"%s"}' % ws.number.encode()
    headers = {**ws.headers, "Idempotency-Key": "send-1", "Content-Type": "application/json"}
    written = await client.post("/v1/messages", data=raw, headers=headers)
    assert written.status == 202 and written.headers.get("Idempotent-Replayed") == "true"
    # Without a key, every send is a new message.
    assert (await send(client, ws, None)).status == 202
    assert (await send(client, ws, None)).status == 202
    assert await messages_stored(db) == 3


async def test_another_send_under_a_used_key_is_refused(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    first = await send(client, ws, "send-2")
    refused = await send(client, ws, "send-2", text="another text")
    assert refused.status == 422, await refused.text()
    error = await refused.json()
    assert error["code"] == "idempotency_key_reused"
    assert "Idempotent-Replayed" not in refused.headers
    assert await messages_stored(db) == 1
    # The key still replays the first send.
    again = await send(client, ws, "send-2")
    assert (await again.json())["id"] == (await first.json())["id"]


async def test_racing_sends_under_one_key_send_once(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    same = await asyncio.gather(*(send(client, ws, "race-m") for _ in range(10)))
    assert [a.status for a in same] == [202] * 10
    assert len({(await a.json())["id"] for a in same}) == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in same) == 9
    assert await messages_stored(db) == 1
    other = await asyncio.gather(*(send(client, ws, "race-n", text=f"t{i}") for i in range(10)))
    assert sorted(a.status for a in other) == [202] + [422] * 9
    assert await messages_stored(db) == 2


async def test_a_send_key_is_free_again_after_24_hours(
    client: TestClient[Any, Any], ws: Workspace, db: Database, clock: FakeClock
) -> None:
    first = await send(client, ws, "send-3")
    clock.advance(24 * 3600 + 1)
    later = await send(client, ws, "send-3", text="a new text")
    assert later.status == 202
    assert "Idempotent-Replayed" not in later.headers
    assert (await later.json())["id"] != (await first.json())["id"]
    assert await messages_stored(db) == 2


async def test_a_send_key_must_be_visible_ascii_and_sent_once(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    for key in ("with space", "ключ", "k" * 256):
        resp = await send(client, ws, key)
        assert resp.status == 400, key
        assert [e["path"] for e in (await resp.json())["errors"]] == ["header.Idempotency-Key"]
    headers: CIMultiDict[str] = CIMultiDict(ws.headers)
    headers.add("Idempotency-Key", "a")
    headers.add("Idempotency-Key", "a")
    body = {"from": ws.number, "to": "+15555550123", "text": "hello"}
    resp = await client.post("/v1/messages", json=body, headers=headers)
    assert resp.status == 400
    assert await messages_stored(db) == 0


# -- Keyed fingerprints: a stored fingerprint confirms no guess without the deployment's key --


async def stored_fingerprints(db: Database) -> list[bytes]:
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "SELECT request_fingerprint AS f FROM events WHERE request_fingerprint IS NOT NULL"
            " UNION ALL"
            " SELECT request_fingerprint FROM messages WHERE request_fingerprint IS NOT NULL"
        )
    return [bytes(row["f"]) for row in rows]


async def test_fingerprints_are_keyed_by_the_deployment(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """What is stored is no plain hash of the request (which a guess of its content, such as
    a phone number, would match offline), for every door that takes a key; the identical
    request still replays, whichever door published it first."""
    assert (await post(client, ws, FIRST, "keyed-1")).status == 202
    batch = {"events": [{**orjson.loads(FIRST), "idempotencyKey": "keyed-2"}]}
    resp = await client.post("/v1/events/batch", json=batch, headers=ws.headers)
    assert resp.status == 202, await resp.text()
    assert (await send(client, ws, "keyed-3")).status == 202
    plain = {
        hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()
        for body in (
            orjson.loads(FIRST),
            {"from": ws.number, "to": "+15555550123", "text": "hello"},
        )
    }
    stored = await stored_fingerprints(db)
    assert len(stored) == 3
    assert not plain & set(stored), "a fingerprint is the body's plain SHA-256"
    again = await post(client, ws, FIRST, "keyed-2")
    assert again.headers.get("Idempotent-Replayed") == "true"


def test_another_deployment_keys_its_fingerprints_otherwise() -> None:
    body = {"type": "contact.updated", "data": {"phone": "+15555550199"}}
    one, other = b"\x01" * 32, b"\x02" * 32
    assert request_fingerprint(one, body) == request_fingerprint(one, dict(reversed(body.items())))
    assert request_fingerprint(one, body) != request_fingerprint(other, body)
