"""Every line a process writes to its JSON log is one JSON object, whatever logs it: during a
Postgres outage asyncpg logs "Failed to restore the pool connection floor" with a traceback,
which came out as dozens of lines of plain text between the JSON ones."""

from __future__ import annotations

import asyncio
import signal

import orjson

from tests.chaos.forwarder import forwarding
from tests.conftest import wait_for
from tests.processes import Worker


async def test_library_errors_are_json_lines_too(database_url: str) -> None:
    async with forwarding(database_url) as forwarder:
        worker = await Worker.start(forwarder.url, DISPATCHER_HEARTBEAT_TIMEOUT="1")
        try:
            await worker.owner()
            # Postgres goes away: the pool cannot restore its floor, and asyncpg's logger says
            # so, with the exception's traceback.
            await forwarder.close()

            def floor_failed() -> bool:
                return any(b"Failed to restore the pool connection" in line
                           for line in worker.lines)  # fmt: skip

            await wait_for(floor_failed, within=30, message="asyncpg's pool warning")
            await forwarder.open()
        finally:
            worker.proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(worker.proc.wait(), timeout=30)
            assert worker.reader is not None
            await asyncio.wait_for(worker.reader, timeout=5)
    assert code == 0
    events = []
    for line in worker.lines:
        event = orjson.loads(line)  # every line, or this fails naming it
        assert isinstance(event, dict), line
        events.append(event)
    floor = [e for e in events if "connection floor" in e["event"]]
    assert floor and floor[0]["logger"] == "asyncpg.pool" and floor[0]["level"] == "warning"
    assert "Traceback" in floor[0]["exception"]  # the traceback, inside the object
