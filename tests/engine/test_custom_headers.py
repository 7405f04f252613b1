"""Custom headers end to end, with a real receiver: on every attempt (retries too) and on test
deliveries, secret ones included; never in place of ours; and a header stored past the API
that breaks a rule is never sent, its attempt recorded as failed."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient
from standardwebhooks.webhooks import Webhook

from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import attempted, get_json, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer, sequence

SECRET_VALUE = "Bearer s3cr3t-never-returned"
HEADERS = {"X-Tenant": "acme", "Accept": "application/json", "x-trace": "a b\tc"}
SECRET_HEADERS = {"Authorization": SECRET_VALUE, "X-Api-Key": "k3y-never-returned"}


def carries_custom_headers(request_headers: dict[str, str]) -> bool:
    """Whether a request carries HEADERS and SECRET_HEADERS, as they were given."""
    lowered = {name.lower(): value for name, value in request_headers.items()}
    wanted = {**HEADERS, **SECRET_HEADERS}
    return all(lowered.get(name.lower()) == value for name, value in wanted.items())


async def test_every_attempt_carries_the_headers(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = sequence(answer(503), answer(200))
    hook = await subscribe(
        client, ws, receiver.url(), headers=HEADERS, secretHeaders=SECRET_HEADERS
    )
    event = await publish(client, ws)
    engine = await make_engine()
    first = await attempted(client, ws, hook["id"])
    assert first["status"] == "pending"
    clock.advance(10)
    second = await attempted(client, ws, hook["id"], attempts=2, engine=engine)
    assert second["status"] == "delivered"
    assert len(receiver.requests) == 2
    for request in receiver.requests:
        assert carries_custom_headers(request.headers), request.headers
        # Ours are there and untouched: the signature verifies, the type is ours.
        assert Webhook(hook["secret"]).verify(request.body, request.headers) == event
        assert request.headers["webhook-id"] == first["id"]
        assert request.headers["Content-Type"] == "application/json"
    # What the API shows of the delivery and its attempts carries no secret header.
    for path in (
        f"/v1/webhooks/{hook['id']}/deliveries",
        f"/v1/webhooks/{hook['id']}/deliveries/{first['id']}/attempts",
        f"/v1/webhooks/{hook['id']}",
    ):
        text = orjson.dumps(await get_json(client, ws, path)).decode()
        assert "s3cr3t" not in text and "k3y" not in text


async def test_a_test_delivery_carries_the_headers(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    hook = await subscribe(
        client, ws, receiver.url(), headers=HEADERS, secretHeaders=SECRET_HEADERS,
        filter={"never": "matches"},
    )  # fmt: skip
    resp = await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)
    assert resp.status == 202
    test_delivery = await resp.json()
    await make_engine()
    await wait_for(lambda: len(receiver.requests) == 1, message="the test delivery")
    (request,) = receiver.requests
    assert request.headers["webhook-id"] == test_delivery["id"]
    assert carries_custom_headers(request.headers), request.headers


async def test_headers_changed_by_a_patch_go_with_the_next_attempt(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = sequence(answer(503), answer(200))
    hook = await subscribe(client, ws, receiver.url(), headers={"X-Old": "1"},
                           secretHeaders={"X-Old-Secret": "2"})  # fmt: skip
    await publish(client, ws)
    engine = await make_engine()
    await attempted(client, ws, hook["id"])
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"headers": {"X-New": "3"}, "secretHeaders": None},
        headers=ws.headers,
    )  # fmt: skip
    assert resp.status == 200
    clock.advance(10)
    await attempted(client, ws, hook["id"], attempts=2, engine=engine)
    first, second = receiver.requests
    assert first.headers["X-Old"] == "1" and first.headers["X-Old-Secret"] == "2"
    assert second.headers["X-New"] == "3"
    assert "X-Old" not in second.headers and "X-Old-Secret" not in second.headers


async def test_a_header_stored_past_the_api_is_never_sent(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    db: Database,
) -> None:
    """A row written without the API's rules (by hand, by an old release): the attempt fails,
    recorded with a plain reason that quotes no value, and the receiver sees nothing."""
    injected = await subscribe(client, ws, receiver.url("/injected"))
    reserved = await subscribe(client, ws, receiver.url("/reserved"))
    async with db.acquire() as conn:
        await conn.execute(
            "UPDATE webhooks SET secret_headers = $2 WHERE id = $1",
            injected["id"], {"X-Key": "s3cr3t\r\nX-Injected: 1"},
        )  # fmt: skip
        await conn.execute(
            "UPDATE webhooks SET headers = $2 WHERE id = $1",
            reserved["id"], {"webhook-signature": "v1,forged"},
        )  # fmt: skip
    await publish(client, ws)
    await make_engine()
    for hook, reason in ((injected, "X-Key"), (reserved, "reserved")):
        delivery = await attempted(client, ws, hook["id"])
        assert delivery["status"] == "pending"  # retried, like any failure
        assert delivery["responseStatus"] is None
        error = delivery["lastError"]
        assert error.startswith("the webhook's custom headers cannot be sent: "), error
        assert reason in error and "s3cr3t" not in error and "forged" not in error
    assert receiver.requests == []


# -- Echoed secrets stay out of the attempt log --------------------------------------------

ECHOED_SECRETS = {"Authorization": "Bearer tok/en+v4lue==", "X-Api-Key": "k3y-3ch0ed/secret"}


def echo(form: str, secret: list[str]) -> Any:
    """A receiver that answers 500 with the request's headers in its body, written as `form`
    says: as lines, as JSON (slashes escaped or not), as a query string; `cut` puts a secret
    header's value at the very end of a 1024-byte excerpt, cut off after 5 characters;
    `careless` echoes the signing secret itself (`secret[0]`)."""

    async def respond(request: web.Request) -> web.StreamResponse:
        headers = {str(name): value for name, value in request.headers.items()}
        if form == "lines":
            body = "".join(f"{name}: {value}\n" for name, value in headers.items()).encode()
        elif form == "json":
            body = orjson.dumps({"headers": headers})
        elif form == "json-slashes":
            body = orjson.dumps({"headers": headers}).replace(b"/", b"\\/")
        elif form == "query":
            body = urlencode(headers).encode()
        elif form == "cut":
            body = b"x" * (1024 - 5) + headers["X-Api-Key"].encode() + b" and more"
        else:
            body = f"my secret is {secret[0]}, signature {headers['webhook-signature']}".encode()
        return web.Response(status=500, body=body)

    return respond


async def test_secrets_echoed_by_a_receiver_are_redacted_from_the_attempt_log(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
) -> None:
    """A receiver echoing the request's headers, in any of the forms echoes take: the
    attempt's `responseBody` keeps the rest of the answer and none of the secret header
    values, the signature or the signing secret (what read-only keys and the console see).
    Headers that are not secret stay as they were echoed."""
    forms = ["lines", "json", "json-slashes", "query", "cut", "careless"]
    hooks = {}
    secret: list[str] = []
    for form in forms:
        receiver.behaviours[f"/{form}"] = echo(form, secret)
        hooks[form] = await subscribe(
            client, ws, receiver.url(f"/{form}"), headers={"X-Tenant": "acme"},
            secretHeaders=ECHOED_SECRETS,
        )  # fmt: skip
    secret.append(hooks["careless"]["secret"])
    await publish(client, ws)
    await make_engine()
    for form in forms:
        hook = hooks[form]
        delivery = await attempted(client, ws, hook["id"])
        path = f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/attempts"
        (attempt,) = (await get_json(client, ws, path))["data"]
        kept = attempt["responseBody"]
        (sent,) = receiver.at(f"/{form}")
        signature = sent.headers["webhook-signature"]
        assert "[redacted]" in kept, (form, kept)
        for value in (*ECHOED_SECRETS.values(), signature, signature.partition(",")[2],
                      hook["secret"], hook["secret"].removeprefix("whsec_")):  # fmt: skip
            for shown in (value, value.replace("/", "\\/"), quote(value, safe="")):
                assert shown not in kept, (form, shown, kept)
        if form == "cut":
            assert kept == "x" * (1024 - 5) + "[redacted]", kept
            assert "k3y-3" not in kept
        elif form != "careless":
            assert "acme" in kept and delivery["id"] in kept, (form, kept)
