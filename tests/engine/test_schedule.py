"""The retry schedule to the end, and the rule that disables failing endpoints, on a clock."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.settings import DEFAULT_RETRY_SCHEDULE
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import (
    attempted,
    deliveries,
    only_delivery,
    publish,
    subscribe,
    wait_recorded,
)
from tests.receiver import EngineFactory, Receiver, answer


async def test_full_default_schedule_ends_failed(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    engine = await make_engine(disable_after=10**8)
    delivery = await attempted(client, ws, hook["id"], 1, engine)
    gaps = []
    for n, _delay in enumerate(DEFAULT_RETRY_SCHEDULE, start=2):
        next_at = datetime.fromisoformat(delivery["nextAttemptAt"])
        gaps.append(round((next_at - clock.now()).total_seconds()))
        clock.set(next_at)
        delivery = await attempted(client, ws, hook["id"], n, engine)
    assert gaps == [round(d) for d in DEFAULT_RETRY_SCHEDULE]
    assert delivery["attempts"] == 8
    assert delivery["status"] == "failed"
    assert delivery["nextAttemptAt"] is None
    assert delivery["lastError"] == "HTTP 500"
    assert len(receiver.requests) == 8
    # Given up, never tried again however long we wait.
    clock.advance(10 * 86400)
    engine.poke()
    assert (await only_delivery(client, ws, hook["id"]))["attempts"] == 8


async def test_custom_schedule_and_jitter_bounds(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    from dispatcher.domain.retry import RetryPolicy

    policy = RetryPolicy((10.0, 20.0))
    assert policy.max_attempts == 3
    assert policy.delay_after(1, rand=lambda: 0.0) == 8.0
    assert policy.delay_after(1, rand=lambda: 1.0) == 12.0
    assert policy.delay_after(3) is None
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    engine = await make_engine(retry_schedule=(1.0,), disable_after=10**8)
    await attempted(client, ws, hook["id"], 1, engine)
    clock.advance(2)
    delivery = await attempted(client, ws, hook["id"], 2, engine)
    assert delivery["status"] == "failed"


async def test_failing_endpoint_is_disabled_after_five_days(
    db: Database,
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws, "first")
    engine = await make_engine(retry_schedule=(3600.0,))
    await attempted(client, ws, hook["id"], 1, engine)
    # The first delivery is given up an hour later: failing for an hour, not five days.
    clock.advance(3601)
    await attempted(client, ws, hook["id"], 2, engine)
    got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert got["disabledAt"] is None
    # Five days after the first failure, the next delivery given up disables the endpoint.
    clock.advance(5 * 86400)
    await publish(client, ws, "second")
    waiting = await publish(client, ws, "third")

    async def disabled() -> bool:
        engine.poke()
        got = await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)
        return bool((await got.json())["disabledReason"] == "failing")

    clock.advance(1)
    engine.poke()
    await wait_recorded(db, 4)
    clock.advance(3601)
    await wait_for(disabled, message="disabled as failing")
    rows = await deliveries(client, ws, hook["id"])
    assert {d["status"] for d in rows} == {"failed"}
    assert waiting["id"]  # its delivery was given up with the rest


async def test_a_success_resets_the_failure_clock(
    db: Database,
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url())
    engine = await make_engine(retry_schedule=(60.0,))
    await publish(client, ws, "a")
    await wait_recorded(db, 1)
    clock.advance(4 * 86400)
    # One success in between...
    del receiver.behaviours["/hook"]
    await publish(client, ws, "b")
    engine.poke()
    await wait_recorded(db, 3)  # the retry of a, and b
    receiver.behaviours["/hook"] = answer(500)
    clock.advance(2 * 86400)
    await publish(client, ws, "c")
    engine.poke()
    await wait_recorded(db, 4)
    clock.advance(61)
    engine.poke()
    await wait_for(lambda: len(receiver.requests) >= 5, message="c given up")

    async def c_failed() -> bool:
        rows = await deliveries(client, ws, hook["id"])
        return any(d["payload"]["data"]["id"] == "c" and d["status"] == "failed" for d in rows)

    await wait_for(c_failed)
    # ...so six days after the first failure, the endpoint has failed for two days only.
    got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert got["disabledAt"] is None
