"""The rows the store hands out: one `NamedTuple` per shape a statement returns, one attribute
per column, in the statement's column order.

Nothing above the store sees an asyncpg `Record`: a caller reads `row.created_at`, typed, and
mypy holds it to the column's type. The types are what the driver returns (a `text` column is
a `str` even where a CHECK holds it to an enumeration of domain/enums.py, named beside it; the
API's builders make the member), so a row costs one constructor call and no conversion.

Why a `NamedTuple` and not a frozen dataclass: both are immutable and typed, but a row is made
per record, 100 per page, and a frozen dataclass's `__init__` (one `object.__setattr__` per
field) costs five times a tuple's: more than reading every column of the record by name, as
the API did before rows were typed.

Where the domain's rules read a record, the domain declares its type and the store builds it
like any row here (procrastinate's `jobs.Job`, declared in its core and built by its manager):
`MessageRow` and `CallRow` live in domain/resources.py, beside the builders of the resources
events carry, and are re-exported here.

A row is made from its record by position (`as_row`, `as_rows`): the cheapest way, and safe
because the record's column names are compared with the row's fields first (once per fetch),
so a statement and its row type that disagree fail loudly at the first call, never by
putting a value in the wrong attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

# Declared in the domain, next to the rules that read them; handed out like the rest.
from dispatcher.domain.endpoints import EndpointOptions
from dispatcher.domain.resources import CallRow as CallRow
from dispatcher.domain.resources import MessageRow as MessageRow
from dispatcher.store.database import Connection, Database, Record, StoreError
from dispatcher.store.queries import Bound

# Any row type (each is a NamedTuple: its `_fields` are the columns it is made from).
RowT = TypeVar("RowT", bound=NamedTuple)


class WorkspaceRow(NamedTuple):
    id: str
    name: str
    created_at: datetime


class PhoneNumberRow(NamedTuple):
    id: str
    number: str  # E.164
    workspace_id: str
    created_at: datetime


class ApiKeyRow(NamedTuple):
    """A key as listed: never its hash."""

    id: str
    workspace_id: str
    scopes: list[str]  # Scope values
    name: str | None
    created_at: datetime
    revoked_at: datetime | None
    webhook_id: str | None  # the webhook its `webhooks:poll` is limited to (None: any)


class WebhookRow(NamedTuple):
    """A subscription as the API shows it: its secrets stay in the database (of the secret
    headers, only their names come out: `options.secret_headers` maps each to WITHHELD).

    Its statements return its own columns, then the options' (domain/endpoints.py), which
    become one `EndpointOptions` (`NESTED`): the store's one column list of an endpoint."""

    id: str
    workspace_id: str
    created_at: datetime
    disabled_at: datetime | None
    disabled_reason: str | None  # DisabledReason
    options: EndpointOptions


class LockedWebhookRow(NamedTuple):
    """A webhook locked for a change: what the change is checked against, the values of its
    secret headers included (they never leave the store in an answer)."""

    id: str
    disabled_at: datetime | None
    headers: dict[str, str]
    secret_headers: dict[str, str]
    ordering: str  # Ordering
    auth: dict[str, Any] | None  # with its client secret (domain/endpoint_auth.py)
    mode: str  # WebhookMode


class EventRow(NamedTuple):
    """An event of the stream: its envelope as stored and sent (JSON text, never parsed
    here), and what the envelope does not carry."""

    id: str
    type: str
    payload: str
    created_at: datetime
    expunged: bool
    ordering_key: str | None


class DeliveryRow(NamedTuple):
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


class AttemptRow(NamedTuple):
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


class ConversationRow(NamedTuple):
    id: str
    workspace_id: str
    number_id: str
    contact: str
    status: str  # ConversationStatus
    created_at: datetime
    last_item_at: datetime
    last_item_kind: str | None  # ConversationItemKind


# Row types whose last field is a row of its own, made from the statement's last columns: the
# columns a statement returns for them are their other fields', then the nested row's.
NESTED: dict[type[Any], type[Any]] = {WebhookRow: EndpointOptions}


def columns(row_type: type[NamedTuple]) -> tuple[str, ...]:
    """The columns, in order, of the statements `row_type` is made from."""
    nested = NESTED.get(row_type)
    if nested is None:
        return row_type._fields
    nested_fields: tuple[str, ...] = nested._fields
    return row_type._fields[:-1] + nested_fields


def _maker(row_type: type[RowT]) -> Callable[[Record], RowT]:
    nested = NESTED.get(row_type)
    if nested is None:
        return row_type._make
    own, make_nested = len(row_type._fields) - 1, nested._make

    def make(record: Record) -> RowT:
        values = tuple(record)
        return row_type._make((*values[:own], make_nested(values[own:])))

    return make


def _check(row_type: type[NamedTuple], record: Record) -> None:
    """Refuse a record whose columns are not `row_type`'s, in its order."""
    found = tuple(record.keys())
    expected = columns(row_type)
    if found != expected:
        raise StoreError(
            f"{row_type.__name__} takes the columns {', '.join(expected)}; "
            f"the statement returned {', '.join(found)}"
        )


def as_row(row_type: type[RowT], record: Record) -> RowT:
    """`record` as a `row_type`."""
    _check(row_type, record)
    return _maker(row_type)(record)


def as_rows(row_type: type[RowT], records: Sequence[Record]) -> list[RowT]:
    """The records of one fetch as `row_type`s (they share their columns: checked once)."""
    if not records:
        return []
    _check(row_type, records[0])
    make = _maker(row_type)
    return [make(record) for record in records]


async def fetch_row(db: Database | Connection, sql: Bound, row_type: type[RowT]) -> RowT | None:
    """The row `sql` finds (or returns), as a `row_type`; None when there is none. Read on a
    connection of its own or, given one, on the caller's (inside its transaction). `sql` is a
    statement with its values (`SQL.name(...)`)."""
    if isinstance(db, Database):
        async with db.acquire() as conn:
            return await fetch_row(conn, sql, row_type)
    record = await db.fetchrow(*sql)
    return None if record is None else as_row(row_type, record)
