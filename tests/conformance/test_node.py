"""The sender against Node.js's `http` server (receiver.js, which checks every signature
itself): delivered and signed over kept-alive connections; a chunked answer, a 5xx, a reset
connection and an answer that never comes each recorded as what it was."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conformance.delivering import (
    attempts,
    delivery_ids,
    first_attempt,
    signed_webhook,
    wait_delivered,
)
from tests.conformance.servers import Receiver, start_node
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import attempted, bulk_publish, publish, subscribe
from tests.receiver import EngineFactory

EVENTS = 40
CONCURRENCY = 4


async def test_delivered_signed_and_kept_alive(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    node: Receiver,
    engine: EngineFactory,
) -> None:
    hook = await signed_webhook(client, ws, node.url("/signed/a"), node, maxConcurrency=CONCURRENCY)
    await bulk_publish(db, ws, EVENTS)
    await engine()
    await wait_delivered(db, hook["id"], EVENTS)

    seen = await node.stats("/signed/a")
    assert (seen["requests"], seen["verified"], seen["rejected"]) == (EVENTS, EVENTS, 0)
    assert set(seen["ids"]) == await delivery_ids(client, ws, hook["id"])  # each once
    # Kept alive: no more connections than requests in flight at once.
    assert 1 <= seen["sockets"] <= CONCURRENCY


async def test_each_answer_recorded_as_what_it_was(
    client: TestClient[Any, Any],
    ws: Workspace,
    node: Receiver,
    engine: EngineFactory,
) -> None:
    hooks = {
        path: await signed_webhook(client, ws, node.url(path), node, **fields)
        for path, fields in (
            ("/chunked/a", {}),
            ("/status/500/a", {}),
            ("/status/503/a", {}),
            ("/reset/a", {}),
            ("/hang/a", {"timeoutSeconds": 0.5}),
        )
    }
    # The control: a secret that is not the webhook's, and the receiver refuses the signature.
    hooks["/signed/wrong"] = await subscribe(client, ws, node.url("/signed/wrong"))
    await node.secret("/signed/wrong", "whsec_" + base64.b64encode(os.urandom(24)).decode())
    await publish(client, ws)
    await engine(request_timeout=10.0)  # the hang times out by its own 0.5 s
    got = {path: await first_attempt(client, ws, hook["id"]) for path, hook in hooks.items()}

    chunked = got["/chunked/a"]
    assert (chunked["outcome"], chunked["responseStatus"], chunked["error"]) == (
        "success",
        200,
        None,
    )
    assert chunked["responseBody"] == "accepted, in three chunks by node"
    assert (await attempted(client, ws, hooks["/chunked/a"]["id"]))["status"] == "delivered"

    for status in (500, 503):
        failed = got[f"/status/{status}/a"]
        assert (failed["outcome"], failed["responseStatus"], failed["error"]) == (
            "http_error",
            status,
            f"HTTP {status}",
        )
        assert failed["responseBody"] == f"node says {status}"

    reset = got["/reset/a"]
    assert (reset["outcome"], reset["responseStatus"], reset["error"]) == (
        "connection_error",
        None,
        "connection closed before a response",
    )

    hang = got["/hang/a"]
    assert (hang["outcome"], hang["responseStatus"], hang["error"]) == (
        "timeout",
        None,
        "timeout after 0.5s",
    )
    assert 500 <= hang["responseMs"] < 5000

    refused = got["/signed/wrong"]
    assert (refused["outcome"], refused["responseStatus"], refused["error"]) == (
        "http_error",
        401,
        "HTTP 401",
    )
    assert refused["responseBody"] == "signature rejected"
    assert (await node.stats("/signed/wrong"))["rejected"] == 1

    for path in ("/chunked/a", "/status/500/a", "/status/503/a"):
        seen = await node.stats(path)
        assert (seen["verified"], seen["rejected"]) == (1, 0), path
    assert (await node.stats("/reset/a"))["requests"] == 1
    assert (await node.stats("/hang/a"))["requests"] == 1


async def test_a_connection_closed_while_idle_is_not_used_again(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    tmp_path: Path,
    engine: EngineFactory,
) -> None:
    """Node closes a connection idle for 200 ms (its keepAliveTimeout; 5 s by default, less
    than the sender's 15 s): the next delivery goes out on a new connection, and succeeds."""
    (tmp_path / "short").mkdir()
    server = await start_node(tmp_path / "short", keep_alive_ms=200)
    try:
        short = Receiver(server)
        hook = await signed_webhook(client, ws, short.url("/signed/idle"), short)
        await publish(client, ws, "CT1")
        await engine()
        await wait_delivered(db, hook["id"], 1)

        async def closed_by_node() -> bool:
            return bool((await short.all_stats())["socketsClosed"] >= 1)

        await wait_for(closed_by_node, message="Node closing the idle connection")
        await publish(client, ws, "CT2")
        await wait_delivered(db, hook["id"], 2)
        seen = await short.stats("/signed/idle")
        assert (seen["requests"], seen["verified"], seen["sockets"]) == (2, 2, 2)
        tried = await attempts(client, ws, hook["id"])
        assert [a["outcome"] for a in tried] == ["success", "success"]
    finally:
        await server.stop()
