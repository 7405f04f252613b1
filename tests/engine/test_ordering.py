"""Ordered delivery: a fifo subscription attempts the deliveries of one ordering lane one at a
time, in the order of their events, across engines; lanes run side by side.

Two engines on separate pools share the test's clock: a retry becomes due when the test moves
the clock, so the order is checked without waiting out the schedule.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.engine.worker import Engine
from dispatcher.settings import Settings
from dispatcher.store import maintenance
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import deliveries, get_json, subscribe
from tests.receiver import Receiver

PATH = "/fifo"
Engines = Callable[..., Awaitable[list[Engine]]]


@pytest.fixture
async def engines(
    database_url: str, settings: Settings, clock: FakeClock
) -> AsyncIterator[Engines]:
    """Start engines, each on a pool of its own (as separate replicas), on the test's clock."""
    started: list[tuple[Engine, Database]] = []

    async def start(n: int = 2, **overrides: Any) -> list[Engine]:
        for _ in range(n):
            pool = await Database.open(database_url, min_size=1, max_size=4)
            engine = Engine(pool, settings.with_changes(**overrides), clock, rand=lambda: 0.5)
            await engine.start()
            started.append((engine, pool))
        return [engine for engine, _ in started]

    yield start
    for engine, pool in started:
        if engine.running:
            await engine.stop()
        await pool.close()


def event_ids(receiver: Receiver, path: str = PATH) -> list[str]:
    """The `data.id` of each request to `path`, in the order they arrived."""
    return [orjson.loads(r.body)["data"]["id"] for r in receiver.at(path)]


def by_data_id(answers: dict[str, list[int]], hang: set[str] | None = None) -> Any:
    """Answer each event (by `data.id`) with its list of statuses in turn (the last one from
    then on; 200 for events not listed); hold the requests of `hang` until released."""
    seen: Counter[str] = Counter()

    async def respond(request: web.Request) -> web.StreamResponse:
        data_id = orjson.loads(await request.read())["data"]["id"]
        statuses = answers.get(data_id, [200])
        status = statuses[min(seen[data_id], len(statuses) - 1)]
        seen[data_id] += 1
        if hang and data_id in hang:
            with contextlib.suppress(TimeoutError):
                await wait_for(lambda: data_id not in hang, within=30)
        return web.Response(status=status)

    return respond


async def publish(
    client: TestClient[Any, Any], ws: Workspace, data_id: str, key: str | None = None
) -> Any:
    body: dict[str, Any] = {"type": "contact.updated", "data": {"id": data_id}}
    if key is not None:
        body["orderingKey"] = key
    resp = await client.post("/v1/events", json=body, headers=ws.headers)
    assert resp.status == 202, await resp.text()
    return await resp.json()


async def delivery_of(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, data_id: str
) -> Any:
    (found,) = [
        d for d in await deliveries(client, ws, hook_id) if d["payload"]["data"]["id"] == data_id
    ]
    return found


async def poke_until(engines: list[Engine], condition: Callable[[], Any], message: str) -> None:
    """Wait for `condition`, waking every engine on each look (retries the clock made due)."""

    async def reached() -> bool:
        for engine in engines:
            engine.poke()
        result = condition()
        if isinstance(result, Awaitable):
            result = await result
        return bool(result)

    await wait_for(reached, message=message)


async def test_fifo_order_holds_with_two_engines_while_the_head_fails_twice(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, engines: Engines,
    clock: FakeClock,
) -> None:  # fmt: skip
    receiver.behaviours[PATH] = by_data_id({"E1": [500, 500, 200]})
    hook = await subscribe(client, ws, receiver.url(PATH), ordering="fifo")
    assert hook["ordering"] == "fifo"
    names = [f"E{i}" for i in range(1, 11)]
    for name in names:
        await publish(client, ws, name, key="CV1")
    running = await engines(2, claim_batch_size=4)
    for attempt in (1, 2):

        async def failed(n: int = attempt) -> bool:
            return bool((await delivery_of(client, ws, hook["id"], "E1"))["attempts"] >= n)

        await poke_until(running, failed, f"the head's attempt {attempt} recorded")
        # The lane holds while its head is retried: nothing behind it was attempted.
        for engine in running:
            await engine.claim_once()
        assert event_ids(receiver) == ["E1"] * attempt
        clock.advance(3600)  # past the retry
    await poke_until(running, lambda: len(receiver.at(PATH)) == 12, "the lane drained")
    assert event_ids(receiver) == ["E1", "E1", *names]
    assert receiver.peak[PATH] == 1  # one at a time

    async def all_delivered() -> bool:
        rows = await deliveries(client, ws, hook["id"])
        return all(d["status"] == "delivered" for d in rows)

    await wait_for(all_delivered, message="every delivery recorded")
    rows = {d["payload"]["data"]["id"]: d for d in await deliveries(client, ws, hook["id"])}
    assert {name: rows[name]["attempts"] for name in names} == {
        name: 3 if name == "E1" else 1 for name in names
    }


async def test_lanes_run_side_by_side_and_events_without_a_key_share_one(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, engines: Engines,
) -> None:  # fmt: skip
    held = {"A1", "B1", "N1"}
    receiver.behaviours[PATH] = by_data_id({}, hang=held)
    hook = await subscribe(client, ws, receiver.url(PATH), ordering="fifo", maxConcurrency=10)
    for name, key in (("A1", "A"), ("B1", "B"), ("N1", None), ("A2", "A"), ("N2", None),
                      ("B2", "B"), ("A3", "A")):  # fmt: skip
        await publish(client, ws, name, key)
    running = await engines(2)
    # One in flight per lane: A, B, and the lane of the events without a key.
    await wait_for(lambda: receiver.in_flight.get(PATH, 0) == 3, message="three lanes at once")
    for engine in running:
        await engine.claim_once()
    assert sorted(event_ids(receiver)) == ["A1", "B1", "N1"]
    # A test delivery is in no lane: it goes while every lane is held.
    assert (await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)).status == 202
    await wait_for(lambda: len(receiver.at(PATH)) == 4, message="the test delivery sent")
    assert receiver.peak[PATH] == 4
    held.clear()
    await poke_until(running, lambda: len(receiver.at(PATH)) == 8, "every lane drained")
    order = event_ids(receiver)
    for lane in (["A1", "A2", "A3"], ["B1", "B2"], ["N1", "N2"]):
        assert [name for name in order if name in lane] == lane


async def test_a_retried_delivery_goes_to_the_end_of_its_lane(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, engines: Engines,
) -> None:  # fmt: skip
    held = {"E2"}
    receiver.behaviours[PATH] = by_data_id({"E1": [500, 200]}, hang=held)
    hook = await subscribe(client, ws, receiver.url(PATH), ordering="fifo")
    for name in ("E1", "E2", "E3"):
        await publish(client, ws, name, key="CV1")
    running = await engines(2, retry_schedule=())  # one attempt: a failure gives up

    async def given_up() -> bool:
        return bool((await delivery_of(client, ws, hook["id"], "E1"))["status"] == "failed")

    await poke_until(running, given_up, "E1 given up")
    await wait_for(lambda: receiver.in_flight.get(PATH, 0) == 1, message="E2 in flight")
    # E1 again, now that E2 is in flight and E3 waits behind it: it goes after E3.
    first = await delivery_of(client, ws, hook["id"], "E1")
    retried = await client.post(
        f"/v1/webhooks/{hook['id']}/deliveries/{first['id']}/retry", headers=ws.headers
    )
    assert retried.status == 202, await retried.text()
    for engine in running:
        await engine.claim_once()
    assert event_ids(receiver) == ["E1", "E2"]
    held.clear()
    await poke_until(running, lambda: len(receiver.at(PATH)) == 4, "the lane drained")
    assert event_ids(receiver) == ["E1", "E2", "E3", "E1"]
    assert receiver.peak[PATH] == 1


async def test_switching_fifo_to_none_releases_the_waiting_deliveries(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, engines: Engines,
) -> None:  # fmt: skip
    held = {"E1"}
    receiver.behaviours[PATH] = by_data_id({}, hang=held)
    hook = await subscribe(client, ws, receiver.url(PATH), ordering="fifo")
    for i in range(1, 6):
        await publish(client, ws, f"E{i}", key="CV1")
    running = await engines(2)
    await wait_for(lambda: receiver.in_flight.get(PATH, 0) == 1, message="the head in flight")
    for engine in running:
        await engine.claim_once()
    assert event_ids(receiver) == ["E1"]
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"ordering": None}, headers=ws.headers
    )
    assert resp.status == 200 and (await resp.json())["ordering"] == "none"
    # The four waiting ones go at once, while the head is still held.
    await poke_until(running, lambda: len(receiver.at(PATH)) == 5, "the waiting released")
    assert receiver.in_flight[PATH] == 1 and "E1" in held
    held.clear()
    await wait_for(lambda: receiver.in_flight[PATH] == 0, message="the head answered")

    async def delivered() -> bool:
        rows = await deliveries(client, ws, hook["id"])
        return all(d["status"] == "delivered" and d["attempts"] == 1 for d in rows)

    await poke_until(running, delivered, "all delivered once")


async def test_switching_none_to_fifo_orders_what_was_not_attempted(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, engines: Engines,
) -> None:  # fmt: skip
    hook = await subscribe(client, ws, receiver.url(PATH))
    assert hook["ordering"] == "none"
    names = [f"E{i}" for i in range(1, 9)]
    for name in names:
        await publish(client, ws, name, key="CV1" if name != "E4" else "CV2")
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"ordering": "fifo"}, headers=ws.headers
    )
    assert resp.status == 200 and (await resp.json())["ordering"] == "fifo"
    running = await engines(2)
    await poke_until(running, lambda: len(receiver.at(PATH)) == 8, "all sent")
    assert [n for n in event_ids(receiver) if n != "E4"] == [n for n in names if n != "E4"]


async def test_the_event_shows_its_ordering_key(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    keyed = await publish(client, ws, "CT1", key="order-42 ✓")
    plain = await publish(client, ws, "CT2")
    assert "orderingKey" not in keyed  # the envelope, as every delivery carries it
    got = await get_json(client, ws, f"/v1/events/{keyed['id']}")
    assert got["orderingKey"] == "order-42 ✓" and got["data"] == {"id": "CT1"}
    listed = (await get_json(client, ws, "/v1/events"))["data"]
    assert [(e["id"], e["orderingKey"]) for e in listed] == [
        (plain["id"], None),
        (keyed["id"], "order-42 ✓"),
    ]


async def test_a_lane_whose_head_was_given_up_on_disable_moves_on(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, engines: Engines,
    db: Database, clock: FakeClock,
) -> None:  # fmt: skip
    receiver.behaviours[PATH] = by_data_id({"E1": [500]})
    hook = await subscribe(client, ws, receiver.url(PATH), ordering="fifo")
    for name in ("E1", "E2"):
        await publish(client, ws, name, key="CV1")
    running = await engines(1)

    async def retrying() -> bool:
        return bool((await delivery_of(client, ws, hook["id"], "E1"))["attempts"] == 1)

    await poke_until(running, retrying, "the head failed once")
    # Disabled while its head waits for a retry: the whole lane is given up, the lane's row
    # is left naming a head that is gone.
    for enabled in (False, True):
        resp = await client.patch(
            f"/v1/webhooks/{hook['id']}", json={"enabled": enabled}, headers=ws.headers
        )
        assert resp.status == 200
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM delivery_lanes") == 1
    # A new event of the lane: the first claim that meets it names it the head.
    await publish(client, ws, "E3", key="CV1")
    await poke_until(running, lambda: "E3" in event_ids(receiver), "E3 sent")
    assert event_ids(receiver) == ["E1", "E3"]
    # And the maintenance loop tidies a lane whose head is gone with nobody behind it.
    async with db.acquire() as conn:
        await conn.execute("DELETE FROM delivery_queue")
        await conn.execute("INSERT INTO delivery_lanes VALUES ($1, 'gone', 'WDgone')", hook["id"])
    report = await maintenance.run_maintenance(db, clock.now(), retention_days=30)
    assert report.ran
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM delivery_lanes") == 0


async def test_an_expunged_head_moves_its_lane_on_at_once(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, engines: Engines,
) -> None:  # fmt: skip
    """The head waits for a retry; expunging its event gives it up, and the next delivery of
    the lane goes without waiting for the maintenance loop."""
    receiver.behaviours[PATH] = by_data_id({"E1": [500]})
    hook = await subscribe(client, ws, receiver.url(PATH), ordering="fifo")
    first = await publish(client, ws, "E1", key="CV1")
    await publish(client, ws, "E2", key="CV1")
    running = await engines(1)

    async def retrying() -> bool:
        return bool((await delivery_of(client, ws, hook["id"], "E1"))["attempts"] == 1)

    await poke_until(running, retrying, "the head failed once")
    for engine in running:
        await engine.claim_once()
    assert event_ids(receiver) == ["E1"]  # E2 waits behind its head
    resp = await client.post(f"/v1/events/{first['id']}/expunge", headers=ws.headers)
    assert resp.status == 200, await resp.text()
    await poke_until(running, lambda: "E2" in event_ids(receiver), "E2 sent")
    assert event_ids(receiver) == ["E1", "E2"]
    erased = [d for d in await deliveries(client, ws, hook["id"]) if d["expunged"]]
    assert [(d["status"], d["lastError"]) for d in erased] == [("failed", "expunged")]
