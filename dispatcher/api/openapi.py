"""The OpenAPI 3.1 document of the whole API, served at `GET /v1/openapi.json`.

Request bodies come from the pydantic models the handlers validate with, so they cannot drift;
a test checks that every route of the app is documented and every documented route exists.
The document is also the routes' declaration of their inputs: `route_inputs()` hands the
query parameters and body of each operation to the middleware that refuses anything else.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel

from dispatcher import __version__
from dispatcher.api import models
from dispatcher.api.http import json_response
from dispatcher.api.pagination import DEFAULT_LIMIT, MAX_LIMIT
from dispatcher.api.query import RouteInputs
from dispatcher.domain.events import EVENT_TYPES, TEST_EVENT
from dispatcher.domain.phone import E164_PATTERN

routes = web.RouteTableDef()

TS = {"type": "string", "format": "date-time"}
NULL_TS = {"type": ["string", "null"], "format": "date-time"}
STR = {"type": "string"}
NULL_STR = {"type": ["string", "null"]}
NULL_INT = {"type": ["integer", "null"]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
    }


def _page(item: str) -> dict[str, Any]:
    return _object({"data": {"type": "array", "items": _ref(item)}, "nextCursor": NULL_STR})


RESOURCES: dict[str, dict[str, Any]] = {
    "Error": {
        **_object(
            {
                "status": {"type": "integer"},
                "code": STR,
                "title": STR,
                "message": STR,
                "errors": {
                    "type": "array",
                    "items": _object({"path": STR, "message": STR}),
                },
                "trace": STR,
            },
            ["status", "code", "title", "message", "trace"],
        )
    },
    "Message": _object(
        {
            "id": STR,
            "createdAt": TS,
            "direction": {"enum": ["incoming", "outgoing"]},
            "from": STR,
            "to": STR,
            "text": STR,
            "media": {"type": "array", "items": _object({"contentType": STR, "url": STR})},
            "numberId": STR,
            "conversationId": STR,
            "status": {"enum": ["queued", "sent", "delivered", "undelivered", "received"]},
        }
    ),
    "Call": _object(
        {
            "id": STR,
            "createdAt": TS,
            "direction": {"enum": ["incoming", "outgoing"]},
            "from": STR,
            "to": STR,
            "status": {"enum": ["ringing", "answered", "completed", "missed", "forwarded"]},
            "durationSeconds": NULL_INT,
            "numberId": STR,
            "conversationId": STR,
        }
    ),
    "Conversation": _object(
        {
            "id": STR,
            "contact": STR,
            "createdAt": TS,
            "lastItemAt": TS,
            "lastItemKind": {"type": ["string", "null"]},
            "numberId": STR,
            "status": {"enum": ["open", "done"]},
        }
    ),
    "Webhook": _object(
        {
            "id": STR,
            "createdAt": TS,
            "disabledAt": NULL_TS,
            "disabledReason": {"enum": ["manual", "failing", "gone", None]},
            "events": {"type": "array", "items": STR},
            "name": NULL_STR,
            "numberIds": {"type": ["array", "null"], "items": STR},
            "url": STR,
            "maxConcurrency": {"type": "integer"},
        }
    ),
    "Secret": _object({"secret": STR}),
    "EventEnvelope": _object(
        {"id": STR, "type": STR, "apiVersion": STR, "createdAt": TS, "data": {"type": "object"}}
    ),
    "Delivery": _object(
        {
            "id": STR,
            "webhookId": STR,
            "attempts": {"type": "integer"},
            "createdAt": TS,
            "deliveredAt": NULL_TS,
            "event": STR,
            "lastError": NULL_STR,
            "nextAttemptAt": NULL_TS,
            "payload": _ref("EventEnvelope"),
            "responseMs": NULL_INT,
            "responseStatus": NULL_INT,
            "status": {"enum": ["pending", "delivered", "failed"]},
        }
    ),
    "Recovered": _object({"queued": {"type": "integer"}}),
}
RESOURCES["WebhookWithSecret"] = {
    **RESOURCES["Webhook"],
    "properties": {**RESOURCES["Webhook"]["properties"], "secret": STR},
    "required": [*RESOURCES["Webhook"]["required"], "secret"],
}
for _name in ("Message", "Conversation", "Webhook", "Delivery"):
    RESOURCES[f"{_name}Page"] = _page(_name)

BODIES: dict[str, type[BaseModel]] = {
    "SendMessage": models.SendMessage,
    "SetConversationStatus": models.SetConversationStatus,
    "InboundMessage": models.InboundMessage,
    "InboundCall": models.InboundCall,
    "CreateWebhook": models.CreateWebhook,
    "UpdateWebhook": models.UpdateWebhook,
    "Recover": models.Recover,
    "PublishEvent": models.PublishEvent,
}

PAGE_PARAMS = [
    {"name": "limit", "in": "query",
     "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}},
    {"name": "cursor", "in": "query", "schema": STR},
]  # fmt: skip
ERRORS = {
    code: {"description": text, "content": {"application/json": {"schema": _ref("Error")}}}
    for code, text in {
        "400": "invalid request: a field, header or query parameter is malformed, unknown or "
        "repeated, or a body was sent where none is taken",
        "401": "missing or unknown API key",
        "403": "the key lacks the scope",
        "404": "not found",
        "409": "conflict with the resource's state",
        "413": "body over 1 MiB",
        "415": "body is not application/json",
        "422": "the Idempotency-Key was already used with another request",
    }.items()
}

# (method, path, scope, operation id, body model, success status, response schema, query params)
Operation = tuple[str, str, str | None, str, str | None, int, str | None, list[dict[str, Any]]]


def _q(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema}


NUMBER_ID = {"type": "string", "pattern": "^PN[0-9a-f]{32}$"}
# ASCII digits: `\d` means any Unicode digit to some regex engines.
E164 = {"type": "string", "pattern": f"^{E164_PATTERN}$"}
# The IETF draft's key is a string of visible ASCII; 1..255 characters here.
IDEMPOTENCY_KEY = {"type": "string", "pattern": "^[!-~]{1,255}$"}
OPERATIONS: list[Operation] = [
    ("get", "/healthz", None, "healthz", None, 200, None, []),
    ("get", "/readyz", None, "readyz", None, 200, None, []),
    ("get", "/metrics", None, "metrics", None, 200, None, []),
    ("get", "/v1/openapi.json", None, "openapi", None, 200, None, []),
    ("post", "/v1/messages", "messages:write", "sendMessage", "SendMessage", 202, "Message", []),
    ("get", "/v1/messages", "messages:read", "listMessages", None, 200, "MessagePage",
     [_q("numberId", NUMBER_ID), _q("contact", E164),
      _q("direction", {"enum": ["incoming", "outgoing"]})]),
    ("get", "/v1/messages/{message_id}", "messages:read", "getMessage", None, 200, "Message", []),
    ("get", "/v1/conversations", "conversations:read", "listConversations", None, 200,
     "ConversationPage", [_q("status", {"enum": ["open", "done"]}), _q("numberId", NUMBER_ID)]),
    ("get", "/v1/conversations/{conversation_id}", "conversations:read", "getConversation",
     None, 200, "Conversation", []),
    ("post", "/v1/conversations/{conversation_id}/status", "conversations:write",
     "setConversationStatus", "SetConversationStatus", 200, "Conversation", []),
    ("post", "/v1/inbound/messages", "ingest:write", "inboundMessage", "InboundMessage", 201,
     "Message", []),
    ("post", "/v1/inbound/calls", "ingest:write", "inboundCall", "InboundCall", 201, "Call", []),
    ("post", "/v1/webhooks", "webhooks:write", "createWebhook", "CreateWebhook", 201,
     "WebhookWithSecret", []),
    ("get", "/v1/webhooks", "webhooks:read", "listWebhooks", None, 200, "WebhookPage", []),
    ("get", "/v1/webhooks/{webhook_id}", "webhooks:read", "getWebhook", None, 200, "Webhook", []),
    ("patch", "/v1/webhooks/{webhook_id}", "webhooks:write", "updateWebhook", "UpdateWebhook",
     200, "Webhook", []),
    ("delete", "/v1/webhooks/{webhook_id}", "webhooks:write", "deleteWebhook", None, 204, None,
     []),
    ("get", "/v1/webhooks/{webhook_id}/secret", "webhooks:read", "getWebhookSecret", None, 200,
     "Secret", []),
    ("post", "/v1/webhooks/{webhook_id}/secret/rotate", "webhooks:write", "rotateWebhookSecret",
     None, 200, "Secret", []),
    ("get", "/v1/webhooks/{webhook_id}/deliveries", "webhooks:read", "listDeliveries", None, 200,
     "DeliveryPage", [_q("status", {"enum": ["pending", "delivered", "failed"]}),
                      _q("event", {"enum": sorted(EVENT_TYPES | {TEST_EVENT})})]),
    ("get", "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", "webhooks:read", "getDelivery",
     None, 200, "Delivery", []),
    ("post", "/v1/webhooks/{webhook_id}/test", "webhooks:write", "testWebhook", None, 202,
     "Delivery", []),
    ("post", "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", "webhooks:write",
     "retryDelivery", None, 202, "Delivery", []),
    ("post", "/v1/webhooks/{webhook_id}/recover", "webhooks:write", "recoverWebhook", "Recover",
     202, "Recovered", []),
    ("post", "/v1/events", "events:write", "publishEvent", "PublishEvent", 202, "EventEnvelope",
     [{"name": "Idempotency-Key", "in": "header", "schema": IDEMPOTENCY_KEY}]),
]  # fmt: skip


def _operation(op: Operation) -> dict[str, Any]:
    _method, path, scope, op_id, body, status, schema, params = op
    path_params = [
        {"name": part[1:-1], "in": "path", "required": True, "schema": STR}
        for part in path.split("/")
        if part.startswith("{")
    ]
    listing = schema is not None and schema.endswith("Page")
    success: dict[str, Any] = {"description": "success"}
    if schema is not None:
        success["content"] = {"application/json": {"schema": _ref(schema)}}
    elif status != 204:
        success["content"] = {"application/json": {"schema": {}}, "text/plain": {"schema": {}}}
    responses: dict[str, Any] = {str(status): success}
    # Any operation can be sent a malformed query or a body it does not take (400, 413, 415).
    responses.update({k: ERRORS[k] for k in ("400", "413", "415")})
    if scope is not None:
        responses.update({k: ERRORS[k] for k in ("401", "403", "404")})
        if op_id in ("retryDelivery", "recoverWebhook"):
            responses["409"] = ERRORS["409"]
        if op_id == "publishEvent":
            responses["422"] = ERRORS["422"]
    if path == "/readyz":
        responses["503"] = {
            "description": "not ready",
            "content": {"application/json": {"schema": {}}},
        }
    operation: dict[str, Any] = {
        "operationId": op_id,
        "parameters": path_params + (PAGE_PARAMS if listing else []) + params,
        "responses": responses,
    }
    if scope is not None:
        operation["security"] = [{"bearer": []}]
        operation["description"] = f"Scope: `{scope}`."
    else:
        operation["security"] = []
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    return operation


def document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op[1], {})[op[0]] = _operation(op)
    schemas = dict(RESOURCES)
    for name, model in BODIES.items():
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    return {
        "openapi": "3.1.0",
        "info": {"title": "dispatcher", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


_DOCUMENT = document()


def route_inputs() -> dict[tuple[str, str], RouteInputs]:
    """(METHOD, path template) -> the query parameters, body and key the operation declares."""
    return {
        (method.upper(), path): RouteInputs(
            query={p["name"]: p["schema"] for p in operation["parameters"] if p["in"] == "query"},
            body="requestBody" in operation,
            keyed=bool(operation["security"]),
        )
        for path, operations in _DOCUMENT["paths"].items()
        for method, operation in operations.items()
    }


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return json_response(_DOCUMENT)
