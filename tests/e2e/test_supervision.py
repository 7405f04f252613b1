"""A background task that dies stops the process: logged, not ready, exit 1 (never half alive).

The faults are injected by replacing one store function in the process under test (the
maintenance statement, the LISTEN loop) with one that raises, as a bug there would.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY

from dispatcher import service
from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.store import maintenance
from dispatcher.supervision import BackgroundTaskFailed, Supervisor
from tests.processes import STARTED, log_events


async def test_a_dead_loop_makes_readyz_name_it_and_asks_the_process_to_stop(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any) -> maintenance.Report:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(maintenance, "run_maintenance", broken)
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    app = create_app(services)
    ready = service.readiness(app, None, supervisor)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        before = await client.get("/readyz")
        assert before.status == 200, await before.text()
        assert (await before.json())["checks"] == {"database": True, "schema": True}

        tasks = service.start_housekeeping(services.db, services.clock, services.settings, ready)
        supervisor.watch(*tasks)
        try:
            await asyncio.wait_for(stop.wait(), timeout=20)  # set by the supervisor
            after = await client.get("/readyz")
            assert after.status == 503
            body = await after.json()
            assert body == {
                "status": "unavailable",
                "checks": {"database": True, "schema": True, "maintenance": False},
            }
            assert not ready()
            assert REGISTRY.get_sample_value("dispatcher_ready") == 0
            assert (await client.get("/healthz")).status == 200  # alive, while it stops
        finally:
            supervisor.close()
            await service.cancel_all(tasks)
    with pytest.raises(BackgroundTaskFailed, match="'maintenance' ended unexpectedly"):
        supervisor.raise_failure()


async def test_tasks_stopped_on_purpose_are_no_failure(services: Services) -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    tasks = service.start_housekeeping(
        services.db, services.clock, services.settings, lambda: supervisor.healthy
    )
    supervisor.watch(*tasks)
    supervisor.close()
    await service.cancel_all(tasks)
    assert all(task.cancelled() for task in tasks)
    assert supervisor.healthy and not stop.is_set()
    supervisor.raise_failure()  # nothing to raise


# Runs the real CLI after replacing one function with a broken one.
INJECT = """
import sys
from dispatcher.store import maintenance, notifications

async def broken(*args, **kwargs):
    raise RuntimeError("injected fault")

if sys.argv[1] == "maintenance":
    maintenance.run_maintenance = broken
else:
    notifications.Listener.run = broken
from dispatcher.__main__ import main
main(sys.argv[2:])
"""


@pytest.mark.parametrize(
    ("command", "fault", "task"),
    [
        (["serve", "--port", "0"], "maintenance", "maintenance"),
        (["worker"], "listener", "engine-listener"),
    ],
)
async def test_the_process_stops_and_exits_1_when_a_background_task_dies(
    database_url: str, command: list[str], fault: str, task: str
) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DISPATCHER_LOG_FORMAT": "json",
        "DISPATCHER_DEMO": "off",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", INJECT, fault, *command,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    STARTED.append(proc)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    stderr = err.decode()
    assert proc.returncode == 1, stderr

    events = log_events(stderr)
    failed = [e for e in events if e.get("event") == "background_task.failed"]
    assert len(failed) == 1, stderr
    assert failed[0]["task"] == task and failed[0]["level"] == "error"
    assert "RuntimeError: injected fault" in failed[0]["exception"]
    names = [e.get("event") for e in events]
    # An orderly stop, as on SIGTERM: the engine stopped, then the process.
    assert names.index("engine.stopped") > names.index("background_task.failed")
    assert names[-1] == "dispatcher.stopped"
    assert stderr.rstrip().splitlines()[-1] == (
        f"dispatcher: error: the background task {task!r} ended unexpectedly "
        "(RuntimeError('injected fault')); the process stopped"
    )
