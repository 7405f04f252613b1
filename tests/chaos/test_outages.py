"""Postgres going away under the API and the engine, through a forwarder we can cut.

What a client may see: 202 (stored), 503 `unavailable` with `Retry-After` (nothing was
stored), or 503 `outcome_unknown` (a commit's answer lost, and the database not reachable to
look); never a 500, and never `unavailable` for a write that committed. What an engine
stopped during an outage does with the results it could not write: it says so, by delivery
id, and they come back.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from dispatcher.errors import DatabaseUnavailable
from dispatcher.store.database import Database
from tests.chaos.forwarder import Forwarder
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import bulk_publish, webhooks_for
from tests.processes import start
from tests.receiver import Receiver


def json_lines(raw: bytes) -> list[dict[str, Any]]:
    """The JSON log events in a process's stderr (anything else is skipped)."""
    events = []
    for line in raw.splitlines():
        if line.startswith(b"{"):
            events.append(orjson.loads(line))
    return events


async def event_ids(db: Database) -> set[str]:
    async with db.acquire() as conn:
        return {r["id"] for r in await conn.fetch("SELECT id FROM events")}


async def test_a_connection_dropped_in_a_transaction_is_unavailable(
    forwarder: Forwarder, via_forwarder: Database
) -> None:
    """The server drops the connection mid-transaction: asyncpg has already handed it back
    to the pool, and closing it again must not turn "unavailable" into a driver error."""
    with pytest.raises(DatabaseUnavailable):
        async with via_forwarder.transaction() as conn:
            await conn.fetchval("SELECT 1")
            forwarder.cut()
            await conn.fetchval("SELECT 2")
    async with via_forwarder.acquire() as conn:  # the pool replaces it by itself
        assert await conn.fetchval("SELECT 3") == 3


async def test_a_committed_write_answers_its_success_when_the_release_fails(
    forwarder: Forwarder, api: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    forwarder.cut_after_commit = True
    # With a key, publishing is an explicit transaction (a COMMIT the forwarder can see).
    resp = await api.post(
        "/v1/events",
        json={"type": "contact.updated", "data": {"id": "CT1"}},
        headers={**ws.headers, "Idempotency-Key": "release-fails"},
    )
    # The request answers what happened: the event is stored. (The pool takes connections
    # back without a reset statement, so the lost connection is met by its next use.)
    assert resp.status == 202, await resp.text()
    assert (await resp.json())["id"] in await event_ids(db)
    statuses = []
    for _ in range(5):  # the next use meets the cut: at most a 503, then the pool recovers
        statuses.append((await api.get("/v1/webhooks", headers=ws.headers)).status)
        if statuses[-1] == 200:
            break
    assert statuses[-1] == 200 and set(statuses) <= {200, 503}, statuses
    assert forwarder.cuts_after_commit <= 1


async def test_publishing_through_restarts_answers_202_or_503_never_500(
    forwarder: Forwarder, api: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    statuses: Counter[int] = Counter()
    accepted: list[str] = []
    refused: list[str] = []  # the data ids of publishes answered `unavailable`
    bad: list[str] = []
    done = asyncio.Event()

    async def publisher(n: int) -> None:
        i = 0
        while not done.is_set():
            i += 1
            data_id = f"CT{n}-{i}"
            body = {"type": "contact.updated", "data": {"id": data_id}}
            resp = await api.post("/v1/events", json=body, headers=ws.headers)
            statuses[resp.status] += 1
            answer = await resp.json()
            if resp.status == 202:
                accepted.append(answer["id"])
            elif (
                resp.status != 503
                or answer["code"] not in {"unavailable", "outcome_unknown"}
                or ("Retry-After" not in resp.headers)
            ):
                bad.append(f"{resp.status} {answer}")
            elif answer["code"] == "unavailable":
                refused.append(data_id)

    publishers = [asyncio.create_task(publisher(n)) for n in range(8)]
    try:
        for restart in range(4):
            before = len(accepted)
            await wait_for(lambda b=before: len(accepted) >= b + 40, message="writes go through")
            if restart % 2:
                forwarder.cut()  # a restart as clients see it: connections dropped
            else:
                unavailable = statuses[503]
                await forwarder.close()  # down for a while: new connections refused too
                await wait_for(lambda u=unavailable: statuses[503] > u, message="503 while down")
                await forwarder.open()
        before = len(accepted)
        await wait_for(lambda: len(accepted) >= before + 40, message="writes after the last")
    finally:
        done.set()
        await asyncio.gather(*publishers)
    assert not bad, bad[:5]
    assert set(statuses) <= {202, 503}, statuses
    assert set(accepted) <= await event_ids(db)  # every 202 was stored
    async with db.acquire() as conn:  # and no `unavailable` was (it means: nothing stored)
        kept = await conn.fetch(
            "SELECT payload FROM events "
            "WHERE workspace_id = $1 AND payload::jsonb->'data'->>'id' = ANY($2)",
            ws.id,
            refused,
        )
    assert not kept, kept
    print(f"\n{dict(statuses)}; {len(accepted)} stored")


async def test_sigterm_while_the_database_is_away_names_the_results_it_loses(
    forwarder: Forwarder, db: Database, ws: Workspace, receiver: Receiver
) -> None:
    await webhooks_for(db, ws, receiver, 1)
    receiver.behaviours["/h1"] = receiver.hang
    await bulk_publish(db, ws, 5)
    fast = {"DISPATCHER_REQUEST_TIMEOUT": "3", "DISPATCHER_LEASE_MARGIN": "1",
            "DISPATCHER_SHUTDOWN_TIMEOUT": "1", "DISPATCHER_POLL_INTERVAL": "0.1"}  # fmt: skip
    proc = await start(forwarder.url, "worker", **fast)
    assert proc.stderr is not None
    await wait_for(lambda: len(receiver.requests) == 5, message="five attempts in flight")
    sent = {r.headers["webhook-id"] for r in receiver.requests}
    await forwarder.close()
    receiver.release.set()  # the answers come back while Postgres is away
    logged: list[dict[str, Any]] = []
    async with asyncio.timeout(30):  # until the worker has failed to write the results
        while not any(e.get("event") == "recorder.unavailable" for e in logged):
            line = await proc.stderr.readline()
            assert line, "the worker ended early"
            logged += json_lines(line)
    proc.send_signal(signal.SIGTERM)
    _, rest = await asyncio.wait_for(proc.communicate(), timeout=30)
    logged += json_lines(rest)
    assert proc.returncode == 0
    (lost,) = [e for e in logged if e["event"] == "engine.results_lost"]
    assert lost["level"] == "error"
    assert lost["count"] == 5 and set(lost["delivery_ids"]) == sent
    # What the receiver sees: the same deliveries again, with the same webhook-id, once the
    # leases of the stopped worker expire.
    await forwarder.open()
    again = await start(forwarder.url, "worker", **fast)
    try:
        await wait_for(lambda: len(receiver.requests) == 10, message="sent again")
    finally:
        again.send_signal(signal.SIGTERM)
        await asyncio.wait_for(again.wait(), timeout=30)
    assert Counter(r.headers["webhook-id"] for r in receiver.requests) == dict.fromkeys(sent, 2)
