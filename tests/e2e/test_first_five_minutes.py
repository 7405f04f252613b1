"""What a new user meets (issue 16, "The first five minutes"): `dispatcher serve` on an empty
database, the banner's curl for a missed call, and its signed delivery arriving at the demo
receiver of the same process; while a webhook to any other local receiver is refused with a
`lastError` that says how to allow it."""

from __future__ import annotations

import asyncio
import itertools
import re
import shlex
import signal
from typing import Any

import aiohttp

from dispatcher.settings import Settings
from dispatcher.store.database import Database
from tests.conftest import wait_for
from tests.processes import free_port, start, stop, until_ready
from tests.receiver import Receiver

HINT = "(set DISPATCHER_ALLOWED_CIDRS to allow it)"


async def banner(stdout: asyncio.StreamReader, within: float = 60) -> str:
    """The demo banner, from its first line to its last (the allow-list example)."""
    lines: list[str] = []
    async with asyncio.timeout(within):
        while True:
            line = (await stdout.readline()).decode()
            assert line, "process ended: " + "".join(lines)
            lines.append(line)
            if "DISPATCHER_ALLOWED_CIDRS=" in line:
                return "".join(lines)


def curl_request(command: str) -> tuple[str, dict[str, str], str]:
    """(url, headers, body) of one of the banner's `curl -s URL -H ... -d ...` lines."""
    words = shlex.split(command)
    assert words[:2] == ["curl", "-s"], words
    headers = dict(
        value.split(": ", 1) for flag, value in itertools.pairwise(words) if flag == "-H"
    )
    body = words[words.index("-d") + 1] if "-d" in words else ""
    return words[2], headers, body


async def test_a_missed_call_reaches_the_demo_receiver_signed(
    database_url: str, receiver: Receiver
) -> None:
    port = free_port()
    # As a new user runs it: no allow-list, so loopback receivers are refused.
    proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_ALLOWED_CIDRS="")
    try:
        assert proc.stdout is not None
        shown = await banner(proc.stdout)
        key = re.search(r"API key: (dk_\S+)", shown)
        assert key is not None
        auth = {"Authorization": f"Bearer {key[1]}"}
        assert f"http://localhost:{port}/console" in shown
        call_line = next(line for line in shown.splitlines() if "/v1/inbound/calls" in line)
        url, headers, body = curl_request(call_line.strip())
        assert url == f"http://localhost:{port}/v1/inbound/calls"
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/v1/webhooks", headers=auth) as resp:
                (hook,) = (await resp.json())["data"]
            assert hook["url"] == f"{base}/demo/receiver"
            assert "call.missed" in hook["events"] and "message.received" in hook["events"]

            # The banner's curl, as printed.
            async with http.post(url, data=body, headers=headers) as resp:
                assert resp.status == 201, await resp.text()
                call = await resp.json()

            async def arrived() -> list[Any]:
                async with http.get(f"{base}/demo/receiver", headers=auth) as resp:
                    assert resp.status == 200, await resp.text()
                    data: list[Any] = (await resp.json())["data"]
                    return data

            async def one_arrived() -> bool:
                return len(await arrived()) == 1

            await wait_for(one_arrived, within=20, message="the delivery at the demo receiver")
            (got,) = await arrived()
            assert got["verified"] is True and got["webhookId"] == hook["id"]
            assert got["eventType"] == "call.missed"
            assert got["payload"]["data"]["id"] == call["id"]

            async def delivered() -> bool:
                async with http.get(
                    f"{base}/v1/webhooks/{hook['id']}/deliveries", headers=auth
                ) as resp:
                    (delivery,) = (await resp.json())["data"]
                return bool(delivery["status"] == "delivered" and delivery["responseStatus"] == 204)

            # The attempt is recorded a moment after the receiver has answered.
            await wait_for(delivered, within=20, message="the delivery recorded as delivered")

            # Any other local receiver stays refused, and says how to allow it; so does any
            # other URL of this very process.
            refused = []
            for target in (receiver.url(), f"{base}/demo/receiver?again=1"):
                async with http.post(
                    f"{base}/v1/webhooks",
                    json={"url": target, "events": ["call.missed"]},
                    headers=auth,
                ) as resp:
                    assert resp.status == 201
                    refused.append((await resp.json())["id"])
            async with http.post(url, data=body, headers=headers) as resp:
                assert resp.status == 201

            async def blocked(webhook_id: str) -> bool:
                async with http.get(
                    f"{base}/v1/webhooks/{webhook_id}/deliveries", headers=auth
                ) as resp:
                    found = (await resp.json())["data"]
                return bool(found) and found[0]["lastError"] is not None

            for webhook_id in refused:
                await wait_for(lambda w=webhook_id: blocked(w), within=20, message="a refusal")
                async with http.get(
                    f"{base}/v1/webhooks/{webhook_id}/deliveries", headers=auth
                ) as resp:
                    (delivery,) = (await resp.json())["data"]
                assert delivery["lastError"] == f"blocked: loopback address {HINT}"
                assert delivery["status"] == "pending"  # retried, as before
            assert receiver.requests == []

            async def both_calls() -> bool:
                return len(await arrived()) == 2  # nothing for the other URL of this process

            await wait_for(both_calls, within=20, message="the second call's delivery")
    finally:
        code, err = await stop(proc)
    assert code == 0, err
    assert key[1] not in err


async def test_a_second_start_serves_the_receiver_without_a_banner(database_url: str) -> None:
    outputs = []
    for _ in range(2):
        port = free_port()
        proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_ENGINE="off")
        receiver_url = f"http://127.0.0.1:{port}/demo/receiver"
        try:
            async with aiohttp.ClientSession() as http:

                async def answers(url: str = receiver_url) -> bool:
                    try:
                        async with http.post(url, data=b"{}") as resp:
                            return resp.status == 401  # there, and unsigned
                    except aiohttp.ClientError:
                        return False

                await wait_for(answers, within=30, message="the demo receiver")
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
        assert proc.returncode == 0, err.decode()
        outputs.append(out.decode())
    assert "API key: dk_" in outputs[0] and "API key" not in outputs[1]


async def test_with_the_demo_off_there_is_no_receiver(database_url: str) -> None:
    port = free_port()
    proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_DEMO="off",
                       DISPATCHER_ENGINE="off")  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:
            await until_ready(http, f"http://127.0.0.1:{port}")
            async with http.post(f"http://127.0.0.1:{port}/demo/receiver") as resp:
                assert resp.status == 404
    finally:
        code, err = await stop(proc)
    assert code == 0, err


async def test_against_a_database_url_no_demo_key_is_minted_unless_asked(
    database_url: str, db: Database
) -> None:
    """A deployment (a DATABASE_URL) never mints a credential into its logs by default: no
    demo workspace, no key printed, on an empty database. With the embedded Postgres (a
    developer's machine, `make run`) the demo stays on by default."""
    port = free_port()
    # Blank is unset: the default applies.
    proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_DEMO="",
                       DISPATCHER_ENGINE="off")  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:
            await until_ready(http, f"http://127.0.0.1:{port}")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = (part.decode() for part in await asyncio.wait_for(proc.communicate(), 30))
    assert proc.returncode == 0, err
    assert "API key" not in out and "dk_" not in out and "dk_" not in err
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM workspaces WHERE NOT operator") == 0
        assert await conn.fetchval("SELECT count(*) FROM api_keys") == 0

    assert Settings.from_env({}).demo is True
    assert Settings.from_env({"DATABASE_URL": database_url}).demo is False
    assert Settings.from_env({"DATABASE_URL": database_url, "DISPATCHER_DEMO": "on"}).demo
    assert Settings.from_env({"DISPATCHER_DEMO": "off"}).demo is False
