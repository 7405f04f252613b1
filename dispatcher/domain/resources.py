"""The resources that events carry: messages, call records and the envelope around them.

Each resource is a `TypedDict`, the one description of its JSON: the builder below is checked
against it by mypy, and the OpenAPI document derives its schema from it (pydantic reads
TypedDicts as it reads models). They live in the domain, not the API, because the store writes
them into webhook payloads (`message.received`, `call.*`) in the same transaction as the row.
The API's other resources, and the API's use of these, are in `dispatcher/api/resources.py`.

The rows a message and a call record are built from (`MessageRow`, `CallRow`) are declared
here too, next to the builders that read them: the domain declares the records its rules
read, and the store makes them from its statements and hands them out (store/rows.py).

Why TypedDicts rather than `BaseModel`s: a response is a dict built straight from a row and
handed to orjson, and a list of 100 rows is built per request. A model instance per row, then a
dump back to a dict, would cost more than the rest of the request's Python together; a TypedDict
costs nothing at run time and still gives one checked shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, NamedTuple

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


# -- the rows they are made from -----------------------------------------------------------
#
# Declared here, beside the builders that read them, and built by the store (store/rows.py
# re-exports them with its other rows): one attribute per column, in the order of the
# statements that return them, which the store checks before it makes one by position.
# NamedTuples for the reason store/rows.py gives: a row is made per record, 100 per page.


class MessageRow(NamedTuple):
    id: str
    workspace_id: str
    number_id: str
    conversation_id: str
    direction: str  # Direction
    from_number: str
    to_number: str
    text: str | None  # None once expunged
    media: list[MessageMedia]
    status: str  # MessageStatus
    created_at: datetime
    expunged: bool


class CallRow(NamedTuple):
    id: str
    workspace_id: str
    number_id: str
    conversation_id: str
    direction: str  # Direction
    from_number: str
    to_number: str
    status: str  # CallStatus
    duration_seconds: int | None
    created_at: datetime


def _exchange(row: MessageRow | CallRow) -> Exchange:
    """The fields a message and a call record begin with, in their order."""
    return {
        "id": row.id,
        "createdAt": isoformat(row.created_at),
        "direction": Direction(row.direction),
        "from": row.from_number,
        "to": row.to_number,
    }


def message(row: MessageRow) -> Message:
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


def call(row: CallRow) -> Call:
    return {
        **_exchange(row),
        "status": CallStatus(row.status),
        "durationSeconds": row.duration_seconds,
        "numberId": row.number_id,
        "conversationId": row.conversation_id,
    }
