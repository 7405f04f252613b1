"""The demo receiver: a webhook endpoint `serve` runs for its own demo webhook (docs/webhooks.md).

On the first start against an empty database `serve` makes a demo workspace with a webhook that
points here, at `http://127.0.0.1:<port>/demo/receiver` of the same process, so that a new user
sees a signed delivery arrive before writing a receiver of their own. It receives as a receiver
should: it verifies each request's Standard Webhooks signature with the secret of the demo
webhook it names (the previous secret too, during a rotation's grace), answers 204 when it holds
and 401 when it does not, and keeps the latest requests in memory (not in the database: they are
this process's, and gone on restart) for `GET /demo/receiver` and the console to show.

Served only while a demo workspace exists and DISPATCHER_DEMO is on, and outside the versioned
API (`/v1/openapi.json` does not list it). Its URL is the one address the delivery engine of the
same process lets through the outbound guard although it is loopback (engine/sender.py:
`exempt_urls`); every other loopback URL stays refused.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web
from typing_extensions import TypedDict

from dispatcher.api.framework.context import PUBLIC, Services, services
from dispatcher.api.framework.http import ApiError, read_body, single_header
from dispatcher.api.framework.routing import Routes
from dispatcher.domain.clock import isoformat
from dispatcher.domain.enums import Scope
from dispatcher.domain.resources import Timestamp
from dispatcher.domain.signing import secret_key, verify
from dispatcher.errors import NotFound
from dispatcher.store import webhooks
from dispatcher.store.workspaces import ApiKey

PATH = "/demo/receiver"
# How many requests are kept, and how large a body is taken (an event is a few KiB at most):
# together, a bound on the memory anyone who can reach the port can make it hold.
KEPT = 50
MAX_BODY_BYTES = 64 * 1024


class DemoDelivery(TypedDict):
    """A request the demo receiver got (`GET /demo/receiver`; docs/webhooks.md): `verified`
    when its Standard Webhooks signature holds with a demo webhook's secret (`webhookId`,
    else null); `payload` is the body as JSON (null when it is not JSON)."""

    webhookId: str | None
    deliveryId: str | None
    eventType: str | None
    receivedAt: Timestamp
    verified: bool
    payload: Any


class DemoDeliveries(TypedDict):
    """The demo receiver's latest requests, newest first."""

    data: list[DemoDelivery]


routes = Routes()


@dataclass(frozen=True)
class Received:
    """One request, as the receiver judged it."""

    webhook_id: str | None
    delivery_id: str | None
    received_at: datetime
    verified: bool
    payload: Any

    def resource(self) -> DemoDelivery:
        event_type = self.payload.get("type") if isinstance(self.payload, dict) else None
        return {
            "webhookId": self.webhook_id,
            "deliveryId": self.delivery_id,
            "eventType": event_type if isinstance(event_type, str) else None,
            "receivedAt": isoformat(self.received_at),
            "verified": self.verified,
            "payload": self.payload,
        }


class DemoReceiver:
    """The receiver's state: its own URL (what the demo webhook points at), the demo
    workspace it belongs to, and the latest requests."""

    def __init__(self, url: str, workspace_id: str, kept: int = KEPT) -> None:
        self.url = url
        self.workspace_id = workspace_id
        self._received: deque[Received] = deque(maxlen=kept)

    def keep(self, received: Received) -> None:
        self._received.append(received)

    def latest(self) -> list[Received]:
        """Newest first."""
        return list(reversed(self._received))


DEMO_RECEIVER = web.AppKey("demo_receiver", DemoReceiver)


def receiver_url(address: tuple[Any, ...]) -> str:
    """The receiver's URL for the address the API socket is bound to: a wildcard address is
    reached on the loopback address of its family."""
    host, port = str(address[0]), int(address[1])
    if ":" in host:
        return f"http://[{'::1' if host == '::' else host}]:{port}{PATH}"
    return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}{PATH}"


async def _body(request: web.Request) -> bytes:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"the demo receiver takes {MAX_BODY_BYTES} bytes")
    body = await read_body(request)
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"the demo receiver takes {MAX_BODY_BYTES} bytes")
    return body


async def _verified_by(
    svc: Services, receiver: DemoReceiver, request: web.Request, body: bytes
) -> str | None:
    """The demo webhook whose secret signed this request, None when none did."""
    message_id = single_header(request, "webhook-id")
    timestamp = single_header(request, "webhook-timestamp")
    signature = single_header(request, "webhook-signature")
    if not (message_id and timestamp and signature):
        return None
    now = svc.clock.now()
    for webhook_id, secrets in await webhooks.demo_secrets(svc.db, receiver.url, now):
        keys = [secret_key(secret) for secret in secrets]
        if verify(keys, message_id, timestamp, body, signature, now.timestamp()):
            return webhook_id
    return None


@routes.post(PATH, PUBLIC, status=204)
async def receive_demo_delivery(request: web.Request) -> None:
    """What a receiver does: verify, keep, answer 2xx (401 when the signature does not hold,
    so that the sender sees the refusal in its attempt log)."""
    svc, receiver = services(request), request.app[DEMO_RECEIVER]
    body = await _body(request)
    webhook_id = await _verified_by(svc, receiver, request, body)
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = None
    receiver.keep(
        Received(
            webhook_id=webhook_id,
            delivery_id=request.headers.get("webhook-id"),
            received_at=svc.clock.now(),
            verified=webhook_id is not None,
            payload=payload,
        )
    )
    if webhook_id is None:
        raise ApiError(
            401,
            "invalid_signature",
            "the webhook signature is missing, stale or does not verify with a demo webhook's "
            "secret",
        )


@routes.get(PATH, Scope.WEBHOOKS_READ, DemoDeliveries)
async def list_demo_deliveries(request: web.Request, svc: Services, key: ApiKey) -> DemoDeliveries:
    receiver = request.app[DEMO_RECEIVER]
    if key.workspace_id != receiver.workspace_id:
        raise NotFound("the demo receiver belongs to the demo workspace")
    return {"data": [received.resource() for received in receiver.latest()]}
