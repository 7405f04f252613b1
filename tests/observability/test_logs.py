"""Logs: one line per API request with its fields; never a secret or an API key."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient

from dispatcher import log
from dispatcher.settings import Settings
from dispatcher.store.database import Database
from tests.conftest import Workspace
from tests.engine.helpers import publish, subscribe, wait_recorded
from tests.receiver import EngineFactory, Receiver, answer


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    saved = structlog.get_config()
    log.configure("json", "debug", stream=buffer, tap=saved["processors"][-2])
    yield buffer
    structlog.configure(**saved)


def lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


async def test_every_request_is_logged_with_its_fields(
    captured: io.StringIO, client: TestClient[Any, Any], ws: Workspace
) -> None:
    resp = await client.get("/v1/messages/MSnope", headers=ws.headers)
    (entry,) = [e for e in lines(captured) if e["event"] == "api.request"]
    assert entry["method"] == "GET"
    assert entry["route"] == "/v1/messages/{message_id}"
    assert entry["status"] == 404
    assert entry["request_id"] == resp.headers["X-Request-Id"]
    assert isinstance(entry["duration_ms"], float)
    assert entry["level"] == "info" and "timestamp" in entry


async def test_no_secret_or_key_reaches_the_log(
    captured: io.StringIO,
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    db: Database,
) -> None:
    receiver.behaviours["/gone"] = answer(410)
    hook = await subscribe(client, ws, receiver.url())
    gone = await subscribe(client, ws, receiver.url("/gone"))
    rotated = await client.post(f"/v1/webhooks/{hook['id']}/secret/rotate", headers=ws.headers)
    fresh = (await rotated.json())["secret"]
    await client.get(f"/v1/webhooks/{hook['id']}/secret", headers=ws.headers)
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": False}, headers=ws.headers)
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": True}, headers=ws.headers)
    await client.get("/v1/messages", headers={"Authorization": "Bearer dk_wrong_key_value"})
    await publish(client, ws)
    await make_engine()
    await wait_recorded(db, 2)
    await client.post(
        "/v1/messages", data=b"{bad", headers={**ws.headers, "Content-Type": "application/json"}
    )
    text = captured.getvalue()
    events = {e["event"] for e in lines(captured)}
    assert {"api.request", "engine.started", "delivery.given_up", "webhook.disabled"} <= events
    for secret in (hook["secret"], fresh, gone["secret"], ws.key, "dk_wrong_key_value"):
        assert secret not in text
        assert secret.removeprefix("whsec_").removeprefix("dk_") not in text


async def test_no_secret_header_value_reaches_the_log(
    captured: io.StringIO,
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    db: Database,
) -> None:
    """Secret header values pass through create, PATCH (accepted and refused), every attempt
    (failing ones too) and a header the sender refuses: none of it is logged."""
    values = ["hdr-s3cr3t-one", "hdr-s3cr3t-two", "hdr-s3cr3t-three", "hdr-s3cr3t-four"]
    receiver.behaviours["/gone"] = answer(410)
    hook = await subscribe(client, ws, receiver.url(), secretHeaders={"X-Key": values[0]})
    await subscribe(client, ws, receiver.url("/gone"), secretHeaders={"X-Key": values[1]})
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"secretHeaders": {"X-A": values[2]}},
                       headers=ws.headers)  # fmt: skip
    for refused in (
        {"X-A": values[3] + "\r\n"},
        {"Host": values[3]},
        {"x-a": values[3], "X-A": "1"},
    ):
        resp = await client.patch(f"/v1/webhooks/{hook['id']}", json={"secretHeaders": refused},
                                  headers=ws.headers)  # fmt: skip
        assert resp.status == 400
    resp = await client.post(
        "/v1/webhooks",
        json={"url": receiver.url(), "events": ["contact.updated"],
              "secretHeaders": {"X-B": values[3] + "\u00e9"}},
        headers=ws.headers,
    )  # fmt: skip
    assert resp.status == 400
    unsendable = await subscribe(client, ws, receiver.url("/unsendable"))
    async with db.acquire() as conn:
        await conn.execute(
            "UPDATE webhooks SET secret_headers = $2 WHERE id = $1",
            unsendable["id"], {"X-Key": values[3] + "\r\nX-Injected: 1"},
        )  # fmt: skip
    await publish(client, ws)
    await make_engine()
    await wait_recorded(db, 3)
    events = {e["event"] for e in lines(captured)}
    assert {"api.request", "engine.started", "delivery.given_up", "webhook.disabled"} <= events
    assert any(r.headers.get("X-A") == values[2] for r in receiver.requests)
    text = captured.getvalue()
    for value in values:
        assert value not in text


def test_settings_are_logged_with_passwords_masked() -> None:
    settings = Settings.from_env({"DATABASE_URL": "postgresql://app:hunter2@db:5432/dispatcher"})
    shown = settings.redacted()
    assert shown["database_url"] == "postgresql://app:***@db:5432/dispatcher"
    assert "hunter2" not in orjson.dumps(shown).decode()


def test_secret_looking_fields_are_masked(captured: io.StringIO) -> None:
    structlog.get_logger().info("oops", secret="whsec_abc", api_key="dk_abc", webhook_id="WH1",
                                clientSecret="s", access_token="t", accessToken="t")  # fmt: skip
    (entry,) = lines(captured)
    assert entry["secret"] == "***" and entry["api_key"] == "***"
    assert entry["clientSecret"] == entry["access_token"] == entry["accessToken"] == "***"
    assert entry["webhook_id"] == "WH1"


def test_a_private_key_is_never_logged_under_any_field(captured: io.StringIO) -> None:
    key = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----\n"
    structlog.get_logger().info("oops", body=f'{{"tls": {{"clientKey": "{key}"}}}}')
    (entry,) = lines(captured)
    assert "MIGHAgEA" not in entry["body"] and "[redacted]" in entry["body"]
