"""The rows the store hands out: one frozen dataclass per shape a statement returns, one
attribute per column, in the statement's column order.

Nothing above the store sees an asyncpg `Record`: a caller reads `row.created_at`, typed, and
mypy holds it to the column's type. The types are what the driver returns (a `text` column is
a `str` even where a CHECK holds it to an enumeration of domain/enums.py, named beside it; the
API's builders make the member), so a row costs one constructor call and no conversion.

A row is made from its record by position (`as_row`, `as_rows`): the cheapest way, and safe
because the record's column names are compared with the row's fields first (once per fetch),
so a statement and its row type that disagree fail loudly at the first call, never by
putting a value in the wrong attribute.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from dispatcher.domain.resources import MessageMedia
from dispatcher.store.database import Record, StoreError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

RowT = TypeVar("RowT", bound="DataclassInstance")


@dataclass(frozen=True, slots=True)
class WorkspaceRow:
    id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class PhoneNumberRow:
    id: str
    number: str  # E.164
    workspace_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiKeyRow:
    """A key as listed: never its hash."""

    id: str
    workspace_id: str
    scopes: list[str]  # Scope values
    name: str | None
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class WebhookRow:
    """A subscription as the API shows it: its secrets stay in the database (of the secret
    headers, only their names come out)."""

    id: str
    workspace_id: str
    url: str
    events: list[str]
    name: str | None
    number_ids: list[str] | None  # None: every number
    max_concurrency: int | None  # None: the setting's default
    created_at: datetime
    disabled_at: datetime | None
    disabled_reason: str | None  # DisabledReason
    headers: dict[str, str]
    payload_filter: dict[str, Any] | None  # a JSON object; None: no filter
    secret_header_names: list[str]
    rate_limit: int | None
    ordering: str  # Ordering


@dataclass(frozen=True, slots=True)
class LockedWebhookRow:
    """A webhook locked for a change: what the change is checked against, the values of its
    secret headers included (they never leave the store in an answer)."""

    id: str
    disabled_at: datetime | None
    headers: dict[str, str]
    secret_headers: dict[str, str]
    ordering: str  # Ordering


@dataclass(frozen=True, slots=True)
class EventRow:
    """An event of the stream: its envelope as stored and sent (JSON text, never parsed
    here), and what the envelope does not carry."""

    id: str
    type: str
    payload: str
    created_at: datetime
    expunged: bool
    ordering_key: str | None


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    """A delivery with its event's payload (the envelope's JSON text, as sent)."""

    id: str
    webhook_id: str
    attempts: int
    created_at: datetime
    delivered_at: datetime | None
    event_type: str
    last_error: str | None
    next_attempt_at: datetime | None
    response_ms: int | None
    response_status: int | None
    status: str  # DeliveryStatus
    payload: str
    expunged: bool


@dataclass(frozen=True, slots=True)
class AttemptRow:
    id: str
    delivery_id: str
    webhook_id: str
    attempt_number: int
    created_at: datetime  # when it started
    response_status: int | None
    response_ms: int
    outcome: str  # AttemptOutcome
    error: str | None
    response_body: str | None  # an excerpt; None once its event is expunged
    trigger: str  # AttemptTrigger


@dataclass(frozen=True, slots=True)
class ConversationRow:
    id: str
    workspace_id: str
    number_id: str
    contact: str
    status: str  # ConversationStatus
    created_at: datetime
    last_item_at: datetime
    last_item_kind: str | None  # ConversationItemKind


@dataclass(frozen=True, slots=True)
class MessageRow:
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


@dataclass(frozen=True, slots=True)
class CallRow:
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


@functools.cache
def columns(row_type: type[DataclassInstance]) -> tuple[str, ...]:
    """The columns a statement must return, in order, for `row_type` to be made from it."""
    return tuple(field.name for field in fields(row_type))


def _check(row_type: type[DataclassInstance], record: Record) -> None:
    found = tuple(record.keys())
    if found != columns(row_type):
        raise StoreError(
            f"{row_type.__name__} takes the columns {', '.join(columns(row_type))}; "
            f"the statement returned {', '.join(found)}"
        )


def as_row(row_type: type[RowT], record: Record) -> RowT:
    """`record` as a `row_type`."""
    _check(row_type, record)
    return row_type(*record)


def as_rows(row_type: type[RowT], records: Sequence[Record]) -> list[RowT]:
    """The records of one fetch as `row_type`s (they share their columns: checked once)."""
    if records:
        _check(row_type, records[0])
    return [row_type(*record) for record in records]
