"""The attempt log: every attempt kept, as it happened, readable per delivery and per endpoint,
with what made it due, what came back (the first bytes of the answer), and why it failed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from tests.clock import FakeClock
from tests.conftest import MakeWorkspace, Workspace, wait_for
from tests.engine.helpers import attempted, get_json, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer, chunked, sequence


async def test_every_attempt_is_kept_newest_first(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = sequence(
        answer(500, body=b'{"error": "down for maintenance"}'),
        answer(429, body=b"slow down"),
        answer(200, body=b"thanks"),
    )
    hook = await subscribe(client, ws, receiver.url("/hook"))
    await publish(client, ws)
    engine = await make_engine(retry_schedule=(1.0, 1.0), disable_after=10**8)
    first = await attempted(client, ws, hook["id"], 1, engine)
    clock.advance(2)
    await attempted(client, ws, hook["id"], 2, engine)
    clock.advance(2)
    delivery = await attempted(client, ws, hook["id"], 3, engine)
    assert delivery["status"] == "delivered"

    page = await get_json(
        client, ws, f"/v1/webhooks/{hook['id']}/deliveries/{first['id']}/attempts"
    )
    attempts = page["data"]
    assert page["nextCursor"] is None
    assert [a["attemptNumber"] for a in attempts] == [3, 2, 1]
    assert [a["outcome"] for a in attempts] == ["success", "http_error", "http_error"]
    assert [a["responseStatus"] for a in attempts] == [200, 429, 500]
    assert [a["error"] for a in attempts] == [None, "HTTP 429", "HTTP 500"]
    assert [a["responseBody"] for a in attempts] == [
        "thanks",
        "slow down",
        '{"error": "down for maintenance"}',
    ]
    assert {a["trigger"] for a in attempts} == {"schedule"}
    for a in attempts:
        assert a["id"].startswith("WA") and len(a["id"]) == 34
        assert (a["deliveryId"], a["webhookId"]) == (first["id"], hook["id"])
        assert isinstance(a["responseMs"], int) and a["responseMs"] >= 0
    started = [a["createdAt"] for a in attempts]
    assert started == sorted(started, reverse=True) and len(set(started)) == 3

    # Pages of one, newest first, each cursor leading to the next.
    seen, cursor = [], None
    for _ in range(4):
        query = "limit=1" + (f"&cursor={cursor}" if cursor else "")
        got = await get_json(
            client, ws, f"/v1/webhooks/{hook['id']}/deliveries/{first['id']}/attempts?{query}"
        )
        seen += [a["attemptNumber"] for a in got["data"]]
        cursor = got["nextCursor"]
        if cursor is None:
            break
    assert seen == [3, 2, 1]


async def test_the_trigger_says_what_made_the_attempt_due(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url("/hook"))
    await publish(client, ws)
    engine = await make_engine(retry_schedule=(), disable_after=10**8)
    failed = await attempted(client, ws, hook["id"], 1, engine)
    base = f"/v1/webhooks/{hook['id']}/deliveries/{failed['id']}"
    assert (await client.post(f"{base}/retry", headers=ws.headers)).status == 202
    await attempted(client, ws, hook["id"], 2, engine)
    since = isoformat(clock.now() - timedelta(hours=1))
    resp = await client.post(
        f"/v1/webhooks/{hook['id']}/recover", json={"since": since}, headers=ws.headers
    )
    assert resp.status == 202, await resp.text()
    await attempted(client, ws, hook["id"], 3, engine)
    test = await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)
    assert test.status in (200, 201, 202), await test.text()
    test_delivery = await test.json()

    async def tested() -> bool:
        got = await get_json(
            client, ws, f"/v1/webhooks/{hook['id']}/deliveries/{test_delivery['id']}/attempts"
        )
        return len(got["data"]) == 1

    await wait_for(tested, message="the test delivery's attempt")
    triggers = [a["trigger"] for a in (await get_json(client, ws, f"{base}/attempts"))["data"]]
    assert triggers == ["recover", "manual_retry", "schedule"]
    everything = await get_json(client, ws, f"/v1/webhooks/{hook['id']}/attempts")
    assert [a["trigger"] for a in everything["data"]] == [
        "test",
        "recover",
        "manual_retry",
        "schedule",
    ]


async def test_response_excerpts_follow_the_setting(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
) -> None:
    body = b"\xff\xfe broken utf-8, then a long tail " + b"x" * 5000
    receiver.behaviours["/long"] = answer(200, body=body)
    receiver.behaviours["/chunked"] = chunked(body)
    long = await subscribe(client, ws, receiver.url("/long"))
    streamed = await subscribe(client, ws, receiver.url("/chunked"))
    await publish(client, ws, "CT1")
    engine = await make_engine(response_excerpt_bytes=16)
    for hook in (long, streamed):
        await attempted(client, ws, hook["id"], 1, engine)
        (only,) = (await get_json(client, ws, f"/v1/webhooks/{hook['id']}/attempts"))["data"]
        assert only["responseBody"] == body[:16].decode("utf-8", "replace")
        assert only["responseBody"].startswith("\ufffd\ufffd broken")
    await engine.stop()

    await publish(client, ws, "CT2")
    engine = await make_engine(response_excerpt_bytes=0)

    async def both() -> bool:
        engine.poke()
        got = await get_json(client, ws, f"/v1/webhooks/{long['id']}/attempts")
        return len(got["data"]) == 2

    await wait_for(both, message="the second attempt")
    newest = (await get_json(client, ws, f"/v1/webhooks/{long['id']}/attempts"))["data"][0]
    assert newest["outcome"] == "success" and newest["responseBody"] is None


async def test_failures_without_an_answer(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
) -> None:
    # Port 9 (discard) on loopback: nothing listens in the test environment, so connecting
    # is refused; the URL stays on loopback, as every test's traffic must.
    refused = await subscribe(client, ws, "http://127.0.0.1:9/nothing")
    await publish(client, ws)
    engine = await make_engine(retry_schedule=(), disable_after=10**8)
    await attempted(client, ws, refused["id"], 1, engine)
    (only,) = (await get_json(client, ws, f"/v1/webhooks/{refused['id']}/attempts"))["data"]
    assert only["outcome"] == "connection_error"
    assert only["responseStatus"] is None and only["responseBody"] is None
    assert only["error"] == "connection refused"


async def test_the_endpoint_list_filters_by_outcome_and_time(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = sequence(answer(503), answer(200))
    hook = await subscribe(client, ws, receiver.url("/hook"))
    await publish(client, ws)
    engine = await make_engine(retry_schedule=(60.0,), disable_after=10**8)
    await attempted(client, ws, hook["id"], 1, engine)
    clock.advance(120)
    await attempted(client, ws, hook["id"], 2, engine)
    base = f"/v1/webhooks/{hook['id']}/attempts"
    everything = (await get_json(client, ws, base))["data"]
    newest, oldest = everything
    assert [a["outcome"] for a in everything] == ["success", "http_error"]
    only_errors = (await get_json(client, ws, f"{base}?outcome=http_error"))["data"]
    assert [a["id"] for a in only_errors] == [oldest["id"]]
    # `since` is inclusive and `until` exclusive, on the attempt's start.
    at = newest["createdAt"]
    assert [a["id"] for a in (await get_json(client, ws, f"{base}?since={at}"))["data"]] == [
        newest["id"]
    ]
    assert [a["id"] for a in (await get_json(client, ws, f"{base}?until={at}"))["data"]] == [
        oldest["id"]
    ]
    for bad in ("yesterday", "2026-11-21", "2026-11-21T10:00:00", "2026-13-01T00:00:00Z"):
        resp = await client.get(f"{base}?since={bad}", headers=ws.headers)
        assert resp.status == 400, bad
        assert (await resp.json())["errors"][0]["path"] == "query.since"
    resp = await client.get(f"{base}?outcome=nope", headers=ws.headers)
    assert resp.status == 400
    # A cursor is bound to its filters.
    page = await get_json(client, ws, f"{base}?limit=1&outcome=http_error")
    assert page["nextCursor"] is None
    page = await get_json(client, ws, f"{base}?limit=1")
    resp = await client.get(
        f"{base}?limit=1&outcome=success&cursor={page['nextCursor']}", headers=ws.headers
    )
    assert resp.status == 400
    assert (await resp.json())["code"] == "invalid_cursor"


async def test_another_workspace_sees_nothing_and_scopes_hold(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    make_workspace: MakeWorkspace,
) -> None:
    hook = await subscribe(client, ws, receiver.url("/hook"))
    await publish(client, ws)
    engine = await make_engine()
    delivery = await attempted(client, ws, hook["id"], 1, engine)
    paths = [
        f"/v1/webhooks/{hook['id']}/attempts",
        f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/attempts",
    ]
    other = await make_workspace()
    writer = await make_workspace(scopes=["webhooks:write"])
    for path in paths:
        assert (await client.get(path, headers=other.headers)).status == 404
        assert (await client.get(path, headers=writer.headers)).status == 403
        assert (await client.get(path)).status == 401
    missing = f"/v1/webhooks/{hook['id']}/deliveries/WD{'0' * 32}/attempts"
    assert (await client.get(missing, headers=ws.headers)).status == 404
