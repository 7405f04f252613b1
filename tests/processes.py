"""Starting `dispatcher serve`, `worker` and the command line as processes, and waiting on them.

Shared by every test that runs the service as users run it (tests/e2e, tests/chaos, ...): test
modules do not import each other, they import this."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from tests.conftest import wait_for

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


async def cli(database_url: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "DATABASE_URL": database_url, "DISPATCHER_LOG_LEVEL": "warning"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def log_events(stream: bytes | str) -> list[dict[str, Any]]:
    text = stream.decode() if isinstance(stream, bytes) else stream
    return [orjson.loads(line) for line in text.splitlines() if line.startswith("{")]


FAST_LEASE = {"DISPATCHER_REQUEST_TIMEOUT": "1", "DISPATCHER_HEARTBEAT_TIMEOUT": "1",
              "DISPATCHER_LOG_LEVEL": "warning", "DISPATCHER_POLL_INTERVAL": "0.1"}  # fmt: skip


@dataclass
class Worker:
    """A `dispatcher worker` whose stderr is read as it comes (a full pipe would stall it)."""

    proc: asyncio.subprocess.Process
    lines: list[bytes] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, database_url: str, **env: str) -> Worker:
        worker = cls(await start(database_url, "worker", **env))
        worker.reader = asyncio.create_task(worker._read())
        return worker

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line)

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.lines:
            with contextlib.suppress(orjson.JSONDecodeError):
                event = orjson.loads(line)
                if isinstance(event, dict) and event.get("event") == name:
                    found.append(event)
        return found

    async def owner(self) -> str:
        await wait_for(lambda: bool(self.events("engine.started")), within=30, message="start")
        return str(self.events("engine.started")[0]["owner"])

    async def stop(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), timeout=30)
        if self.reader is not None:
            await asyncio.wait_for(self.reader, timeout=5)
        return code
