"""`dispatcher serve` flooded past its bound on requests in progress: every answer is a 202 or
a 503 `overloaded` with `Retry-After`; every 202's event is stored and delivered, no refused
one is stored, and the probes and /metrics answer 200 throughout."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import aiohttp
import asyncpg

from tests.conftest import wait_for
from tests.processes import free_port, read_until, start, stop, until_ready
from tests.receiver import Receiver

CLIENTS = 40
REQUESTS = 400


async def test_a_flooded_process_accepts_or_refuses_and_delivers_every_accepted_event(
    database_url: str, receiver: Receiver
) -> None:
    port = free_port()
    proc = await start(
        database_url,
        "serve",
        "--port",
        str(port),
        DISPATCHER_POOL_SIZE="2",
        DISPATCHER_MAX_REQUESTS_IN_PROGRESS="3",
        DISPATCHER_ADMISSION_TIMEOUT="0",
        # One line per request would fill the pipe nobody reads during the flood.
        DISPATCHER_LOG_LEVEL="warning",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert proc.stdout is not None
        key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        headers = {"Authorization": f"Bearer {key}"}
        connector = aiohttp.TCPConnector(limit=CLIENTS)
        async with aiohttp.ClientSession(connector=connector) as http:
            await until_ready(http, base)
            async with http.post(
                f"{base}/v1/webhooks",
                json={"url": receiver.url(), "events": ["contact.updated"]},
                headers=headers,
            ) as resp:
                assert resp.status == 201, await resp.text()
            async with http.get(f"{base}/v1/me", headers=headers) as resp:
                workspace_id = (await resp.json())["workspaceId"]

            answers: dict[str, int] = {}
            queue: asyncio.Queue[str] = asyncio.Queue()
            for n in range(REQUESTS):
                queue.put_nowait(f"flood-{n}")

            async def client() -> None:
                while not queue.empty():
                    event_id = queue.get_nowait()
                    body = {"type": "contact.updated", "data": {"id": event_id}}
                    async with http.post(f"{base}/v1/events", json=body, headers=headers) as r:
                        answers[event_id] = r.status
                        if r.status == 503:
                            assert r.headers["Retry-After"] == "1"
                            assert (await r.json())["code"] == "overloaded"
                        else:
                            await r.read()

            probes: list[tuple[str, int]] = []
            flooding = asyncio.Event()

            async def probe() -> None:
                """The probes and /metrics, through the flood: never refused."""
                while not flooding.is_set() or not probes:
                    for path in ("/healthz", "/readyz", "/metrics"):
                        async with http.get(f"{base}{path}") as r:
                            await r.read()
                            probes.append((path, r.status))

            async def flood() -> None:
                await asyncio.gather(*(client() for _ in range(CLIENTS)))
                flooding.set()

            await asyncio.gather(flood(), probe())
            assert probes and all(status == 200 for _, status in probes), probes
            statuses = Counter(answers.values())
            assert set(statuses) <= {202, 503}, statuses
            assert statuses[202] > 0 and statuses[503] > 0, statuses
            accepted = {event_id for event_id, status in answers.items() if status == 202}

            # Every accepted event is delivered.
            def delivered() -> set[str]:
                return {json.loads(r.body)["data"]["id"] for r in receiver.requests}

            await wait_for(lambda: delivered() >= accepted, within=60, message="every 202 sent")
            assert delivered() == accepted
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
    finally:
        code, err = await stop(proc)
    assert code == 0, err

    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT payload::jsonb -> 'data' ->> 'id' AS id FROM events "
            "WHERE workspace_id = $1 AND type = 'contact.updated'",
            workspace_id,
        )
    finally:
        await conn.close()
    # Nothing refused was stored.
    assert {row["id"] for row in rows} == accepted
