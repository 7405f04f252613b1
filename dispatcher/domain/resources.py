"""The resources that events carry: messages, call records and the envelope around them.

Each resource is a `TypedDict`, the one description of its JSON: the builder below is checked
against it by mypy, and the OpenAPI document derives its schema from it (pydantic reads
TypedDicts as it reads models). They live in the domain, not the API, because the store writes
them into webhook payloads (`message.received`, `call.*`) in the same transaction as the row.
The API's other resources, and the API's use of these, are in `dispatcher/api/resources.py`.

Why TypedDicts rather than `BaseModel`s: a response is a dict built straight from a row and
handed to orjson, and a list of 100 rows is built per request. A model instance per row, then a
dump back to a dict, would cost more than the rest of the request's Python together; a TypedDict
costs nothing at run time and still gives one checked shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Protocol

from pydantic import WithJsonSchema
from typing_extensions import TypedDict

from dispatcher.domain.clock import isoformat
from dispatcher.domain.enums import CallStatus, Direction, MessageStatus

# Instants are rendered by `clock.isoformat` (UTC, milliseconds, `Z`), not by the serialiser.
Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]


class MessageMedia(TypedDict):
    """A file attached to a message, as the carrier handed it over."""

    contentType: str
    url: str


# What a message and a call record begin with, in the JSON's order: which, when, which way,
# between whom. A base, not a schema: the OpenAPI document shows each resource whole.
# (Functional form: `from` is a Python keyword.)
Exchange = TypedDict(
    "Exchange",
    {
        "id": str,
        "createdAt": Timestamp,
        "direction": Direction,
        "from": str,
        "to": str,
    },
)


class Message(Exchange):
    text: str | None
    media: list[MessageMedia]
    numberId: str
    conversationId: str
    status: MessageStatus
    expunged: bool


# Set, not written as a docstring: the OpenAPI document shows it as it is, line breaks too.
Message.__doc__ = (
    "An SMS message to or from one of the workspace's numbers. Once expunged, its `text` is "
    "null (and so in the events that carried it)."
)


class Call(Exchange):
    """A call record on one of the workspace's numbers."""

    status: CallStatus
    durationSeconds: int | None
    numberId: str
    conversationId: str


class EventEnvelope(TypedDict):
    """What every webhook delivery carries, and what `POST /v1/events` answers. Its bytes are
    made once, when the event is stored, and sent as they are on every attempt; an expunge
    of the event rewrites them with `data` null (and nothing is sent any more)."""

    id: str
    type: str
    apiVersion: str
    createdAt: Timestamp
    data: Mapping[str, Any] | None


class ExchangeFields(Protocol):
    """What a message and a call record are both made from: the columns the store's
    `MessageRow` and `CallRow` share (the domain names the columns it reads; the store
    declares the rows)."""

    @property
    def id(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def direction(self) -> str: ...
    @property
    def from_number(self) -> str: ...
    @property
    def to_number(self) -> str: ...
    @property
    def number_id(self) -> str: ...
    @property
    def conversation_id(self) -> str: ...


def _exchange(row: ExchangeFields) -> Exchange:
    """The fields a message and a call record begin with, in their order."""
    return {
        "id": row.id,
        "createdAt": isoformat(row.created_at),
        "direction": Direction(row.direction),
        "from": row.from_number,
        "to": row.to_number,
    }


class MessageFields(ExchangeFields, Protocol):
    """What a message is made from: the store's `MessageRow`."""

    @property
    def text(self) -> str | None: ...
    @property
    def media(self) -> list[MessageMedia]: ...
    @property
    def status(self) -> str: ...
    @property
    def expunged(self) -> bool: ...


def message(row: MessageFields) -> Message:
    return {
        **_exchange(row),
        "text": row.text,
        "media": row.media,
        "numberId": row.number_id,
        "conversationId": row.conversation_id,
        "status": MessageStatus(row.status),
        "expunged": row.expunged,
    }


def erase_text(data: Mapping[str, Any]) -> dict[str, Any]:
    """A message's data (as an event carries it) without its text: `text` null, `expunged`
    true, the rest as it was, in its order."""
    return {**data, "text": None, "expunged": True}


class CallFields(ExchangeFields, Protocol):
    """What a call record is made from: the store's `CallRow`."""

    @property
    def status(self) -> str: ...
    @property
    def duration_seconds(self) -> int | None: ...


def call(row: CallFields) -> Call:
    return {
        **_exchange(row),
        "status": CallStatus(row.status),
        "durationSeconds": row.duration_seconds,
        "numberId": row.number_id,
        "conversationId": row.conversation_id,
    }
