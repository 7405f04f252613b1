"""A webhook receiver as a bare ASGI app, served by uvicorn or hypercorn (tests/conformance):
it checks each request's signature with the `standardwebhooks` package (the reference
implementation) and counts the connections (the client's address and port) that carried
webhooks.

The same contract as receiver.js: the test tells it each path's secret
(POST /_control/secret {"path", "secret"}); then
  /signed/...      200 "ok" when the signature verifies, else 401
  /chunked/...     the same check, then 200 in three body messages (no Content-Length)
  /status/NNN/...  the same check, then NNN with a short body
  /crash/...       the head sent with a Content-Length, a part of the body, then the app fails
                   (the server drops the connection mid-answer)
  /hang/...        never answered (until the client gives up)
GET /_control/stats: per path, the requests, the verified and rejected ones, and the
connections that carried them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from standardwebhooks import Webhook

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SECRETS: dict[str, str] = {}
PATHS: dict[str, dict[str, Any]] = {}


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return  # lifespan: nothing to set up
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path: str = scope["path"]
    if path.startswith("/_control/"):
        await control(scope, path, body, send)
    else:
        await webhook(scope, path, body, send)


async def respond(
    send: Send, status: int, body: bytes, content_type: bytes = b"text/plain"
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def control(scope: Scope, path: str, body: bytes, send: Send) -> None:
    if scope["method"] == "POST" and path == "/_control/secret":
        given = json.loads(body)
        SECRETS[given["path"]] = given["secret"]
        await respond(send, 204, b"")
    elif scope["method"] == "GET" and path == "/_control/stats":
        paths = {
            name: {**{k: v for k, v in s.items() if k != "sockets"}, "sockets": len(s["sockets"])}
            for name, s in PATHS.items()
        }
        await respond(send, 200, json.dumps({"paths": paths}).encode(), b"application/json")
    else:
        await respond(send, 404, b"")


async def webhook(scope: Scope, path: str, body: bytes, send: Send) -> None:
    stats = PATHS.setdefault(
        path, {"requests": 0, "verified": 0, "rejected": 0, "sockets": set(), "ids": []}
    )
    stats["requests"] += 1
    stats["sockets"].add(tuple(scope["client"] or ()))
    kind = path.split("/")[1]
    if kind == "hang":
        await asyncio.sleep(3600)
        return
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    secret = SECRETS.get(path)
    try:
        if secret is None:
            raise ValueError("no secret for this path")
        Webhook(secret).verify(body, headers)
    except Exception:  # the package's WebhookVerificationError, or no secret
        stats["rejected"] += 1
        await respond(send, 401, b"signature rejected")
        return
    stats["verified"] += 1
    stats["ids"].append(headers["webhook-id"])
    if kind == "chunked":
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"accepted, ", b"in three ", b"chunks by asgi"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif kind == "status":
        status = int(path.split("/")[2])
        await respond(send, status, f"asgi says {status}".encode())
    elif kind == "crash":
        headers_out = [(b"content-type", b"text/plain"), (b"content-length", b"100")]
        await send({"type": "http.response.start", "status": 200, "headers": headers_out})
        await send({"type": "http.response.body", "body": b"half an answ", "more_body": True})
        raise RuntimeError("the receiver failed mid-answer (on purpose)")
    else:
        await respond(send, 200, b"ok")
