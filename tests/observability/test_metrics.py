"""/metrics after real traffic: the values move, names follow conventions, promtool agrees."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher import monitor
from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.api.health import ReadinessCheck
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import publish, subscribe, wait_recorded
from tests.observability.prometheus import sample, scrape
from tests.receiver import EngineFactory, Receiver, answer


async def test_metrics_move_with_traffic(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database, clock: FakeClock,
) -> None:  # fmt: skip
    before = await scrape(client)
    receiver.behaviours["/bad"] = answer(500)
    good = await subscribe(client, ws, receiver.url("/good"))
    await subscribe(client, ws, receiver.url("/bad"))
    await client.get(f"/v1/webhooks/{good['id']}", headers=ws.headers)
    await publish(client, ws)
    await make_engine()
    await wait_recorded(db, 2)
    await monitor.refresh_once(db, clock, lambda: True)
    after = ""

    async def recorded_in_metrics() -> bool:
        # The recorder observes its metrics just after its transaction commits.
        nonlocal after
        after = await scrape(client)
        name = "dispatcher_record_duration_seconds_count"
        return sample(after, name) > sample(before, name)

    await wait_for(recorded_in_metrics)

    def moved(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert moved("dispatcher_delivery_attempts_total", outcome="success", status_class="2xx") >= 1
    assert (
        moved("dispatcher_delivery_attempts_total", outcome="http_error", status_class="5xx") >= 1
    )
    assert moved("dispatcher_delivery_attempt_duration_seconds_count", outcome="success") >= 1
    assert moved("dispatcher_delivery_lag_seconds_count") >= 2
    assert moved("dispatcher_delivery_end_to_end_seconds_count") >= 1
    assert moved("dispatcher_events_published_total", source="api", type="contact.updated") == 1
    assert moved("dispatcher_deliveries_fanned_out_total") == 2
    assert moved("dispatcher_claim_batch_size_count") >= 1
    assert moved("dispatcher_record_duration_seconds_count") >= 1
    route = "/v1/webhooks/{webhook_id}"
    assert moved("dispatcher_http_requests_total", route=route, method="GET", status="200") == 1
    assert moved("dispatcher_http_request_duration_seconds_count", route=route, method="GET") == 1
    assert sample(after, "dispatcher_ready") == 1
    assert sample(after, "dispatcher_db_pool_connections") >= 1
    # Bounded labels: no ids and no URLs anywhere in the exposition.
    assert good["id"] not in after
    assert "127.0.0.1" not in after
    assert "WD" not in after.replace("WD…", "")


async def test_queue_gauges(
    client: TestClient[Any, Any], ws: Workspace, db: Database, clock: FakeClock
) -> None:
    await subscribe(client, ws, "https://hooks.example.com/")
    await publish(client, ws, "a")
    await publish(client, ws, "b")
    clock.advance(30)
    await monitor.refresh_once(db, clock, lambda: False)
    text = await scrape(client)
    assert sample(text, "dispatcher_queue_due_deliveries") == 2
    assert 29 < sample(text, "dispatcher_queue_oldest_due_age_seconds") < 40
    assert sample(text, "dispatcher_ready") == 0  # the engine is not running


async def test_promtool_accepts_a_real_scrape(
    client: TestClient[Any, Any], ws: Workspace, tmp_path: Any
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (.ci/run installs Debian's prometheus)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    await client.get("/v1/messages", headers=ws.headers)
    text = await scrape(client)
    proc = await asyncio.create_subprocess_exec(
        promtool, "check", "metrics",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(text.encode()), timeout=30)
    assert proc.returncode == 0, out.decode()
    assert out.decode().strip() == "", out.decode()


async def test_readiness_reports_a_stopped_engine(services: Services) -> None:
    app = create_app(services)
    app[ReadinessCheck] = [("engine", lambda: False)]
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        resp = await client.get("/readyz")
        assert resp.status == 503
        body = await resp.json()
        assert body["checks"]["engine"] is False and body["status"] == "unavailable"
        assert (await client.get("/healthz")).status == 200


async def test_in_flight_gauge_returns_to_zero(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory
) -> None:
    receiver.behaviours["/hook"] = receiver.hang
    await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    await make_engine()
    await wait_for(lambda: receiver.in_flight.get("/hook") == 1)
    assert sample(await scrape(client), "dispatcher_delivery_requests_in_flight") == 1
    receiver.release.set()
    await wait_for(lambda: receiver.in_flight.get("/hook") == 0)

    async def drained() -> bool:
        return sample(await scrape(client), "dispatcher_delivery_requests_in_flight") == 0

    await wait_for(drained)
