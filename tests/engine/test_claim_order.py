"""The order of claims (docs/delivery.md): the endpoints with due work are visited in turn,
so that no backlog, however deep, stands in front of another endpoint's (or workspace's) work;
and a slot is free as soon as its request ends, not when its result is written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp.test_utils import TestClient

from dispatcher.store import queue
from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace, wait_for
from tests.engine.helpers import bulk_publish, slow_ok, subscribe
from tests.receiver import EngineFactory, Receiver

LOUD_ENDPOINTS = 4
LOUD_EVENTS = 200  # per endpoint: a backlog of 800 deliveries


async def loud_backlog(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database
) -> None:
    """A workspace whose endpoints answer in 50 ms and have 800 deliveries due: an engine of
    10 slots needs about 4 s for them."""
    for i in range(LOUD_ENDPOINTS):
        receiver.behaviours[f"/loud{i}"] = slow_ok(0.05)
        await subscribe(client, ws, receiver.url(f"/loud{i}"), maxConcurrency=5)
    await bulk_publish(db, ws, LOUD_EVENTS)


def loud_received(receiver: Receiver) -> int:
    return sum(len(receiver.at(f"/loud{i}")) for i in range(LOUD_ENDPOINTS))


async def test_a_backlog_in_one_workspace_does_not_delay_another_workspaces_fresh_events(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database,
    make_engine: EngineFactory, make_workspace: MakeWorkspace,
) -> None:  # fmt: skip
    await loud_backlog(client, ws, receiver, db)
    quiet = await make_workspace()
    await subscribe(client, quiet, receiver.url("/quiet"))
    # The engine's capacity (10) is less than the loud workspace's slots (20): it is full.
    await make_engine(max_in_flight=10, claim_batch_size=10)
    await wait_for(lambda: loud_received(receiver) >= 20, message="the loud backlog flows")
    for i in range(3):
        resp = await client.post(
            "/v1/events",
            json={"type": "contact.updated", "data": {"id": f"quiet-{i}"}},
            headers=quiet.headers,
        )
        assert resp.status == 202
    await wait_for(lambda: len(receiver.at("/quiet")) == 3, within=20, message="quiet events")
    # Delivered while most of the older backlog still waited (in due order, after all of it).
    total = LOUD_ENDPOINTS * LOUD_EVENTS
    assert loud_received(receiver) < total / 2, loud_received(receiver)


async def test_a_fifo_lane_moves_on_while_another_endpoint_has_a_backlog(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database,
    make_engine: EngineFactory, make_workspace: MakeWorkspace,
) -> None:  # fmt: skip
    """A lane's next head is due when its head settles: it is claimed at the endpoint's next
    turn, not behind every older due row of the database."""
    await loud_backlog(client, ws, receiver, db)
    other = await make_workspace()
    await subscribe(client, other, receiver.url("/lane"), ordering="fifo")
    await make_engine(max_in_flight=10, claim_batch_size=10)
    await wait_for(lambda: loud_received(receiver) >= 20, message="the loud backlog flows")
    for i in range(5):
        resp = await client.post(
            "/v1/events",
            json={"type": "contact.updated", "data": {"id": f"lane-{i}"}, "orderingKey": "k"},
            headers=other.headers,
        )
        assert resp.status == 202
    await wait_for(lambda: len(receiver.at("/lane")) == 5, within=20, message="the lane")
    order = [orjson.loads(r.body)["data"]["id"] for r in receiver.at("/lane")]
    assert order == [f"lane-{i}" for i in range(5)]
    assert loud_received(receiver) < LOUD_ENDPOINTS * LOUD_EVENTS / 2, loud_received(receiver)


async def test_each_endpoint_with_due_work_is_visited_in_one_turn_of_the_ring(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database
) -> None:
    """Claims of 5 rows; one endpoint with a backlog of 101, older than the one row each of two
    others: within one turn of the ring, each gets its slots' worth, whatever the due order."""
    deep = await subscribe(client, ws, receiver.url("/deep"), maxConcurrency=5)
    await bulk_publish(db, ws, 100)  # the deep one's backlog, oldest
    shallow = [await subscribe(client, ws, receiver.url(f"/s{i}")) for i in range(2)]
    await bulk_publish(db, ws, 1)  # one more each (and one more for the deep one)
    now = datetime.now(UTC)
    ring = queue.RING_START
    served: list[str] = []
    for _ in range(3):
        claim = await queue.claim(
            db, owner="engine-a", now=now, limit=5, default_concurrency=10, ring=ring
        )
        ring = claim.ring
        served += [row.webhook_id for row in claim.rows]
    assert served.count(deep["id"]) == 5  # its slots, however deep its backlog
    assert all(served.count(hook["id"]) == 1 for hook in shallow)  # each one's row


async def test_a_finished_attempt_frees_its_slot_before_its_record(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database
) -> None:
    """Leased rows count as requests in flight, but for those the claiming engine says are
    over (their results waiting to be written): their slots are free to that engine, and
    only to it."""
    hook = await subscribe(client, ws, receiver.url(), maxConcurrency=3)
    await bulk_publish(db, ws, 10)
    now = datetime.now(UTC)
    first = await queue.claim(db, owner="engine-a", now=now, limit=10, default_concurrency=10)
    assert len(first.rows) == 3
    # Every slot taken: nothing more, for this engine or another.
    for owner in ("engine-a", "engine-b"):
        claim = await queue.claim(db, owner=owner, now=now, limit=10, default_concurrency=10)
        assert claim.rows == []
    # Two of engine-a's requests ended, their results not written yet.
    finished = {hook["id"]: 2}
    other = await queue.claim(
        db, owner="engine-b", now=now, limit=10, default_concurrency=10, finishing=finished
    )
    assert other.rows == []  # engine-b has nothing finishing: the slots are not its to count
    again = await queue.claim(
        db, owner="engine-a", now=now, limit=10, default_concurrency=10, finishing=finished
    )
    assert len(again.rows) == 2
