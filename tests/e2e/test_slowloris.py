"""A real `dispatcher serve` under a slowloris: thousands of connections that send half a
request head and nothing more. The API answers other clients throughout, and each slow
connection is answered 408 and closed once DISPATCHER_HEAD_TIMEOUT has passed (the bounds
themselves, slow bodies and the connection bound: tests/api/test_slow_clients.py)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from tests.processes import free_port, read_until, start, stop, until_ready
from tests.slow_clients import HALF_HEAD, SLOW_CONNECTIONS, enough_open_files

HEAD_TIMEOUT = 8.0


async def test_a_slowloris_neither_stops_serve_nor_stays(database_url: str) -> None:
    enough_open_files(2 * SLOW_CONNECTIONS + 500)
    port = free_port()
    proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_ENGINE="off",
                       DISPATCHER_HEAD_TIMEOUT=str(HEAD_TIMEOUT), DISPATCHER_LOG_LEVEL="warning",
                       DISPATCHER_MAX_CONNECTIONS=str(3 * SLOW_CONNECTIONS))  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        assert proc.stdout is not None
        key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        async with aiohttp.ClientSession() as http:
            await until_ready(http, base)
            started = time.monotonic()
            for _ in range(0, SLOW_CONNECTIONS, 200):
                batch = await asyncio.gather(
                    *(asyncio.open_connection("127.0.0.1", port) for _ in range(200))
                )
                for reader, writer in batch:
                    writer.write(HALF_HEAD)
                    slow.append((reader, writer))
            opened = time.monotonic() - started
            # Others are answered at once, while (most of) the slow ones are still open.
            for _ in range(5):
                asked = time.monotonic()
                headers = {"Authorization": f"Bearer {key}", "Connection": "close"}
                async with http.get(f"{base}/v1/me", headers=headers) as resp:
                    assert resp.status == 200, await resp.text()
                assert time.monotonic() - asked < 1.0
            assert time.monotonic() - started < HEAD_TIMEOUT, f"opened in {opened:.1f} s"

            async def ended(reader: asyncio.StreamReader) -> bytes:
                try:
                    return await reader.read()
                except ConnectionError:
                    return b""

            answers = await asyncio.wait_for(
                asyncio.gather(*(ended(reader) for reader, _ in slow)), timeout=60
            )
            assert time.monotonic() - started >= HEAD_TIMEOUT
            assert sum(a.startswith(b"HTTP/1.1 408 ") for a in answers) == SLOW_CONNECTIONS
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 200
    finally:
        for _, writer in slow:
            writer.close()
        code, err = await stop(proc)
    assert code == 0, err
