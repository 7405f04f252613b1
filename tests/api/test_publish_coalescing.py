"""POST /v1/events without an Idempotency-Key: publishes in progress together share one
statement and one commit (store/publish_batcher.py), and each request is still answered only
after its own event is committed, with that event."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import asyncpg
import orjson
from aiohttp.test_utils import TestClient
from standardwebhooks.webhooks import Webhook

from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import subscribe
from tests.receiver import EngineFactory, Receiver

BATCHES = re.compile(rb"^dispatcher_publish_batch_size_(count|sum) ([0-9.e+]+)$", re.MULTILINE)


async def batches(client: TestClient[Any, Any]) -> tuple[float, float]:
    """(statements, events) the process has coalesced so far, from /metrics."""
    resp = await client.get("/metrics")
    assert resp.status == 200
    found = {name.decode(): float(value) for name, value in BATCHES.findall(await resp.read())}
    return found.get("count", 0.0), found.get("sum", 0.0)


async def post(client: TestClient[Any, Any], ws: Workspace, body: dict[str, Any]) -> Any:
    resp = await client.post("/v1/events", json=body, headers=ws.headers)
    return resp.status, await resp.read()


async def stored(db: Database) -> dict[str, str]:
    async with db.acquire() as conn:
        rows = await conn.fetch("SELECT id, payload FROM events")
    return {row["id"]: row["payload"] for row in rows}


async def test_concurrent_publishes_are_each_stored_answered_and_delivered_as_their_own(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    receiver: Receiver,
    make_engine: EngineFactory,
) -> None:
    hook = await subscribe(client, ws, receiver.url())
    before = await batches(client)
    sent: list[dict[str, Any]] = []
    for n in range(60):
        body: dict[str, Any] = {"type": "contact.updated", "data": {"id": f"CT{n}", "n": n}}
        if n % 3 == 1:  # heard by nobody
            body["type"] = "contact.deleted"
        if n % 5 == 0:
            body["numberId"] = ws.number_id
            body["orderingKey"] = f"lane-{n % 2}"
        sent.append(body)
    answers = await asyncio.gather(*(post(client, ws, body) for body in sent))

    assert [status for status, _ in answers] == [202] * 60, answers
    in_db = await stored(db)
    assert len(in_db) == 60
    for body, (_, raw) in zip(sent, answers, strict=True):
        envelope = orjson.loads(raw)
        # Its own event, the bytes stored (the bytes every delivery carries).
        assert envelope["type"] == body["type"] and envelope["data"] == body["data"]
        assert in_db[envelope["id"]].encode() == raw
    after = await batches(client)
    assert after[1] - before[1] == 60
    assert after[0] - before[0] < 60, "the publishes in progress together shared statements"

    # Each event the subscription hears is delivered once, signed, byte for byte as answered.
    heard = {orjson.loads(raw)["id"]: raw for body, (_, raw) in zip(sent, answers, strict=True)
             if body["type"] == "contact.updated"}  # fmt: skip
    await make_engine()
    await wait_for(lambda: len(receiver.requests) >= len(heard), message="every delivery")
    got = {}
    for request in receiver.requests:
        Webhook(hook["secret"]).verify(request.body, request.headers)
        got[orjson.loads(request.body)["id"]] = request.body
    assert got == heard
    assert len(receiver.requests) == len(heard)


async def test_one_clients_events_published_one_after_another_keep_their_order(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    async def others() -> None:
        await asyncio.gather(
            *(post(client, ws, {"type": "contact.updated", "data": {"id": f"X{n}"}})
              for n in range(40))
        )  # fmt: skip

    async def in_turn() -> list[dict[str, Any]]:
        mine = []
        for n in range(10):
            status, raw = await post(
                client, ws, {"type": "contact.updated", "data": {"id": f"S{n}"}, "orderingKey": "s"}
            )
            assert status == 202
            mine.append(orjson.loads(raw))
        return mine

    _, mine = await asyncio.gather(others(), in_turn())
    created = [event["createdAt"] for event in mine]
    assert created == sorted(created) and len(set(created)) == 10
    resp = await client.get("/v1/events?limit=100", headers=ws.headers)
    stream = [e["data"]["id"] for e in (await resp.json())["data"]]
    # Newest first: the client's events, read oldest first, in the order it sent them.
    assert [i for i in reversed(stream) if i.startswith("S")] == [f"S{n}" for n in range(10)]


async def test_a_database_outage_during_a_shared_commit_answers_503_to_each_and_stores_none(
    client: TestClient[Any, Any], ws: Workspace, db: Database, database_url: str
) -> None:
    before = await batches(client)
    # A statement ended while it ran might have committed: the service looks for its events
    # (store/database.py, `settle`), which the lock below keeps it from seeing; it gives up
    # after this long, and says the outcome is unknown.
    db.settle_timeout = 0.5
    # Hold the events table, so that the publishes' statements wait in the database; then
    # drop every connection of the service that waits there, as a failing server would.
    holder = await asyncpg.connect(database_url)
    killer = await asyncpg.connect(database_url)
    lock = holder.transaction()
    await lock.start()
    await holder.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    try:
        requests = [
            asyncio.ensure_future(
                post(client, ws, {"type": "contact.updated", "data": {"id": f"CT{n}"}})
            )
            for n in range(40)
        ]

        async def dropped_until_answered() -> bool:
            # From a connection of its own: in the holder's transaction, pg_stat_activity would
            # be the snapshot its first read took.
            await killer.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'dispatcher' "
                "AND wait_event_type = 'Lock'"
            )
            return all(request.done() for request in requests)

        await wait_for(dropped_until_answered, within=30, message="every publish answered")
        answers = [request.result() for request in requests]
    finally:
        await lock.rollback()
        await holder.close()
        await killer.close()

    for status, raw in answers:
        assert status == 503, raw
        error = orjson.loads(raw)
        # Each statement was ended while it ran (it may have committed, as far as the service
        # can tell), and the locked table cannot be read to look: the outcome is unknown to
        # it, and says so. (Found not stored, it would be `unavailable`.)
        assert error["code"] in {"unavailable", "outcome_unknown"}
    assert await stored(db) == {}
    after = await batches(client)
    assert after[1] - before[1] == 40
    assert after[0] - before[0] < 40, "some of the failed statements were shared"
    # The service is back as soon as the database is.
    status, raw = await post(client, ws, {"type": "contact.updated", "data": {"id": "CT-after"}})
    assert status == 202, raw
    assert list(await stored(db)) == [orjson.loads(raw)["id"]]
