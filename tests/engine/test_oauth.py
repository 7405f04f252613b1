"""OAuth 2.0 client credentials in the engine, against a real token endpoint on loopback (an
aiohttp app issuing tokens) and a real receiver that checks the bearer token it is sent: the
token is asked for as RFC 6749 section 4.4 says, sent as `Authorization: Bearer`, kept until
shortly before it expires, shared by concurrent attempts (one token request at a time),
renewed once on a 401, and a failing token endpoint is recorded plainly and follows the
schedule; neither the tokens nor the client secret appear in logs, answers or excerpts."""

from __future__ import annotations

import asyncio
import base64
import io
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher import log
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import (
    attempted,
    bulk_publish,
    delivered_count,
    get_json,
    publish,
    subscribe,
)
from tests.receiver import EngineFactory, Receiver

CLIENT_ID = "dispatcher-client"
CLIENT_SECRET = "Sup3r-Secret+value/with:odd&chars"


@dataclass
class TokenEndpoint:
    """A token endpoint: issues `tok-<n>-<long random-looking tail>` for the client
    credentials grant, and records each request (its form and its client credentials)."""

    port: int = 0
    issued: list[str] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    expires_in: Any = 3600
    status: int = 200
    delay: float = 0.0
    valid_from: int = 0  # tokens issued before this index are refused by the receiver

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/oauth/token"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        form = dict(urllib.parse.parse_qsl((await request.read()).decode()))
        basic = request.headers.get("Authorization", "")
        user, _, password = base64.b64decode(basic.removeprefix("Basic ")).decode().partition(":")
        self.requests.append(
            {
                "form": form,
                "content_type": request.headers.get("Content-Type"),
                "client": (urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password)),
            }
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.status != 200:
            return web.json_response({"error": "server_error"}, status=self.status)
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if self.requests[-1]["client"] != (CLIENT_ID, CLIENT_SECRET):
            return web.json_response({"error": "invalid_client"}, status=401)
        token = f"tok-{len(self.issued)}-Zm9vYmFyYmF6cXV4LXRva2VuLXRhaWw"
        self.issued.append(token)
        answer = {"access_token": token, "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        return web.json_response(answer)

    def valid(self, header: str | None) -> bool:
        tokens = self.issued[self.valid_from :]
        return header is not None and header.removeprefix("Bearer ") in tokens


@pytest.fixture
async def tokens() -> AsyncIterator[TokenEndpoint]:
    state = TokenEndpoint()
    app = web.Application()
    app.router.add_post("/oauth/token", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = runner.addresses[0][1]
    yield state
    await runner.cleanup()


def checking(tokens: TokenEndpoint, echo: bool = False) -> Any:
    """The receiver's behaviour: 200 for a valid bearer token (echoing the request's
    Authorization header when `echo`), else 401."""

    async def respond(request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if not tokens.valid(header):
            return web.Response(status=401, text=f"refused {header}" if echo else "no")
        return web.Response(status=200, text=f"you sent {header}" if echo else "ok")

    return respond


def auth(tokens: TokenEndpoint, **extra: Any) -> dict[str, Any]:
    return {
        "type": "oauth2",
        "tokenUrl": tokens.url(),
        "clientId": CLIENT_ID,
        "clientSecret": CLIENT_SECRET,
        **extra,
    }


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    saved = structlog.get_config()
    log.configure("json", "debug", stream=buffer, tap=saved["processors"][-2])
    yield buffer
    structlog.configure(**saved)


async def test_the_bearer_token_is_fetched_sent_and_verified(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    tokens: TokenEndpoint,
    make_engine: EngineFactory,
    captured: io.StringIO,
) -> None:
    receiver.behaviours["/hook"] = checking(tokens, echo=True)
    hook = await subscribe(
        client, ws, receiver.url(), auth=auth(tokens, scope="hooks:write", audience="aud-1"),
        headers={"Authorization": "Basic custom-gives-way"},
    )  # fmt: skip
    await publish(client, ws)
    await publish(client, ws, "CT2")
    engine = await make_engine()
    await wait_for(lambda: len(receiver.at("/hook")) >= 2)
    assert all(tokens.valid(r.headers.get("Authorization")) for r in receiver.at("/hook"))
    assert [r.headers["Authorization"] for r in receiver.at("/hook")] == [
        f"Bearer {tokens.issued[0]}"
    ] * 2
    (asked,) = tokens.requests  # one token for both
    assert asked["form"] == {
        "grant_type": "client_credentials",
        "scope": "hooks:write",
        "audience": "aud-1",
    }
    assert asked["content_type"] == "application/x-www-form-urlencoded"
    assert asked["client"] == (CLIENT_ID, CLIENT_SECRET)
    assert engine.tokens.requests == 1

    # The receiver echoed the token: the excerpt redacts it.
    path = f"/v1/webhooks/{hook['id']}/attempts"

    async def both_recorded() -> bool:
        return len((await get_json(client, ws, path))["data"]) == 2

    await wait_for(both_recorded)
    page = await get_json(client, ws, path)
    excerpts = [a["responseBody"] for a in page["data"]]
    assert excerpts == ["you sent Bearer [redacted]"] * 2
    for text in (captured.getvalue(), str(page), str(await get_json(client, ws, "/v1/webhooks"))):
        assert CLIENT_SECRET not in text
        assert tokens.issued[0] not in text


async def test_a_token_is_asked_for_again_shortly_before_it_expires(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    tokens: TokenEndpoint,
    make_engine: EngineFactory,
) -> None:
    receiver.behaviours["/hook"] = checking(tokens)
    tokens.expires_in = 300  # used for 270 s: renewed 30 s before it expires
    await subscribe(client, ws, receiver.url(), auth=auth(tokens))
    engine = await make_engine()
    now = [1000.0]
    engine.tokens.now = lambda: now[0]

    async def deliver(data_id: str, sent: int) -> None:
        await publish(client, ws, data_id)
        await wait_for(lambda: len(receiver.at("/hook")) >= sent)

    await deliver("CT1", 1)
    now[0] += 269.0
    await deliver("CT2", 2)
    assert len(tokens.requests) == 1  # still within its lifetime
    now[0] += 1.5
    await deliver("CT3", 3)
    assert len(tokens.requests) == 2  # 270.5 s after it was asked for: a new one
    assert receiver.at("/hook")[-1].headers["Authorization"] == f"Bearer {tokens.issued[1]}"

    # A short-lived token (expires_in 2: used for 1 s) and one without expires_in (an hour).
    tokens.expires_in = 2
    now[0] += 3600.0
    await deliver("CT4", 4)
    now[0] += 1.1
    await deliver("CT5", 5)
    assert len(tokens.requests) == 4
    tokens.expires_in = None
    now[0] += 1.1
    await deliver("CT6", 6)
    now[0] += 3599.0
    await deliver("CT7", 7)
    assert len(tokens.requests) == 5
    now[0] += 1.1
    await deliver("CT8", 8)
    assert len(tokens.requests) == 6


async def test_a_401_fetches_a_new_token_once(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    tokens: TokenEndpoint,
    make_engine: EngineFactory,
) -> None:
    receiver.behaviours["/hook"] = checking(tokens)
    hook = await subscribe(client, ws, receiver.url(), auth=auth(tokens))
    await publish(client, ws)
    engine = await make_engine(disable_after=10**8)
    await wait_for(lambda: len(receiver.at("/hook")) == 1)
    assert len(tokens.requests) == 1

    tokens.valid_from = 1  # the receiver revokes the token it accepted
    await publish(client, ws, "CT2")
    await wait_for(lambda: len(receiver.at("/hook")) == 3)

    async def both_delivered() -> bool:
        found = await deliveries_of(client, ws, hook["id"])
        return [d["status"] for d in found] == ["delivered"] * 2

    await wait_for(both_delivered)
    assert [d["attempts"] for d in await deliveries_of(client, ws, hook["id"])] == [1, 1]
    assert len(tokens.requests) == 2  # refreshed once, and that one accepted
    sent = [r.headers["Authorization"] for r in receiver.at("/hook")]
    assert sent == [f"Bearer {tokens.issued[i]}" for i in (0, 0, 1)]

    # A receiver that refuses every token: one refresh per attempt, then the 401 recorded.
    tokens.valid_from = 10**6
    await publish(client, ws, "CT3")
    await wait_for(lambda: len(receiver.at("/hook")) == 5)

    async def recorded() -> bool:
        return any(
            d["lastError"] == "HTTP 401" for d in await deliveries_of(client, ws, hook["id"])
        )

    await wait_for(recorded)
    (failed,) = [d for d in await deliveries_of(client, ws, hook["id"]) if d["lastError"]]
    assert (failed["attempts"], failed["responseStatus"], failed["status"]) == (1, 401, "pending")
    assert len(tokens.requests) == 3
    assert engine.tokens.requests == 3


async def deliveries_of(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> list[Any]:
    page = await get_json(client, ws, f"/v1/webhooks/{hook_id}/deliveries?limit=100")
    data: list[Any] = page["data"]
    return data


async def test_a_thousand_deliveries_share_a_handful_of_tokens(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    receiver: Receiver,
    tokens: TokenEndpoint,
    make_engine: EngineFactory,
) -> None:
    receiver.behaviours["/hook"] = checking(tokens)
    tokens.delay = 0.2  # a slow token endpoint: every attempt of the first claims waits on it
    await subscribe(client, ws, receiver.url(), auth=auth(tokens), maxConcurrency=200)
    await bulk_publish(db, ws, 1000)
    await make_engine()
    await make_engine()  # two engines, each its own cache

    async def all_delivered() -> bool:
        return await delivered_count(db) == 1000

    started = asyncio.get_running_loop().time()
    await wait_for(all_delivered, within=120)
    took = asyncio.get_running_loop().time() - started
    assert len(receiver.at("/hook")) == 1000  # no 401, no second send
    assert 1 <= len(tokens.requests) <= 2, len(tokens.requests)
    print(f"\n1,000 deliveries, 2 engines: {len(tokens.requests)} token requests, {took:.1f} s")


async def test_a_failing_token_endpoint_is_recorded_plainly_and_retried(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    tokens: TokenEndpoint,
    make_engine: EngineFactory,
    clock: FakeClock,
    captured: io.StringIO,
) -> None:
    receiver.behaviours["/hook"] = checking(tokens, echo=True)
    tokens.status = 500
    hook = await subscribe(client, ws, receiver.url(), auth=auth(tokens), retrySchedule=[5])
    await publish(client, ws)
    engine = await make_engine(disable_after=10**8)
    delivery = await attempted(client, ws, hook["id"], 1, engine)
    assert delivery["lastError"] == "OAuth token endpoint: HTTP 500"
    assert delivery["responseStatus"] is None  # the receiver was not asked
    assert delivery["status"] == "pending"
    assert receiver.at("/hook") == []
    path = f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/attempts"
    (logged,) = (await get_json(client, ws, path))["data"]
    assert logged["error"] == "OAuth token endpoint: HTTP 500"
    assert (logged["outcome"], logged["responseStatus"]) == ("connection_error", None)
    assert logged["responseBody"] is None

    # The schedule's retry, once the token endpoint is back: delivered.
    tokens.status = 200
    next_at = datetime.fromisoformat(delivery["nextAttemptAt"])
    assert round((next_at - clock.now()).total_seconds()) == 5
    clock.set(next_at)
    delivery = await attempted(client, ws, hook["id"], 2, engine)
    assert (delivery["status"], delivery["lastError"]) == ("delivered", None)
    for text in (captured.getvalue(), str(await get_json(client, ws, path))):
        assert CLIENT_SECRET not in text
        assert tokens.issued[0] not in text
    assert '"oauth.token_failed"' in captured.getvalue()


async def test_token_endpoint_errors_in_plain_words(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    receiver: Receiver,
    tokens: TokenEndpoint,
    make_engine: EngineFactory,
) -> None:
    """A refused client is the token endpoint's status (its error code in the log); a
    refused address is the guard's."""
    bad = {**auth(tokens), "clientSecret": "wrong"}
    refused = await subscribe(client, ws, receiver.url(), auth=bad)
    guarded = await subscribe(
        client, ws, receiver.url(), auth={**auth(tokens), "tokenUrl": "http://10.1.2.3/token"}
    )
    broken = await subscribe(client, ws, receiver.url(), auth=auth(tokens))
    async with db.acquire() as conn:  # stored past the API: half an auth
        await conn.execute(
            """UPDATE webhooks SET auth = '{"type": "oauth2"}' WHERE id = $1""", broken["id"]
        )
    await publish(client, ws)
    engine = await make_engine(disable_after=10**8)
    first = await attempted(client, ws, refused["id"], 1, engine)
    assert first["lastError"] == "OAuth token endpoint: HTTP 401"
    second = await attempted(client, ws, guarded["id"], 1, engine)
    assert second["lastError"].startswith("OAuth token endpoint: blocked: ")
    third = await attempted(client, ws, broken["id"], 1, engine)
    assert third["lastError"] == "the webhook's auth cannot be used: set it again with a PATCH"
    assert receiver.at("/hook") == []
