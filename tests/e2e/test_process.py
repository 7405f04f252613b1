"""The service as users run it: `dispatcher serve` and `dispatcher worker` as processes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from typing import Any

import aiohttp
from standardwebhooks.webhooks import Webhook

from tests.conftest import wait_for
from tests.receiver import Receiver

# Every process a test starts; tests/conftest.py kills what a failed test left running.
STARTED: list[asyncio.subprocess.Process] = []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start(database_url: str, *args: str, **env: str) -> asyncio.subprocess.Process:
    full_env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DISPATCHER_ALLOWED_CIDRS": "127.0.0.0/8",
        "DISPATCHER_SANDBOX_DELAY": "0.05",
        "DISPATCHER_POLL_INTERVAL": "0.2",
        "DISPATCHER_LOG_FORMAT": "json",
        # Against a DATABASE_URL the demo is made only when asked for: these tests ask (its
        # key is how they get in); a test may still turn it off.
        "DISPATCHER_DEMO": "on",
        **env,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=full_env,
    )  # fmt: skip
    STARTED.append(proc)
    return proc


async def read_until(stream: asyncio.StreamReader, pattern: str, within: float = 60) -> str:
    seen = []
    async with asyncio.timeout(within):
        while True:
            line = (await stream.readline()).decode()
            seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match.group(1)
            assert line, "process ended: " + "".join(seen)


async def until_ready(http: aiohttp.ClientSession, base: str) -> None:
    """Wait (30 s at most) until the process at `base` answers GET /readyz with 200."""

    async def ready() -> bool:
        try:
            async with http.get(f"{base}/readyz") as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False

    await wait_for(ready, within=30, message=f"{base}/readyz")


async def stop(proc: asyncio.subprocess.Process) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


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
