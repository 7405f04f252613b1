"""Request bodies: the one description of each, validated here and documented from here.

Strict types (no coercion), unknown fields refused. An enumeration field is not strict: in
Python mode, strict pydantic takes only enum members, and bodies arrive as JSON strings.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
)

from dispatcher.api.idempotency import IDEMPOTENCY_KEY_PROBLEM, IDEMPOTENCY_KEY_SHAPE
from dispatcher.domain.enums import CallStatus, ConversationStatus, Ordering, Scope
from dispatcher.domain.events import EVENT_TYPES, OPERATIONAL_TYPES, PUBLISHABLE_TYPES
from dispatcher.domain.json_values import json_problem
from dispatcher.domain.payload_filter import filter_problem
from dispatcher.domain.phone import is_e164
from dispatcher.domain.text import BLANK, is_blank, is_control, name_problem
from dispatcher.domain.urls import check_webhook_url


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


# RFC 6838 type/subtype names, optionally with `; name=value` parameters.
_MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
    r"(?:\s*;\s*[A-Za-z0-9!#$&^_.+-]+=(?:[A-Za-z0-9!#$&^_.+-]+|\"[^\"\\\x00-\x1f]*\"))*"
)


def _media_type(value: str) -> str:
    if not _MEDIA_TYPE.fullmatch(value):
        raise ValueError("must be a media type like image/jpeg")
    return value


E164 = Annotated[str, AfterValidator(_e164)]
# Webhook and media URLs: accepted only when the sender could attempt them (domain/urls.py).
WebhookUrl = Annotated[str, Field(min_length=1, max_length=2048), AfterValidator(check_webhook_url)]
MessageText = Annotated[str, Field(min_length=1, max_length=1600), AfterValidator(_text)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class SendMessage(Body):
    from_: str = Field(alias="from", min_length=1, max_length=64)
    to: E164
    text: MessageText


class SetConversationStatus(Body):
    status: ConversationStatus = Field(strict=False)


class Media(Body):
    contentType: Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_media_type)]
    url: WebhookUrl


class InboundMessage(Body):
    from_: E164 = Field(alias="from")
    to: E164
    # "" stays possible (a carrier may hand over an empty text, e.g. with media only).
    text: Annotated[str, Field(max_length=1600), AfterValidator(_optional_name)]
    media: list[Media] = Field(default_factory=list, max_length=10)


class InboundCall(Body):
    from_: E164 = Field(alias="from")
    to: E164
    status: CallStatus = Field(strict=False)
    durationSeconds: int | None = Field(default=None, ge=0, le=7 * 86400)


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
# most MAX_JSON_DEPTH levels (domain/json_values.py).
JsonObject = Annotated[dict[str, Any], AfterValidator(_json_value)]


def _filter(value: dict[str, Any] | None) -> dict[str, Any] | None:
    problem = None if value is None else json_problem(value) or filter_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


EventTypes = Annotated[list[str], Field(min_length=1, max_length=64), AfterValidator(_event_types)]
NumberIds = Annotated[list[str] | None, Field(max_length=1000), AfterValidator(_distinct)]
Name = Annotated[str | None, Field(max_length=255), AfterValidator(_optional_name)]
Concurrency = Annotated[int | None, Field(ge=1, le=1000)]
# Custom headers, name -> value: only their types here; the rules (which span both objects,
# and on PATCH the stored one) are domain/headers.py's, applied by the handler.
HeaderMap = dict[str, str] | None
# A JSON object that the event's data must contain (`{}` and null: no filter).
PayloadFilter = Annotated[dict[str, Any] | None, AfterValidator(_filter)]
# Requests per second to the endpoint, across every engine (docs/delivery.md, "Rate limits").
RateLimit = Annotated[int | None, Field(ge=1, le=10000)]


class CreateWebhook(Body):
    url: WebhookUrl
    events: EventTypes
    name: Name = None
    numberIds: NumberIds = None
    maxConcurrency: Concurrency = None
    headers: HeaderMap = None
    secretHeaders: HeaderMap = None
    filter: PayloadFilter = None
    rateLimit: RateLimit = None
    ordering: Ordering = Field(default=Ordering.NONE, strict=False)


class UpdateWebhook(Body):
    """PATCH: absent keeps; see the interface's table for null and empty values."""

    url: WebhookUrl | None = None
    events: EventTypes | None = None
    name: Name = None
    numberIds: NumberIds = None
    enabled: bool | None = None
    maxConcurrency: Concurrency = None
    rateLimit: RateLimit = None
    # null is the default, "none", as a null maxConcurrency is the default limit.
    ordering: Ordering | None = Field(default=None, strict=False)
    headers: HeaderMap = None
    secretHeaders: HeaderMap = None
    filter: PayloadFilter = None


class FilterTest(Body):
    """Try a payload filter: the webhook's saved one, or `filter` when given."""

    data: JsonObject
    filter: PayloadFilter = None


class Recover(Body):
    since: AwareDatetime = Field(strict=False)
    until: AwareDatetime | None = Field(default=None, strict=False)


def _ordering_key(value: str) -> str:
    if any(is_control(char) for char in value):
        raise ValueError("must not contain control characters")
    return value


# An event's ordering lane (docs/webhooks.md, "Ordered delivery"): any text, no controls.
OrderingKey = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_ordering_key)]


def _idempotency_key(value: str) -> str:
    if not IDEMPOTENCY_KEY_SHAPE.fullmatch(value):
        raise ValueError(IDEMPOTENCY_KEY_PROBLEM)
    return value


class PublishEvent(Body):
    type: str = Field(min_length=1, max_length=100)
    numberId: str | None = None
    data: JsonObject
    orderingKey: OrderingKey | None = None

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value in OPERATIONAL_TYPES:
            raise ValueError(f"{value} is published by the service itself (see docs/events.md)")
        if value not in PUBLISHABLE_TYPES:
            raise ValueError(f"unknown event type: {value} (see docs/events.md)")
        return value

    @field_validator("data")
    @classmethod
    def _has_id(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("id"), str) or not value["id"]:
            raise ValueError("must carry `id`, a non-empty string")
        return value


# How many events one POST /v1/events/batch takes.
MAX_BATCH_EVENTS = 100


class BatchEvent(PublishEvent):
    """One event of a batch: what POST /v1/events takes, and its own Idempotency-Key (the
    header's rules, for this event alone)."""

    idempotencyKey: Annotated[str, AfterValidator(_idempotency_key)] | None = None


class PublishBatch(Body):
    events: list[BatchEvent] = Field(min_length=1, max_length=MAX_BATCH_EVENTS)


# -- the admin API (api/admin.py) -------------------------------------------------------------

MAX_NAME_LENGTH = 255


def _name(value: str) -> str:
    problem = name_problem(value, MAX_NAME_LENGTH)
    if problem is not None:
        raise ValueError(problem)
    return value


def _optional_key_name(value: str | None) -> str | None:
    """Absent, null and `""` leave a key unnamed; any other name follows the name rules."""
    return _name(value) if value else None


def _distinct_scopes(value: list[Scope]) -> list[Scope]:
    if len(set(value)) != len(value):
        raise ValueError("must not repeat a scope")
    return value


class CreateWorkspace(Body):
    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH), AfterValidator(_name)]


class AddNumber(Body):
    number: E164


class CreateKey(Body):
    scopes: Annotated[
        list[Annotated[Scope, Field(strict=False)]],
        Field(min_length=1, max_length=len(Scope)),
        AfterValidator(_distinct_scopes),
    ]
    name: Annotated[
        str | None, Field(max_length=MAX_NAME_LENGTH), AfterValidator(_optional_key_name)
    ] = None
