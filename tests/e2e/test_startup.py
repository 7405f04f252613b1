"""Starting `serve` and `worker` as users do, including before Postgres is there."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.errors import ConfigurationError
from dispatcher.settings import Settings
from tests.chaos.forwarder import forwarding
from tests.conftest import wait_for
from tests.processes import free_port, log_events, read_until, start, stop


async def get(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, Any, Any]:
    """(status, body: parsed JSON or text, headers)."""
    async with http.get(url, **kwargs) as resp:
        text = await resp.text()
        body = orjson.loads(text) if resp.content_type == "application/json" else text
        return resp.status, body, resp.headers


async def finish(proc: asyncio.subprocess.Process) -> tuple[int, str]:
    """SIGTERM if still running (a failed test must not hide its cause behind this)."""
    if proc.returncode is None:
        return await stop(proc)
    _, err = await proc.communicate()
    return proc.returncode, err.decode()


async def test_serve_waits_for_the_database_answering_probes_meanwhile(database_url: str) -> None:
    port, metrics_port = free_port(), free_port()
    async with forwarding(database_url, opened=False) as postgres:
        proc = await start(postgres.url, "serve", "--port", str(port),
                           DISPATCHER_METRICS_PORT=str(metrics_port),
                           DISPATCHER_STARTUP_TIMEOUT="60")  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as http:

                async def alive() -> bool:
                    assert proc.returncode is None, "serve exited while Postgres was down"
                    try:
                        return (await get(http, f"{base}/healthz"))[0] == 200
                    except aiohttp.ClientError:
                        return False

                await wait_for(alive, within=30, message="/healthz while Postgres is down")
                status, body, _ = await get(http, f"{base}/readyz")
                assert status == 503
                assert body["status"] == "unavailable" and not any(body["checks"].values())
                status, body, headers = await get(http, f"{base}/v1/messages")
                assert (status, body["code"]) == (503, "unavailable")
                assert headers["Retry-After"] == "1"
                assert (await get(http, f"{base}/metrics"))[0] == 404  # on its own port only
                status, text, _ = await get(http, f"http://127.0.0.1:{metrics_port}/metrics")
                assert status == 200 and "dispatcher_ready 0.0" in text
                await postgres.open()  # Postgres is back
                assert proc.stdout is not None
                key = await read_until(proc.stdout, r"API key: (dk_\S+)", within=30)

                async def ready() -> bool:
                    return (await get(http, f"{base}/readyz"))[0] == 200

                await wait_for(ready, within=30, message="/readyz once Postgres is back")
                auth = {"Authorization": f"Bearer {key}"}
                assert (await get(http, f"{base}/v1/messages", headers=auth))[0] == 200
                status, body, _ = await get(http, f"{base}/metrics")
                assert status == 404 and body["code"] == "not_found"
        finally:
            code, err = await finish(proc)
    assert code == 0, err
    assert "Traceback" not in err
    waiting = [e for e in log_events(err) if e["event"] == "database.waiting"]
    assert waiting and "postgresql://" in waiting[0]["url"]


async def test_worker_waits_for_the_database(database_url: str) -> None:
    async with forwarding(database_url, opened=False) as postgres:
        proc = await start(postgres.url, "worker", DISPATCHER_STARTUP_TIMEOUT="60")
        try:
            assert proc.stderr is not None
            await read_until(proc.stderr, r'"(database\.waiting)"', within=30)
            await postgres.open()
            await read_until(proc.stderr, r'"(engine\.started)"', within=30)
        finally:
            code, err = await finish(proc)
    assert code == 0, err
    assert "engine.stopped" in err


async def test_sigterm_while_waiting_for_the_database_is_a_clean_stop(database_url: str) -> None:
    async with forwarding(database_url, opened=False) as postgres:
        proc = await start(postgres.url, "serve", "--port", "0", DISPATCHER_STARTUP_TIMEOUT="60")
        assert proc.stderr is not None
        await read_until(proc.stderr, r'"(database\.waiting)"', within=30)
        code, err = await finish(proc)
    assert code == 0, err
    assert "database.wait_abandoned" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["worker"]])
async def test_start_up_gives_up_after_the_timeout_with_one_clear_line(
    command: list[str],
) -> None:
    closed = free_port()
    url = f"postgresql://app:hunter2@127.0.0.1:{closed}/dispatcher"
    started = time.monotonic()
    proc = await start(url, *command, DISPATCHER_STARTUP_TIMEOUT="1.5")
    _, err_bytes = await asyncio.wait_for(proc.communicate(), timeout=30)
    elapsed = time.monotonic() - started
    err = err_bytes.decode()
    assert proc.returncode == 1, err
    assert elapsed >= 1.5  # it did wait
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"dispatcher: error: could not reach the database at "
        f"postgresql://app:***@127.0.0.1:{closed}/dispatcher within 1.5s "
        "(DISPATCHER_STARTUP_TIMEOUT)"
    ), last
    assert "hunter2" not in err and "Traceback" not in err


def test_startup_timeout_is_validated() -> None:
    assert Settings().startup_timeout == 60.0
    assert Settings.from_env({"DISPATCHER_STARTUP_TIMEOUT": "2.5"}).startup_timeout == 2.5
    with pytest.raises(ConfigurationError, match="DISPATCHER_STARTUP_TIMEOUT"):
        Settings.from_env({"DISPATCHER_STARTUP_TIMEOUT": "-1"})
    with pytest.raises(ConfigurationError, match="DISPATCHER_STARTUP_TIMEOUT"):
        Settings.from_env({"DISPATCHER_STARTUP_TIMEOUT": "soon"})


async def test_the_start_line_logs_the_port_actually_bound(database_url: str) -> None:
    proc = await start(database_url, "serve", "--port", "0", DISPATCHER_ENGINE="off")
    assert proc.stderr is not None
    line = await read_until(proc.stderr, r'^(\{.*"dispatcher\.start".*\})$', within=30)
    started = orjson.loads(line)
    port = started["port"]
    assert port != 0 and started["settings"]["port"] == port
    assert started["settings"]["host"] == started["host"] == "127.0.0.1"
    try:
        async with aiohttp.ClientSession() as http:

            async def alive() -> bool:
                try:
                    return (await get(http, f"http://127.0.0.1:{port}/healthz"))[0] == 200
                except aiohttp.ClientError:
                    return False

            await wait_for(alive, within=30, message="the logged port answers")
    finally:
        code, err = await finish(proc)
    assert code == 0, err


async def test_metrics_leave_the_api_port_when_they_have_their_own(services: Services) -> None:
    for metrics_port, expected in ((None, 200), (9464, 404)):
        settings = services.settings.with_changes(metrics_port=metrics_port)
        app = create_app(Services(services.db, settings, services.clock, services.cursor_key))
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            resp = await client.get("/metrics")
            assert resp.status == expected
            if expected == 404:
                assert (await resp.json())["code"] == "not_found"


async def test_an_operator_sink_without_its_secret_stops_start_up_clearly(
    database_url: str,
) -> None:
    short = "whsec_" + "c2hvcnQ="  # a secret too short to sign with: named, never repeated
    for secret, words in ((None, "is required"), (short, "24 to 64 bytes")):
        extra = {"DISPATCHER_OPERATOR_WEBHOOK_URL": "https://ops.example/hook"}
        if secret is not None:
            extra["DISPATCHER_OPERATOR_WEBHOOK_SECRET"] = secret
        proc = await start(database_url, "serve", "--port", "0", **extra)
        _, err_bytes = await asyncio.wait_for(proc.communicate(), timeout=30)
        err = err_bytes.decode()
        assert proc.returncode != 0, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("dispatcher: error: DISPATCHER_OPERATOR_WEBHOOK_SECRET"), last
        assert words in last
        assert "Traceback" not in err
        if secret is not None:
            assert secret not in err
