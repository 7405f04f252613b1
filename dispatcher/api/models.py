"""Request bodies: the one description of each, validated and documented from it. Here: the
base model and the field types bodies share (the webhook's options' among them); each
resource's bodies live in its own module (api/<resource>.py), written the same way.

Strict types (no coercion), unknown fields refused. An enumeration field is not strict: in
Python mode, strict pydantic takes only enum members, and bodies arrive as JSON strings.

The document (api/framework/openapi.py) is as strict as these models: a rule a validator enforces
(`AfterValidator`) is stated beside it for JSON Schema (`documented`), from the same domain
constant, so that generated clients and fuzzers send only what the server takes. What no
schema can say (a number the workspace owns, a rule across two fields) is in the field's
`description`. A PATCH field that may not be null is `MISSING` when absent (pydantic's
sentinel): it is optional in the document without being nullable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from dispatcher.api.framework.openapi import JSON_VALUE_REF
from dispatcher.domain import endpoints, headers, ids, payload_filter
from dispatcher.domain.events import EVENT_TYPES
from dispatcher.domain.json_values import json_problem
from dispatcher.domain.payload_filter import MAX_FILTER_BYTES, filter_problem
from dispatcher.domain.phone import E164_PATTERN, is_e164
from dispatcher.domain.text import (
    BLANK,
    NO_NUL_PATTERN,
    is_blank,
    unprintable_class,
    visible_text_pattern,
)
from dispatcher.domain.urls import check_webhook_url, url_pattern


def documented(pattern: str | Callable[[], str] | None = None, **facts: Any) -> Any:
    """The JSON Schema facts of a rule a validator enforces: `pattern` (a callable is called
    when the document is built, not at import) and any other keywords."""

    def extra(schema: dict[str, Any]) -> None:
        if pattern is not None:
            schema["pattern"] = pattern() if callable(pattern) else pattern
        schema.update(facts)

    return Field(json_schema_extra=extra)


def _json_object(**facts: Any) -> WithJsonSchema:
    """A JSON object of any JSON values (strings without NUL, the body parser's rule)."""
    return WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL_PATTERN},
            "additionalProperties": {"$ref": JSON_VALUE_REF},
            **facts,
        },
        mode="validation",
    )


def _e164(value: str) -> str:
    if not is_e164(value):
        raise ValueError("must be a phone number in E.164 form, like +15555550123")
    return value


OptionalText = TypeVar("OptionalText", str, str | None)


def _text(value: str) -> str:
    if is_blank(value):
        raise ValueError(BLANK)
    return value


def _optional_name(value: OptionalText) -> OptionalText:
    """`""` (and null) clear an optional name; white space or invisible characters alone are
    refused like any other blank text."""
    if value and is_blank(value):
        raise ValueError(BLANK)
    return value


E164 = Annotated[str, AfterValidator(_e164), documented(f"^{E164_PATTERN}$")]
# Webhook and media URLs: accepted only when the sender could attempt them (domain/urls.py).
WebhookUrl = Annotated[
    str,
    Field(min_length=1, max_length=endpoints.MAX_URL_LENGTH),
    AfterValidator(check_webhook_url),
    documented(
        lambda: url_pattern(unprintable_class()),
        description='an absolute http:// or https:// URL (docs/webhooks.md, "Which URLs are '
        'accepted"); a host name in Unicode is accepted too, in its IDNA form',
    ),
]
MessageText = Annotated[
    str,
    Field(min_length=1, max_length=1600),
    AfterValidator(_text),
    documented(visible_text_pattern),
]
# Any text of a body: no NUL (api/framework/http.py refuses it in every string).
Text = Annotated[str, documented(NO_NUL_PATTERN)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


def _event_types(value: list[str]) -> list[str]:
    unknown = [t for t in value if t not in EVENT_TYPES]
    if unknown:
        raise ValueError(f"unknown event type: {', '.join(unknown)} (see docs/events.md)")
    if len(set(value)) != len(value):
        raise ValueError("must not repeat an event type")
    return value


def _distinct(value: list[str] | None) -> list[str] | None:
    if value is not None and len(set(value)) != len(value):
        raise ValueError("must not repeat a number")
    return value


def _json_value(value: dict[str, Any]) -> dict[str, Any]:
    problem = json_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# A free-form JSON object the service stores and serves back (an event's `data`): nested at
# most MAX_JSON_DEPTH levels, numbers within 64 bits (domain/json_values.py).
JsonObject = Annotated[dict[str, Any], AfterValidator(_json_value), _json_object()]


def _filter(value: dict[str, Any] | None) -> dict[str, Any] | None:
    problem = None if value is None else json_problem(value) or filter_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


EventType = Annotated[str, documented(enum=sorted(EVENT_TYPES))]
EventTypes = Annotated[
    list[EventType],
    Field(min_length=1, max_length=endpoints.MAX_EVENT_TYPES),
    AfterValidator(_event_types),
    documented(uniqueItems=True),
]
NumberId = Annotated[str, documented(ids.pattern(ids.NUMBER))]
NumberIds = Annotated[
    list[NumberId],
    Field(max_length=endpoints.MAX_NUMBER_IDS),
    AfterValidator(_distinct),
    documented(uniqueItems=True, description="numbers of the workspace (their ids)"),
]
Name = Annotated[
    str,
    Field(max_length=endpoints.MAX_NAME_LENGTH),
    AfterValidator(_optional_name),
    documented(lambda: visible_text_pattern(may_be_empty=True)),
]
Concurrency = Annotated[int, Field(ge=endpoints.MIN_CONCURRENCY, le=endpoints.MAX_CONCURRENCY)]
# Custom headers, name -> value. Each name and value is held to domain/headers.py's rules
# (the document states them); the rules across both objects (and on PATCH the stored one) are
# applied by the handler.
HeaderMap = Annotated[
    dict[str, str],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": headers.NAME_PATTERN},
            "additionalProperties": {"type": "string", "pattern": headers.VALUE_PATTERN},
            "maxProperties": headers.MAX_HEADERS,
            "description": f"at most {headers.MAX_HEADERS} headers and "
            f"{headers.MAX_HEADER_BYTES} bytes of names and values across headers and "
            "secretHeaders, no name in both (compared case-insensitively)",
        },
        mode="validation",
    ),
]
# A JSON object that the event's data must contain (`{}` and null: no filter).
PayloadFilter = Annotated[
    dict[str, Any],
    AfterValidator(_filter),
    _json_object(
        description=f"at most {MAX_FILTER_BYTES} bytes of compact JSON, "
        f"{payload_filter.MAX_FILTER_VALUES} values in all (nested ones included) and "
        f"{payload_filter.MAX_FILTER_ARRAY_ELEMENTS} array elements in all; arrays hold only "
        f"scalars of at most {payload_filter.MAX_FILTER_ARRAY_ELEMENT_BYTES} bytes of JSON "
        '(docs/webhooks.md, "Payload filters")'
    ),
]
# Requests per second to the endpoint, across every engine (docs/delivery.md, "Rate limits").
RateLimit = Annotated[int, Field(ge=endpoints.MIN_RATE_LIMIT, le=endpoints.MAX_RATE_LIMIT)]
