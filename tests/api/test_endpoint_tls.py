"""A subscription's mutual TLS (`tls`) as the API takes it: checked at create and PATCH (400
naming `body.tls.<field>`, nothing stored), answered without `clientKey` (write-only), replaced
whole by a PATCH and removed by null."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from tests.conftest import Workspace
from tests.engine.helpers import get_json
from tests.tls_certificates import Authority, Issued, new_key_pem

URL = "https://hooks.example.com/in"
GARBAGE_CERTIFICATE = "-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n"
GARBAGE_KEY = "-----BEGIN PRIVATE KEY-----\nZ2FyYmFnZQ==\n-----END PRIVATE KEY-----\n"


@pytest.fixture(scope="module")
def ca() -> Authority:
    return Authority()


@pytest.fixture(scope="module")
def client_certificate(ca: Authority) -> Issued:
    return ca.issue("dispatcher client")


def tls_of(issued: Issued, ca: str | None = None) -> dict[str, Any]:
    return {"clientCertificate": issued.certificate, "clientKey": issued.key, "caCertificate": ca}


async def create(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"url": URL, "events": ["contact.updated"], **fields}
    return await client.post("/v1/webhooks", json=body, headers=ws.headers)


async def count_webhooks(client: TestClient[Any, Any], ws: Workspace) -> int:
    return len((await get_json(client, ws, "/v1/webhooks"))["data"])


async def test_set_answered_without_the_key_patched_and_removed(
    client: TestClient[Any, Any], ws: Workspace, ca: Authority, client_certificate: Issued
) -> None:
    plain = await (await create(client, ws)).json()
    assert plain["tls"] is None

    made = await create(client, ws, tls=tls_of(client_certificate, ca.pem))
    assert made.status == 201, await made.text()
    hook = await made.json()
    expected = {
        "clientCertificate": client_certificate.certificate,
        "subject": "CN=dispatcher client",
        "expiresAt": isoformat(client_certificate.expires_at),
        "caCertificate": ca.pem,
    }
    assert hook["tls"] == expected
    path = f"/v1/webhooks/{hook['id']}"
    assert (await get_json(client, ws, path))["tls"] == expected
    listed = (await get_json(client, ws, "/v1/webhooks"))["data"]
    assert {h["id"]: h["tls"] for h in listed} == {plain["id"]: None, hook["id"]: expected}
    for answer in (hook, await get_json(client, ws, path), listed):
        assert "PRIVATE KEY" not in str(answer)  # write-only

    async def patched(body: dict[str, Any]) -> Any:
        resp = await client.patch(path, json=body, headers=ws.headers)
        assert resp.status == 200, await resp.text()
        return await resp.json()

    assert (await patched({"name": "kept"}))["tls"] == expected  # absent keeps
    other = ca.issue("another client")
    replaced = (await patched({"tls": tls_of(other)}))["tls"]
    assert (replaced["subject"], replaced["caCertificate"]) == ("CN=another client", None)
    assert (await patched({"tls": None}))["tls"] is None  # null removes it
    assert (await get_json(client, ws, path))["tls"] is None


def broken(ca: Authority, good: Issued) -> list[tuple[str, dict[str, Any], str, str]]:
    """(case, tls, field refused, words of its message)."""
    now = datetime.now(UTC)
    expired = ca.issue("old", not_before=now - timedelta(days=9), not_after=now - timedelta(days=1))
    early = ca.issue("early", not_before=now + timedelta(days=1), not_after=now + timedelta(9))
    return [
        ("not PEM", {**tls_of(good), "clientCertificate": "not a certificate"},
         "clientCertificate", "is not PEM"),
        ("garbage inside the armor", {**tls_of(good), "clientCertificate": GARBAGE_CERTIFICATE},
         "clientCertificate", "is not a valid certificate"),
        ("key not PEM", {**tls_of(good), "clientKey": "secret"}, "clientKey", "is not PEM"),
        ("key garbage", {**tls_of(good), "clientKey": GARBAGE_KEY},
         "clientKey", "is not a valid private key"),
        ("key of another certificate", {**tls_of(good), "clientKey": new_key_pem()},
         "clientKey", "does not match clientCertificate"),
        ("expired", tls_of(expired), "clientCertificate", "has expired"),
        ("not yet valid", tls_of(early), "clientCertificate", "is not valid yet"),
        ("CA not PEM", tls_of(good, "a CA"), "caCertificate", "is not PEM"),
        ("CA garbage", tls_of(good, GARBAGE_CERTIFICATE),
         "caCertificate", "is not a valid certificate"),
        ("CA expired", tls_of(good, expired.certificate), "caCertificate", "has expired"),
    ]  # fmt: skip


async def test_broken_certificates_are_refused_naming_the_field(
    client: TestClient[Any, Any], ws: Workspace, ca: Authority, client_certificate: Issued
) -> None:
    hook = await (await create(client, ws)).json()
    path = f"/v1/webhooks/{hook['id']}"
    for case, tls, field, words in broken(ca, client_certificate):
        for resp in (
            await create(client, ws, tls=tls),
            await client.patch(path, json={"tls": tls}, headers=ws.headers),
        ):
            assert resp.status == 400, (case, await resp.text())
            errors = (await resp.json())["errors"]
            assert [e["path"] for e in errors] == [f"body.tls.{field}"], case
            assert words in errors[0]["message"], (case, errors)
            key_line = tls["clientKey"].splitlines()[1 if "\n" in tls["clientKey"] else 0]
            assert key_line not in await resp.text()  # never quoted
    assert await count_webhooks(client, ws) == 1  # nothing stored
    assert (await get_json(client, ws, path))["tls"] is None


async def test_the_certificate_and_key_are_required(
    client: TestClient[Any, Any], ws: Workspace, client_certificate: Issued
) -> None:
    for missing in ("clientCertificate", "clientKey"):
        tls = {k: v for k, v in tls_of(client_certificate).items() if k != missing}
        resp = await create(client, ws, tls=tls)
        assert resp.status == 400
        fields = [e["path"] for e in (await resp.json())["errors"]]
        assert fields == [f"body.tls.{missing}"]
    resp = await create(client, ws, tls={**tls_of(client_certificate), "pin": "x"})
    assert resp.status == 400
    assert await count_webhooks(client, ws) == 0


async def test_openapi_shows_the_key_write_only(client: TestClient[Any, Any]) -> None:
    document = await (await client.get("/v1/openapi.json")).json()
    schemas = document["components"]["schemas"]
    tls_in = schemas["Tls"]
    assert set(tls_in["required"]) == {"clientCertificate", "clientKey"}
    assert tls_in["properties"]["clientKey"]["writeOnly"] is True
    assert "clientKey" not in schemas["TlsOut"]["properties"]
