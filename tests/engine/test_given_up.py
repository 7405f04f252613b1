"""Why a delivery was given up and why an endpoint was disabled, as an operator sees it: the
metrics (`dispatcher_deliveries_given_up_total`, `dispatcher_webhooks_disabled_total`) and
the webhook's `disabledReason`, for each case the domain decides and the store executes."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import REGISTRY

from tests.conftest import Workspace, wait_for
from tests.engine.helpers import only_delivery, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer

GIVEN_UP = "dispatcher_deliveries_given_up_total"
DISABLED = "dispatcher_webhooks_disabled_total"


def counts() -> dict[tuple[str, str], float]:
    """Every reason's count now (the registry is the process's: compare before and after)."""
    return {
        (name, reason): REGISTRY.get_sample_value(name, {"reason": reason}) or 0.0
        for name, reasons in (
            (GIVEN_UP, ("exhausted", "gone", "disabled", "expunged")),
            (DISABLED, ("failing", "gone")),
        )
        for reason in reasons
    }


def increase(before: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {key: value - before[key] for key, value in counts().items() if value != before[key]}


async def settled(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def done() -> bool:
        seen.update(await only_delivery(client, ws, hook_id))
        return bool(seen["attempts"] >= 1 and seen["status"] != "pending")

    await wait_for(done, message="the delivery settled")
    return seen


async def test_exhausted_and_gone_are_counted_and_disable_their_endpoints(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/failing"] = answer(500)
    receiver.behaviours["/gone"] = answer(410)
    failing = await subscribe(client, ws, receiver.url("/failing"))
    gone = await subscribe(client, ws, receiver.url("/gone"))
    await publish(client, ws)
    before = counts()
    # One attempt, and no patience: the first give-up disables a failing endpoint.
    await make_engine(retry_schedule=(), disable_after=0.0)
    exhausted = await settled(client, ws, failing["id"])
    answered_gone = await settled(client, ws, gone["id"])
    assert (exhausted["status"], exhausted["lastError"]) == ("failed", "HTTP 500")
    assert answered_gone["lastError"] == "HTTP 410 (gone: webhook disabled)"
    for hook, reason in ((failing, "failing"), (gone, "gone")):
        got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
        assert got["disabledReason"] == reason

    async def reported() -> bool:
        return len(increase(before)) == 4

    await wait_for(reported, message="both give-ups and both disables counted")
    assert increase(before) == {
        (GIVEN_UP, "exhausted"): 1,
        (GIVEN_UP, "gone"): 1,
        (DISABLED, "failing"): 1,
        (DISABLED, "gone"): 1,
    }


async def test_a_retry_given_up_because_its_webhook_was_disabled_in_flight(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    release = asyncio.Event()

    async def hang_then_fail(request: web.Request) -> web.StreamResponse:
        await asyncio.wait_for(release.wait(), timeout=30)
        return web.Response(status=500)

    receiver.behaviours["/hook"] = hang_then_fail
    hook = await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    before = counts()
    await make_engine(disable_after=0.0)  # would disable as failing, were it exhausted
    await wait_for(lambda: receiver.in_flight.get("/hook", 0) >= 1, message="in flight")
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": False}, headers=ws.headers)
    release.set()
    delivery = await settled(client, ws, hook["id"])
    assert delivery["lastError"] == "HTTP 500 (webhook disabled)"

    async def reported() -> bool:
        return bool(increase(before))

    await wait_for(reported, message="the give-up counted")
    # Not exhausted: the decision was a retry, given up by the record. Disabled by hand,
    # not by the engine.
    assert increase(before) == {(GIVEN_UP, "disabled"): 1}
    got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert got["disabledReason"] == "manual"
