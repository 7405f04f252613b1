"""Hostile field values in every door: URLs, phone numbers, blank text, inbound media.

Each class is tried with several members (the report's examples are not the only ones), and
every refusal must change nothing.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace

GOOD_URL = "https://hooks.example.com/ok"
CDN = "https://cdn.example.com/a.png"
TECHNICAL = re.compile(r"(?i)idna|codec|UnicodeError|Exception|yarl|aiohttp|Value error")

BAD_URLS = [
    "http://a..b/ok",
    "http://" + "a" * 64 + ".com/ok",
    "http://a.b./ok",
    "http://a_b.example.com/ok",
    "http://-a.example.com/ok",
    "http://example.com:/ok",
    "http://example.com:0/ok",
    "http://example.com:70000/ok",
    "http://2130706433/ok",
    "http://127.1/ok",
    "http://0x7f.0.0.1/ok",
    "http://example.com/ok\r\nX-Injected: 1",
    "http://example.com/ok\tX",
    "http://example.com/ok ",
    "http://example.com/\u200bok",
    "http://example.com\\@evil.example/ok",
    "http://xn--a/ok",
    "http://xn--a.example.com/ok",
    "http://hooks.xn--ls8h.la/ok",
]

BLANK_TEXTS = ["   ", "\u200b", "\t\n", "\u00a0\u3000", "\u200d\ufeff", "\u2028"]

BAD_NUMBERS = [
    "+15557770000\n",
    "+1\u0665\u0665\u0665\u0667\u0667\u0667\u0660\u0660\u0660\u0660",
    "+1\uff15\uff15\uff15\uff17\uff17\uff17\uff10\uff10\uff10\uff10",
    " +15557770000",
    "+15557770000 ",
]


async def error_of(resp: Any) -> dict[str, Any]:
    assert resp.status == 400, await resp.text()
    body: dict[str, Any] = await resp.json()
    assert body["code"] == "validation_error"
    return body


@pytest.mark.parametrize("url", BAD_URLS)
async def test_webhook_url_refused_on_create_and_patch(
    client: TestClient[Any, Any], ws: Workspace, url: str
) -> None:
    body = {"url": url, "events": ["contact.updated"]}
    error = await error_of(await client.post("/v1/webhooks", json=body, headers=ws.headers))
    assert [e["path"] for e in error["errors"]] == ["body.url"]
    assert not TECHNICAL.search(error["message"]), error["message"]
    listed = await (await client.get("/v1/webhooks", headers=ws.headers)).json()
    assert listed["data"] == []

    made = await client.post(
        "/v1/webhooks", json={"url": GOOD_URL, "events": ["contact.updated"]}, headers=ws.headers
    )
    hook = await made.json()
    patch = await client.patch(f"/v1/webhooks/{hook['id']}", json={"url": url}, headers=ws.headers)
    error = await error_of(patch)
    assert [e["path"] for e in error["errors"]] == ["body.url"]
    after = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert after["url"] == GOOD_URL


@pytest.mark.parametrize("url", ["http://bücher.example/ok", "http://[::1]:8080/x", GOOD_URL])
async def test_webhook_url_accepted_as_given(
    client: TestClient[Any, Any], ws: Workspace, url: str
) -> None:
    body = {"url": url, "events": ["contact.updated"]}
    resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["url"] == url


@pytest.mark.parametrize("number", BAD_NUMBERS)
async def test_phone_numbers_are_ascii_e164_in_every_door(
    client: TestClient[Any, Any], ws: Workspace, db: Database, number: str
) -> None:
    send = {"from": ws.number, "to": number, "text": "hi"}
    error = await error_of(await client.post("/v1/messages", json=send, headers=ws.headers))
    assert [e["path"] for e in error["errors"]] == ["body.to"]
    inbound = {"from": number, "to": ws.number, "text": "hi"}
    error = await error_of(
        await client.post("/v1/inbound/messages", json=inbound, headers=ws.headers)
    )
    assert [e["path"] for e in error["errors"]] == ["body.from"]
    call = {"from": number, "to": ws.number, "status": "ringing"}
    error = await error_of(await client.post("/v1/inbound/calls", json=call, headers=ws.headers))
    assert [e["path"] for e in error["errors"]] == ["body.from"]
    listing = await client.get("/v1/messages", params={"contact": number}, headers=ws.headers)
    error = await error_of(listing)
    assert [e["path"] for e in error["errors"]] == ["query.contact"]
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM conversations") == 0
        assert await conn.fetchval("SELECT count(*) FROM messages") == 0


async def test_one_contact_one_conversation(client: TestClient[Any, Any], ws: Workspace) -> None:
    """The report's symptom: a look-alike number opened a second conversation."""
    for number in ("+15557770000", *BAD_NUMBERS):
        body = {"from": number, "to": ws.number, "text": "hi"}
        await client.post("/v1/inbound/messages", json=body, headers=ws.headers)
    listed = await (await client.get("/v1/conversations", headers=ws.headers)).json()
    assert [c["contact"] for c in listed["data"]] == ["+15557770000"]


@pytest.mark.parametrize("text", BLANK_TEXTS)
async def test_blank_text_and_names_refused(
    client: TestClient[Any, Any], ws: Workspace, db: Database, text: str
) -> None:
    send = {"from": ws.number, "to": "+15555550123", "text": text}
    error = await error_of(await client.post("/v1/messages", json=send, headers=ws.headers))
    assert [e["path"] for e in error["errors"]] == ["body.text"]
    inbound = {"from": "+15555550123", "to": ws.number, "text": text}
    error = await error_of(
        await client.post("/v1/inbound/messages", json=inbound, headers=ws.headers)
    )
    assert [e["path"] for e in error["errors"]] == ["body.text"]
    hook = {"url": GOOD_URL, "events": ["contact.updated"], "name": text}
    error = await error_of(await client.post("/v1/webhooks", json=hook, headers=ws.headers))
    assert [e["path"] for e in error["errors"]] == ["body.name"]
    made = await client.post("/v1/webhooks", json={**hook, "name": "named"}, headers=ws.headers)
    hook_id = (await made.json())["id"]
    patch = await client.patch(f"/v1/webhooks/{hook_id}", json={"name": text}, headers=ws.headers)
    await error_of(patch)
    after = await (await client.get(f"/v1/webhooks/{hook_id}", headers=ws.headers)).json()
    assert after["name"] == "named"
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM messages") == 0


async def test_empty_name_still_clears(client: TestClient[Any, Any], ws: Workspace) -> None:
    made = await client.post(
        "/v1/webhooks",
        json={"url": GOOD_URL, "events": ["contact.updated"], "name": "named"},
        headers=ws.headers,
    )
    hook_id = (await made.json())["id"]
    patch = await client.patch(f"/v1/webhooks/{hook_id}", json={"name": ""}, headers=ws.headers)
    assert patch.status == 200
    assert (await patch.json())["name"] is None


@pytest.mark.parametrize(
    ("media", "path"),
    [
        ([{"contentType": "image/png", "url": "javascript:alert(1)"}], "body.media.0.url"),
        ([{"contentType": "image/png", "url": "file:///etc/passwd"}], "body.media.0.url"),
        ([{"contentType": "image/png", "url": "/relative.png"}], "body.media.0.url"),
        ([{"contentType": "image/png", "url": "data:image/png;base64,AAAA"}], "body.media.0.url"),
        ([{"contentType": "image/png", "url": "http://a..b/x.png"}], "body.media.0.url"),
        ([{"contentType": "png", "url": CDN}], "body.media.0.contentType"),
        ([{"contentType": "image/", "url": CDN}], "body.media.0.contentType"),
        ([{"contentType": "image/png\r\nX: 1", "url": CDN}], "body.media.0.contentType"),
        ([{"contentType": "image/png", "url": CDN}] * 11, "body.media"),
    ],
)  # fmt: skip
async def test_inbound_media_refused(
    client: TestClient[Any, Any], ws: Workspace, db: Database, media: Any, path: str
) -> None:
    body = {"from": "+15555550123", "to": ws.number, "text": "see", "media": media}
    error = await error_of(await client.post("/v1/inbound/messages", json=body, headers=ws.headers))
    assert path in [e["path"] for e in error["errors"]], error
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM messages") == 0


async def test_inbound_media_accepted(client: TestClient[Any, Any], ws: Workspace) -> None:
    media = [
        {"contentType": "image/jpeg", "url": "https://cdn.example.com/a.jpg"},
        {"contentType": "text/plain; charset=utf-8", "url": "http://cdn.example.com/a.txt"},
    ]
    body = {"from": "+15555550123", "to": ws.number, "text": "", "media": media}
    resp = await client.post("/v1/inbound/messages", json=body, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["media"] == media


async def test_recover_covers_only_events_after_the_subscription(
    client: TestClient[Any, Any], ws: Workspace, clock: FakeClock
) -> None:
    since = isoformat(clock.now() - timedelta(hours=1))
    for data_id in ("old-1", "old-2"):
        published = await client.post(
            "/v1/events",
            json={"type": "contact.updated", "data": {"id": data_id}},
            headers=ws.headers,
        )
        assert published.status == 202
    made = await client.post(
        "/v1/webhooks", json={"url": GOOD_URL, "events": ["contact.updated"]}, headers=ws.headers
    )
    hook_id = (await made.json())["id"]
    await client.post(
        "/v1/events", json={"type": "contact.updated", "data": {"id": "new"}}, headers=ws.headers
    )
    resp = await client.post(
        f"/v1/webhooks/{hook_id}/recover", json={"since": since}, headers=ws.headers
    )
    assert resp.status == 202  # an early `since` is clamped, not refused
    assert await resp.json() == {"queued": 0}
    listed = await (
        await client.get(f"/v1/webhooks/{hook_id}/deliveries", headers=ws.headers)
    ).json()
    assert [d["payload"]["data"]["id"] for d in listed["data"]] == ["new"]
