"""The OpenAPI 3.1 document of routes as declared (served at `GET /v1/openapi.json` by
api/registry.py, for every route of the API).

Nothing here describes a route or a resource by hand. The routes are the resource modules'
route tables (api/framework/routing.py), each route as its one declaration gives it (method,
path, credential; status, body, query, headers, answer: api/framework/operations.py). The
schemas are pydantic's JSON schemas of the types those declarations name: the request models
and the response TypedDicts of the resource modules. A test checks that every route of the
app is documented and every documented route exists.

Generated clients read it (tests/api/test_generated_client.py builds one with
openapi-python-client): every schema has a title of its own (its component name, never
`Page` nine times), an optional request field has no `default: null` (absent is not null to
a PATCH), and every rule the models enforce is stated (api/models.py, `documented`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from dispatcher import __version__
from dispatcher.api.framework.admission import EXEMPT_PATHS
from dispatcher.api.framework.operations import Route, operation_id
from dispatcher.api.framework.shapes import ErrorBody, Page
from dispatcher.domain import ids, json_values
from dispatcher.domain.enums import ALSO_GRANTED_BY
from dispatcher.domain.events import API_VERSION, EVENT_TYPE_PATTERN
from dispatcher.domain.resources import EventEnvelope
from dispatcher.domain.text import NO_NUL_PATTERN

REF_TEMPLATE = "#/components/schemas/{model}"
ERROR = "Error"
JSON_VALUE = "JsonValue"
# The document's name for any JSON value a body may carry (defined below, used by models).
JSON_VALUE_REF = REF_TEMPLATE.format(model=JSON_VALUE)
# Any JSON value a body may carry (an event's data, a filter): the body parser (framework/http.py)
# refuses NUL in every string and every key. Written without `type` or `anyOf`: each keyword
# applies to the values of its kind only (`pattern` to strings, `items` to arrays, ...), so
# generators that cannot read a recursive union (openapi-python-client) read it as any value.
JSON_VALUE_SCHEMA: dict[str, Any] = {
    "title": JSON_VALUE,
    "description": "any JSON value; no string or key holds NUL (\\u0000), no number lies "
    "beyond 64-bit integers, and objects and arrays nest at most "
    f"{json_values.MAX_JSON_DEPTH} levels",
    "pattern": NO_NUL_PATTERN,
    "minimum": json_values.MIN_NUMBER,
    "maximum": json_values.MAX_NUMBER,
    "items": {"$ref": JSON_VALUE_REF},
    "propertyNames": {"pattern": NO_NUL_PATTERN},
    "additionalProperties": {"$ref": JSON_VALUE_REF},
}


# The refusals, by status; every route may answer those in ALWAYS, a keyed route those in KEYED
# too, and a route declares any other it may give (`errors=` in its declaration).
ERRORS = {
    400: "invalid request: a field, header or query parameter is malformed, unknown or "
    "repeated, or a body was sent where none is taken",
    401: "missing or unknown API key",
    403: "the key lacks the scope",
    404: "not found",
    409: "conflict with the resource's state",
    413: "body over 1 MiB",
    415: "body is not application/json",
    422: "the Idempotency-Key was already used with another request",
    503: "overloaded (the process has as many requests in progress as it takes, or no database "
    "connection came free in time) or the database is unavailable; nothing was changed; "
    "`Retry-After` says when to retry. Code `outcome_unknown`: the connection was lost while "
    "the write was committing and it may have been stored: retry with the same "
    "Idempotency-Key",
}
# The admin API's refusals that differ from a workspace route's (its routes are all keyed).
ADMIN_ERRORS = {
    401: "missing or wrong admin token",
    403: "a workspace API key was sent: the admin API takes the admin token only",
    404: "not found; every admin route answers 404 while DISPATCHER_ADMIN_TOKEN is unset",
}
ADMIN_TAG = "admin"
ANY_KEY = "Any valid API key, whatever its scopes."
ALWAYS = (400, 413, 415)  # any route can be sent a malformed query or a body it does not take
KEYED = (401, 403, 404)
# Every route but the probes and /metrics can be refused as overloaded (api/framework/admission.py).
OVERLOAD = (503,)

SchemaMode = Literal["validation", "serialization"]

# The id each path parameter takes: any other value can name nothing (the route answers 404).
PATH_IDS = {
    "conversation_id": ids.CONVERSATION,
    "delivery_id": ids.DELIVERY,
    "event_id": ids.EVENT,
    "key_id": ids.API_KEY,
    "message_id": ids.MESSAGE,
    "portal_session_id": ids.PORTAL_SESSION,
    "webhook_id": ids.WEBHOOK,
    "workspace_id": ids.WORKSPACE,
}


# Path parameters that are not ids, with the pattern of their values (an event type: the
# catalog answers 404 for one it does not list).
PATH_PATTERNS = {"event_type": f"^{EVENT_TYPE_PATTERN}$"}


def _path_pattern(name: str) -> str:
    return PATH_PATTERNS.get(name) or ids.pattern(PATH_IDS[name])


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(model=name)}


def component_name(shape: Any) -> str:
    """`Message` for Message, `MessagePage` for Page[Message], `EventPage` for
    Page[StoredEvent] (an `Annotated` type is named after the type it is documented as)."""
    if get_origin(shape) is Page:
        (item,) = get_args(shape)
        return f"{component_name(item)}Page"
    if get_origin(shape) is Annotated:
        documented_as = [m for m in shape.__metadata__ if hasattr(m, "get_pydantic_core_schema")]
        return component_name(_documented_type(documented_as[0]))
    return str(shape.__name__)


def _documented_type(annotation: Any) -> Any:
    """The type a `GetPydanticSchema(lambda _, handler: handler(T))` hands to pydantic: T."""

    class _Seen(Exception):
        pass

    def handler(shape: Any) -> Any:
        raise _Seen(shape)

    try:
        annotation.get_pydantic_core_schema(None, handler)
    except _Seen as seen:
        return seen.args[0]
    raise TypeError(f"{annotation!r} does not name the type it documents")


def _parameters(route: Route) -> list[dict[str, Any]]:
    operation = route.operation
    path = [
        {
            "name": part[1:-1],
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": _path_pattern(part[1:-1])},
        }
        for part in route.path.split("/")
        if part.startswith("{")
    ]
    return [
        *path,
        *(
            {"name": name, "in": "query", "schema": dict(schema)}
            for name, schema in route.query.parameters().items()
        ),
        *({"name": h.name, "in": "header", "schema": dict(h.schema)} for h in operation.headers),
    ]


def _keyed_refusals(route: Route) -> tuple[int, ...]:
    """A scoped or admin route's 401, 403 and 404; a route open to any key can only refuse
    the key."""
    if route.scope is not None or route.admin:
        return KEYED
    return (401,) if route.keyed else ()


def _responses(route: Route) -> dict[str, Any]:
    operation = route.operation
    success: dict[str, Any] = {"description": "success"}
    if operation.response is not None:
        success["content"] = {
            "application/json": {"schema": _ref(component_name(operation.response))}
        }
    elif operation.status != 204:
        # Not described: the probes, /metrics (text) and this document.
        success["content"] = {"application/json": {"schema": {}}, "text/plain": {"schema": {}}}
    responses: dict[str, Any] = {str(operation.status): success}
    overload = () if route.path in EXEMPT_PATHS else OVERLOAD
    refusals = (*ALWAYS, *_keyed_refusals(route), *operation.errors, *overload)
    described = {**ERRORS, **ADMIN_ERRORS} if route.admin else ERRORS
    for status in refusals:
        responses[str(status)] = {
            "description": described[status],
            "content": {"application/json": {"schema": _ref(ERROR)}},
        }
    for status, description in (operation.also or {}).items():
        json_only = {"application/json": success["content"]["application/json"]}
        responses[str(status)] = {"description": description, "content": json_only}
    return responses


def _operation(route: Route) -> dict[str, Any]:
    described: dict[str, Any] = {
        "operationId": operation_id(route.handler),
        "parameters": _parameters(route),
        "responses": _responses(route),
    }
    if route.admin:
        described["tags"] = [ADMIN_TAG]
        described["security"] = [{ADMIN_TAG: []}]
        described["description"] = (
            "Admin API: `Authorization: Bearer <DISPATCHER_ADMIN_TOKEN>`; a workspace API key is "
            "refused (403)."
        )
    elif route.scope is not None:
        described["security"] = [{"bearer": []}]
        described["description"] = f"Scope: `{route.scope}`." + (
            f" A key with `{also}` may call it too."
            if (also := ALSO_GRANTED_BY.get(route.scope)) is not None
            else ""
        )
    elif route.keyed:
        described["security"] = [{"bearer": []}]
        described["description"] = ANY_KEY
    else:
        described["security"] = []
    if route.operation.body is not None:
        described["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(route.operation.body.__name__)}},
        }
    return described


def _shapes(declared: Iterable[Route]) -> dict[str, tuple[SchemaMode, Any]]:
    """Every type the routes name, by component name: bodies as validated, answers as sent."""
    shapes: dict[str, tuple[SchemaMode, Any]] = {ERROR: ("serialization", ErrorBody)}
    for route in declared:
        if route.operation.response is not None:
            name = component_name(route.operation.response)
            shapes[name] = ("serialization", route.operation.response)
        if route.operation.body is not None:
            shapes[route.operation.body.__name__] = ("validation", route.operation.body)
    return shapes


class _Schemas(GenerateJsonSchema):
    """pydantic's generator without a title on every field (`"title": "Webhookid"`): the
    property's name says it already; and without `default: null`: an optional field is
    left out, and a client that fills in the default sends null where absent was meant."""

    def field_title_should_be_set(self, schema: CoreSchema) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        if schema.get("default", ...) is None:
            return self.generate_inner(schema["schema"])
        return super().default_schema(schema)


def _rename_refs(value: Any, renames: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {
            key: renames.get(item, item) if key == "$ref" else _rename_refs(item, renames)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_rename_refs(item, renames) for item in value]
    return value


def schemas(shapes: Mapping[str, tuple[SchemaMode, Any]]) -> dict[str, Any]:
    """The components: pydantic's JSON schemas of `shapes` and of every type they use, under
    one set of definitions, each top-level shape under the name given (pydantic would call
    Page[Message] `Page_Message_`)."""
    inputs = [(name, mode, TypeAdapter(shape)) for name, (mode, shape) in shapes.items()]
    tops, definitions = TypeAdapter.json_schemas(
        inputs, ref_template=REF_TEMPLATE, schema_generator=_Schemas
    )
    found = definitions.get("$defs", {})
    renames: dict[str, str] = {}
    for (name, _mode), top in tops.items():
        ref = top.get("$ref")
        if ref is None:
            found[name] = top
        elif ref != _ref(name)["$ref"]:
            renames[ref] = _ref(name)["$ref"]
            found[name] = found.pop(ref.rsplit("/", 1)[1])
    found[JSON_VALUE] = JSON_VALUE_SCHEMA
    # Each schema titled by its component name: pydantic titles every Page[...] `Page`, and a
    # generator that names its classes by title keeps one of them.
    titled = {name: {**schema, "title": name} for name, schema in found.items()}
    return dict(sorted(_rename_refs(titled, renames).items()))


JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schema(shape: Any) -> dict[str, Any]:
    """The JSON Schema (2020-12) of `shape` on its own: its definitions under `$defs`, with
    `$schema` naming the dialect (pydantic's generator, as the document's components use it)."""
    schema = TypeAdapter(shape).json_schema(mode="serialization", schema_generator=_Schemas)
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


@dataclass(frozen=True)
class EventDoc:
    """An event type as the document's `webhooks` show it: the envelope of a delivery, with
    `type` that name and `data` of type `data` (a TypedDict, a component of its own)."""

    name: str
    description: str
    data: Any
    example: Mapping[str, Any]


# The headers of every delivery (Standard Webhooks; docs/webhooks.md, "Secrets and
# signatures").
DELIVERY_HEADERS = {
    "webhook-id": "the delivery's id (`WD…`): the same on every attempt",
    "webhook-timestamp": "when this attempt was signed, in seconds since the epoch",
    "webhook-signature": "`v1,<base64 HMAC-SHA256>` of `id.timestamp.body`, space-separated "
    "when a rotation's previous secret signs too",
}
ENVELOPE = "EventEnvelope"
# The envelope around each example's data (its id and time are examples too).
EXAMPLE_EVENT_ID = "EV1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f"
EXAMPLE_CREATED_AT = "2026-11-21T04:36:12.123Z"


def _webhook(event: EventDoc) -> dict[str, Any]:
    """One event type as a `webhooks` entry: the POST a subscription's URL receives."""
    envelope = {
        "allOf": [_ref(ENVELOPE)],
        "type": "object",
        "properties": {
            "type": {"const": event.name},
            "data": {"anyOf": [_ref(component_name(event.data)), {"type": "null"}]},
        },
    }
    example = {
        "id": EXAMPLE_EVENT_ID,
        "type": event.name,
        "apiVersion": API_VERSION,
        "createdAt": EXAMPLE_CREATED_AT,
        "data": dict(event.example),
    }
    return {
        "post": {
            "operationId": "event_" + event.name.replace(".", "_"),
            "summary": event.name,
            "description": event.description,
            "parameters": [
                {
                    "name": name,
                    "in": "header",
                    "required": True,
                    "description": description,
                    "schema": {"type": "string"},
                }
                for name, description in DELIVERY_HEADERS.items()
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": envelope, "example": example}},
            },
            "responses": {
                "2XX": {"description": "received: any 2xx ends the delivery"},
                "410": {"description": "gone: the webhook is disabled (reason `gone`)"},
                "default": {
                    "description": "any other answer, or none in time, is retried on the "
                    "webhook's schedule"
                },
            },
        }
    }


def document(declared: Sequence[Route], events: Sequence[EventDoc] = ()) -> dict[str, Any]:
    """The document of the routes `declared`, in their order (api/registry.py hands it every
    route of the API), and of the event types `events` a subscription's URL receives (its
    top-level `webhooks`)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in declared:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    shapes = _shapes(declared)
    if events:
        shapes[ENVELOPE] = ("serialization", EventEnvelope)
    for event in events:
        shapes[component_name(event.data)] = ("serialization", event.data)
    webhooks = {event.name: _webhook(event) for event in events}
    return {
        "openapi": "3.1.0",
        "info": {"title": "dispatcher", "version": __version__},
        "paths": paths,
        "webhooks": webhooks,
        "tags": [
            {
                "name": ADMIN_TAG,
                "description": "Tenants, their numbers and their keys; served only while "
                "DISPATCHER_ADMIN_TOKEN is set (docs/admin.md).",
            }
        ],
        "components": {
            "schemas": schemas(shapes),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a workspace API key",
                },
                ADMIN_TAG: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the admin token (DISPATCHER_ADMIN_TOKEN)",
                },
            },
        },
    }
