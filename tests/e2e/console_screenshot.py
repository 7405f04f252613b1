"""Take the README's screenshot of the console (docs/console.png) from a real run.

    DATABASE_URL=postgresql://... python -m tests.e2e.console_screenshot [docs/console.png]

Starts `dispatcher serve` on a database of its own (created on the server DATABASE_URL names,
dropped afterwards; without DATABASE_URL, an embedded Postgres in a temporary folder), a
receiver on loopback with a healthy and a failing endpoint, and publishes sample data through
the API: webhooks, events, a message. The engine delivers it for real. So that the chart has
an hour to show, the minute rollups of the last hour are filled with sample attempts through
the store's own `record_batch` (the only data not made by the engine). Then headless Chromium
signs in and photographs the webhooks page at 1280x800.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web
from selenium.webdriver.common.by import By

from dispatcher.domain.outcomes import AttemptOutcome, AttemptResult
from dispatcher.store import stats
from dispatcher.store.database import Database
from dispatcher.store.embedded import start_embedded, stop_embedded
from tests.browser import DESKTOP, Browser, start_chromium
from tests.conftest import wait_for
from tests.databases import with_database
from tests.processes import free_port, read_until, start, stop
from tests.records import attempt_result

DEFAULT_OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "console.png"


@asynccontextmanager
async def scratch_database() -> AsyncIterator[str]:
    server = os.environ.get("DATABASE_URL")
    embedded = None
    if server is None:
        folder = tempfile.mkdtemp(prefix="dispatcher-screenshot-")
        server, embedded = start_embedded(Path(folder) / "pgdata")
    name = f"dispatcher_screenshot_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield with_database(server, name)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
        if embedded is not None:
            stop_embedded(embedded)


@asynccontextmanager
async def receiver() -> AsyncIterator[int]:
    """/crm answers 200 after a few ms; /billing 503, as an endpoint with an outage does."""

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        if request.path == "/billing":
            return web.Response(status=503, text='{"error": "upstream unavailable"}')
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


async def seed(base: str, key: str, receiver_port: int) -> list[dict[str, Any]]:
    """Sample subscriptions (one disabled) and traffic through the API; returns the two
    webhooks that receive it."""
    headers = {"Authorization": f"Bearer {key}"}
    hooks: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(base_url=base, headers=headers) as http:

        async def post(path: str, body: dict[str, Any]) -> Any:
            async with http.post(path, json=body) as resp:
                assert resp.status < 300, await resp.text()
                return await resp.json()

        receiver_url = f"http://127.0.0.1:{receiver_port}"
        # Made first, listed last (newest first): the failing endpoint leads the page.
        paused = await post(
            "/v1/webhooks",
            {"url": receiver_url + "/analytics", "events": ["call.missed"], "name": "Analytics"},
        )
        async with http.patch(f"/v1/webhooks/{paused['id']}", json={"enabled": False}) as resp:
            assert resp.status == 200, await resp.text()
        for name, path, events in (
            ("CRM sync", "/crm", ["contact.updated", "message.received", "call.missed"]),
            ("Billing", "/billing", ["contact.updated", "call.missed"]),
        ):
            hooks.append(
                await post("/v1/webhooks", {"url": receiver_url + path, "events": events,
                                            "name": name})
            )  # fmt: skip
        for n in range(8):
            await post("/v1/events", {"type": "contact.updated",
                                      "data": {"id": f"CT{n}", "plan": "pro"}})  # fmt: skip
        await post("/v1/inbound/calls", {"from": "+15555550177", "to": "+15555550100",
                                         "status": "missed"})  # fmt: skip

        async def settled() -> bool:
            for hook in hooks:
                async with http.get(f"/v1/webhooks/{hook['id']}/deliveries") as resp:
                    page = await resp.json()
                if any(d["attempts"] == 0 for d in page["data"]):
                    return False
            return True

        await wait_for(settled, within=30, message="the sample deliveries attempted")
    return hooks


async def fill_the_last_hour(database_url: str, hooks: list[dict[str, Any]]) -> None:
    """Sample attempts over the last hour, minute by minute: the healthy endpoint steady, the
    failing one healthy until its outage some twenty minutes ago."""
    rand = random.Random(16)
    now = datetime.now(UTC)
    crm, billing = hooks[0]["id"], hooks[1]["id"]
    attempts: list[AttemptResult] = []
    for back in range(2, 60):
        minute = now - timedelta(minutes=back)
        for _ in range(rand.randint(6, 12)):
            attempts.append(attempt_result(crm, minute, AttemptOutcome.SUCCESS, 200,
                                           rand.randint(20, 90)))  # fmt: skip
        outage = back < 22
        for _ in range(rand.randint(3, 7)):
            if outage:
                outcome = rand.choice([AttemptOutcome.HTTP_ERROR] * 4 + [AttemptOutcome.TIMEOUT])
                status = 503 if outcome == AttemptOutcome.HTTP_ERROR else None
            else:
                outcome, status = AttemptOutcome.SUCCESS, 200
            attempts.append(attempt_result(billing, minute, outcome, status, rand.randint(40, 300)))
    db = await Database.open(database_url, min_size=1, max_size=1)
    try:
        async with db.transaction() as conn:
            await stats.record_batch(conn, attempts, [], "sample-history")
    finally:
        await db.close()


def photograph(base: str, key: str, output: Path, hooks: list[dict[str, Any]]) -> None:
    driver = start_chromium()
    try:
        browser = Browser(driver, base)
        browser.viewport(*DESKTOP)
        browser.open()
        browser.wait(lambda d: d.find_element(By.ID, "api-key"), "sign-in").send_keys(key + "\n")
        charts = ", ".join(f'[data-webhook="{hook["id"]}"] svg.chart' for hook in hooks)
        browser.wait(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, charts)) == len(hooks), "the charts"
        )
        output.write_bytes(driver.get_screenshot_as_png())
    finally:
        driver.quit()


async def main(output: Path) -> None:
    async with scratch_database() as database_url, receiver() as receiver_port:
        port = free_port()
        proc = await start(database_url, "serve", "--port", str(port),
                           DISPATCHER_RETRY_SCHEDULE="600")  # fmt: skip
        try:
            assert proc.stdout is not None
            key = await read_until(proc.stdout, r"API key: (dk_\S+)")
            base = f"http://127.0.0.1:{port}"
            hooks = await seed(base, key, receiver_port)
            await fill_the_last_hour(database_url, hooks)
            await asyncio.to_thread(photograph, base, key, output, hooks)
        finally:
            await stop(proc)
    print(f"wrote {output}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT))
