"""The service as users run it: `dispatcher serve` and `dispatcher worker` as processes."""

from __future__ import annotations

from typing import Any

import aiohttp
from standardwebhooks.webhooks import Webhook

from tests.conftest import wait_for
from tests.processes import free_port, read_until, start, stop, until_ready
from tests.receiver import Receiver


async def test_serve_end_to_end_and_sigterm(database_url: str, receiver: Receiver) -> None:
    port, metrics_port = free_port(), free_port()
    proc = await start(
        database_url, "serve", "--port", str(port), DISPATCHER_METRICS_PORT=str(metrics_port)
    )
    try:
        assert proc.stdout is not None
        key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {key}"}
        async with aiohttp.ClientSession() as http:
            await until_ready(http, base)
            async with http.post(
                f"{base}/v1/webhooks",
                json={"url": receiver.url(), "events": ["message.delivered"]},
                headers=headers,
            ) as resp:
                hook: dict[str, Any] = await resp.json()
            async with http.post(
                f"{base}/v1/messages",
                json={"from": "+15555550100", "to": "+15555550123", "text": "Hello!"},
                headers=headers,
            ) as resp:
                assert resp.status == 202
                message = await resp.json()
            await wait_for(lambda: len(receiver.requests) == 1, within=20, message="webhook")
            event = Webhook(hook["secret"]).verify(
                receiver.requests[0].body, receiver.requests[0].headers
            )
            assert event["type"] == "message.delivered"
            assert event["data"]["id"] == message["id"]
            async with http.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp:
                assert "dispatcher_delivery_attempts_total" in await resp.text()
    finally:
        code, err = await stop(proc)
    assert code == 0, err
    assert "engine.stopped" in err and key not in err


async def test_worker_process_stops_cleanly(database_url: str) -> None:
    proc = await start(database_url, "worker")
    assert proc.stderr is not None
    await read_until(proc.stderr, r'"(engine\.started)"')
    code, err = await stop(proc)
    assert code == 0, err
    assert "engine.stopped" in err
