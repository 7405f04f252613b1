"""The sender against the ASGI servers uvicorn and hypercorn (asgi_receiver.py, which checks
every signature with the `standardwebhooks` package): delivered and signed over kept-alive
connections; a chunked answer, a 5xx, an application that fails mid-answer and an answer
that never comes each recorded as what it was."""

from __future__ import annotations

import base64
import os
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conformance.delivering import (
    delivery_ids,
    first_attempt,
    signed_webhook,
    wait_delivered,
)
from tests.conformance.servers import Receiver
from tests.conftest import Workspace
from tests.engine.helpers import bulk_publish, publish, subscribe
from tests.receiver import EngineFactory

EVENTS = 40
CONCURRENCY = 4


async def test_delivered_signed_and_kept_alive(
    client: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    asgi: Receiver,
    engine: EngineFactory,
) -> None:
    hook = await signed_webhook(client, ws, asgi.url("/signed/a"), asgi, maxConcurrency=CONCURRENCY)
    await bulk_publish(db, ws, EVENTS)
    await engine()
    await wait_delivered(db, hook["id"], EVENTS)

    seen = await asgi.stats("/signed/a")
    assert (seen["requests"], seen["verified"], seen["rejected"]) == (EVENTS, EVENTS, 0)
    assert set(seen["ids"]) == await delivery_ids(client, ws, hook["id"])
    assert 1 <= seen["sockets"] <= CONCURRENCY  # the client's ports: connections kept alive


async def test_each_answer_recorded_as_what_it_was(
    client: TestClient[Any, Any],
    ws: Workspace,
    asgi: Receiver,
    engine: EngineFactory,
) -> None:
    hooks = {
        path: await signed_webhook(client, ws, asgi.url(path), asgi, **fields)
        for path, fields in (
            ("/chunked/a", {}),
            ("/status/500/a", {}),
            ("/status/503/a", {}),
            ("/crash/a", {}),
            ("/hang/a", {"timeoutSeconds": 0.5}),
        )
    }
    # The control: a secret that is not the webhook's, and the receiver refuses the signature.
    hooks["/signed/wrong"] = await subscribe(client, ws, asgi.url("/signed/wrong"))
    await asgi.secret("/signed/wrong", "whsec_" + base64.b64encode(os.urandom(24)).decode())
    await publish(client, ws)
    await engine(request_timeout=10.0)  # the hang times out by its own 0.5 s
    got = {path: await first_attempt(client, ws, hook["id"]) for path, hook in hooks.items()}

    chunked = got["/chunked/a"]
    assert (chunked["outcome"], chunked["responseStatus"], chunked["error"]) == (
        "success",
        200,
        None,
    )
    assert chunked["responseBody"] == "accepted, in three chunks by asgi"

    for status in (500, 503):
        failed = got[f"/status/{status}/a"]
        assert (failed["outcome"], failed["responseStatus"], failed["error"]) == (
            "http_error",
            status,
            f"HTTP {status}",
        )
        assert failed["responseBody"] == f"asgi says {status}"

    crashed = got["/crash/a"]  # 200 and a Content-Length were sent: not a success
    assert (crashed["outcome"], crashed["responseStatus"], crashed["error"]) == (
        "connection_error",
        None,
        "response interrupted",
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
    assert (await asgi.stats("/signed/wrong"))["rejected"] == 1

    for path in ("/chunked/a", "/status/500/a", "/status/503/a", "/crash/a"):
        seen = await asgi.stats(path)
        assert (seen["verified"], seen["rejected"]) == (1, 0), path
    assert (await asgi.stats("/hang/a"))["requests"] == 1
