"""A subscription's own policy in the engine: its `timeoutSeconds` bounds its attempts, its
`retrySchedule` times its retries and its giving up, and a PATCH applies from the next
attempt (both are read at the claim)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.settings import DEFAULT_RETRY_SCHEDULE
from tests.clock import FakeClock
from tests.conftest import Workspace
from tests.engine.helpers import attempted, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer


async def test_the_endpoints_timeout_bounds_its_attempts(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/hook"] = receiver.hang
    hook = await subscribe(client, ws, receiver.url(), timeoutSeconds=0.5)
    await publish(client, ws)
    await make_engine(request_timeout=10.0)
    delivery = await attempted(client, ws, hook["id"])
    assert delivery["lastError"] == "timeout after 0.5s"
    assert delivery["responseStatus"] is None
    assert 500 <= delivery["responseMs"] < 5000  # its own 0.5 s, not the global 10 s
    assert delivery["status"] == "pending"


async def test_the_endpoints_schedule_gives_up_after_its_attempts(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url(), retrySchedule=[1])
    await publish(client, ws)
    engine = await make_engine(disable_after=10**8)  # the global schedule: 7 retries
    delivery = await attempted(client, ws, hook["id"], 1, engine)
    next_at = datetime.fromisoformat(delivery["nextAttemptAt"])
    assert round((next_at - clock.now()).total_seconds()) == 1
    clock.set(next_at)
    delivery = await attempted(client, ws, hook["id"], 2, engine)
    assert (delivery["status"], delivery["nextAttemptAt"]) == ("failed", None)
    assert len(receiver.requests) == 2


async def test_a_patch_applies_to_the_next_attempt(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    engine = await make_engine(request_timeout=10.0, disable_after=10**8)
    delivery = await attempted(client, ws, hook["id"], 1, engine)
    next_at = datetime.fromisoformat(delivery["nextAttemptAt"])
    assert round((next_at - clock.now()).total_seconds()) == DEFAULT_RETRY_SCHEDULE[0]

    change = {"timeoutSeconds": 0.5, "retrySchedule": [1]}
    resp = await client.patch(f"/v1/webhooks/{hook['id']}", json=change, headers=ws.headers)
    assert resp.status == 200, await resp.text()
    receiver.behaviours["/hook"] = receiver.hang
    clock.set(next_at)
    delivery = await attempted(client, ws, hook["id"], 2, engine)
    assert delivery["lastError"] == "timeout after 0.5s"  # the new timeout ...
    assert (delivery["status"], delivery["nextAttemptAt"]) == ("failed", None)  # ... schedule
