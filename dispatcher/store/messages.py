"""Messages and call records. Each is written with its conversation's update in one statement
(the thread's upsert as its first step), and an incoming one with
its event in the same transaction, so an event exists exactly when the change it describes
does. (A message's text is erased by store/expunge.py.) Statements in queries/messages.sql."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from dispatcher.domain import ids, resources
from dispatcher.domain.enums import CallStatus, ConversationItemKind, Direction, MessageStatus
from dispatcher.domain.resources import MessageMedia
from dispatcher.errors import DatabaseUnavailable, OutcomeUnknown
from dispatcher.store.database import Connection, Database, fetch_one
from dispatcher.store.events import NewEvent, append_event, append_events
from dispatcher.store.idempotency import IDEMPOTENCY_WINDOW, check_replay
from dispatcher.store.notifications import DELIVERIES_CHANNEL
from dispatcher.store.pages import Page, Position, fetch_page, paging
from dispatcher.store.queries import Queries, Statement
from dispatcher.store.rows import CallRow, MessageRow, as_row, as_rows, fetch_row


class SQL(Queries, file="messages.sql"):
    create_outgoing: Statement
    create_incoming: Statement
    create_call: Statement
    message: Statement
    messages_page: Statement
    claim_carrier_due: Statement
    move_statuses: Statement
    lock_idempotency_key: Statement
    find_idempotent_message: Statement


# A conversation's item: a message or a call record.
ItemT = TypeVar("ItemT", MessageRow, CallRow)

# The conversation's parameters of a `create_` statement (messages.sql).
Touch = dict[str, Any]


def _touch(
    workspace_id: str,
    number_id: str,
    contact: str,
    at: datetime,
    kind: ConversationItemKind,
    *,
    incoming: bool,
) -> Touch:
    """The conversation's parameters of a `create_` statement (messages.sql)."""
    return {
        "conversation_id": ids.new_id(ids.CONVERSATION),
        "workspace_id": workspace_id,
        "number_id": number_id,
        "contact": contact,
        "now": at,
        "kind": kind,
        "incoming": incoming,
    }


async def _create(
    conn: Connection,
    row_type: type[ItemT],
    statement: Statement,
    touch: Touch,
    item: Mapping[str, Any],
) -> ItemT:
    """An item and its conversation's update, in one statement (`statement`, one of the
    `create_` ones): the conversation's parameters, then the item's."""
    return as_row(row_type, await fetch_one(conn, statement(**touch, **item)))


async def _create_with_event(
    db: Database,
    row_type: type[ItemT],
    statement: Statement,
    touch: Touch,
    item: Mapping[str, Any],
    event_type: str,
    resource: Callable[[ItemT], Mapping[str, Any]],
    now: datetime,
) -> ItemT:
    """`_create`, and in the same transaction the event the item makes (`event_type`, about
    its `resource`), in its conversation's ordering lane; then the engines are woken."""
    async with db.transaction() as conn:
        row = await _create(conn, row_type, statement, touch, item)
        await append_event(
            conn,
            workspace_id=row.workspace_id,
            event_type=event_type,
            number_id=row.number_id,
            data=resource(row),
            source="inbound",
            created_at=now,
            ordering_key=row.conversation_id,
        )
    db.wake(DELIVERIES_CHANNEL)
    return row


async def create_outgoing(
    db: Database,
    *,
    workspace_id: str,
    number_id: str,
    from_number: str,
    to_number: str,
    text: str,
    now: datetime,
    carrier_due_at: datetime,
    idempotency_key: str | None = None,
    fingerprint: bytes | None = None,
) -> tuple[MessageRow, bool]:
    """The message and its conversation's update in one statement; returns (message,
    created).

    Without a key: one round trip and one commit, atomic without a transaction of our own.
    With one, the rules of events' keys (store/idempotency.py): a key seen in this workspace
    within 24 hours returns the first message as it is now, and sends nothing, if the
    request's fingerprint is the first one's; another request under the key raises
    IdempotencyKeyReused (and sends nothing). The lookup and the insert then share a
    transaction under the key's advisory lock, so requests racing under one key send once.
    """
    touch = _touch(
        workspace_id, number_id, to_number, now, ConversationItemKind.SMS_MESSAGE, incoming=False
    )
    message_id = ids.new_id(ids.MESSAGE)  # chosen here: looked for if the commit's answer is lost
    item = {
        "id": message_id,
        "from_number": from_number,
        "text": text,
        "carrier_due_at": carrier_due_at,
        "idempotency_key": idempotency_key,
        "fingerprint": fingerprint,
    }
    try:
        if idempotency_key is None:
            async with db.acquire(commits=True) as conn:
                return await _create(conn, MessageRow, SQL.create_outgoing, touch, item), True
        async with db.transaction() as conn:
            await conn.execute(
                *SQL.lock_idempotency_key(
                    workspace_id=workspace_id, idempotency_key=idempotency_key
                )
            )
            existing = await conn.fetchrow(
                *SQL.find_idempotent_message(
                    workspace_id=workspace_id,
                    idempotency_key=idempotency_key,
                    since=now - IDEMPOTENCY_WINDOW,
                )
            )
            if existing is not None:
                check_replay(existing["request_fingerprint"], fingerprint)
                first = await fetch_row(
                    conn,
                    SQL.message(workspace_id=workspace_id, message_id=existing["id"]),
                    MessageRow,
                )
                if first is not None:
                    return first, False
            return await _create(conn, MessageRow, SQL.create_outgoing, touch, item), True
    except DatabaseUnavailable as exc:
        return await _settle(db, exc, workspace_id, message_id), True


async def _settle(
    db: Database, exc: DatabaseUnavailable, workspace_id: str, message_id: str
) -> MessageRow:
    """The message `message_id`, when the write that failed with `exc` stored it after all;
    else DatabaseUnavailable saying that nothing was stored (events.py's `_settle`, for a
    message: lost before its commit was sent, nothing was; lost while it was in flight, it is
    looked for, and OutcomeUnknown again when the database cannot be reached to look)."""
    if isinstance(exc, OutcomeUnknown):

        async def look(conn: Connection) -> MessageRow | None:
            return await fetch_row(
                conn, SQL.message(workspace_id=workspace_id, message_id=message_id), MessageRow
            )

        stored = await db.settle(exc, look)
        if stored is not None:
            return stored
    raise DatabaseUnavailable(exc.message, nothing_stored=True) from exc


async def create_incoming(
    db: Database,
    *,
    workspace_id: str,
    number_id: str,
    from_number: str,
    to_number: str,
    text: str,
    media: list[MessageMedia],
    now: datetime,
) -> MessageRow:
    touch = _touch(
        workspace_id, number_id, from_number, now, ConversationItemKind.SMS_MESSAGE, incoming=True
    )
    item = {"id": ids.new_id(ids.MESSAGE), "to_number": to_number, "text": text, "media": media}
    return await _create_with_event(
        db, MessageRow, SQL.create_incoming, touch, item, "message.received", resources.message, now
    )


async def create_call(
    db: Database,
    *,
    workspace_id: str,
    number_id: str,
    from_number: str,
    to_number: str,
    direction: Direction,
    status: CallStatus,
    duration_seconds: int | None,
    event_type: str,
    now: datetime,
) -> CallRow:
    incoming = direction == Direction.INCOMING
    contact = from_number if incoming else to_number
    touch = _touch(
        workspace_id, number_id, contact, now, ConversationItemKind.CALL_LOG, incoming=incoming
    )
    item = {
        "id": ids.new_id(ids.CALL),
        "direction": direction,
        "from_number": from_number,
        "to_number": to_number,
        "status": status,
        "duration_seconds": duration_seconds,
    }
    return await _create_with_event(
        db, CallRow, SQL.create_call, touch, item, event_type, resources.call, now
    )


async def get(db: Database, workspace_id: str, message_id: str) -> MessageRow | None:
    return await fetch_row(
        db, SQL.message(workspace_id=workspace_id, message_id=message_id), MessageRow
    )


async def list_page(
    db: Database,
    workspace_id: str,
    *,
    number_id: str | None,
    contact: str | None,
    direction: str | None,
    limit: int,
    after: Position | None,
) -> Page[MessageRow]:
    page = SQL.messages_page(
        workspace_id=workspace_id,
        number_id=number_id,
        contact=contact,
        direction=direction,
        **paging(after, limit),
    )
    return await fetch_page(db, page, MessageRow, limit)


async def claim_carrier_due(conn: Connection, now: datetime, limit: int) -> list[MessageRow]:
    """Outgoing messages the carrier should move along now (inside the caller's transaction)."""
    return as_rows(MessageRow, await conn.fetch(*SQL.claim_carrier_due(now=now, limit=limit)))


@dataclass(frozen=True)
class CarrierMove:
    """One step of an outgoing message: its new status, when its next step is due (None:
    none), and the event the step makes (None: none)."""

    message_id: str
    status: MessageStatus
    carrier_due_at: datetime | None
    event_type: str | None


async def move_statuses(conn: Connection, moves: Sequence[CarrierMove], *, now: datetime) -> int:
    """Apply a batch of steps and append the events they make, in two statements whatever the
    batch's size (inside the caller's transaction); returns the deliveries created."""
    if not moves:
        return 0
    moved = await conn.fetch(
        *SQL.move_statuses(
            message_ids=[move.message_id for move in moves],
            statuses=[move.status for move in moves],
            due_at=[move.carrier_due_at for move in moves],
            now=now,
        ),
    )
    rows = as_rows(MessageRow, moved)
    event_types = {move.message_id: move.event_type for move in moves}
    # Each in its conversation's ordering lane.
    made = [
        NewEvent(
            row.workspace_id,
            event_type,
            row.number_id,
            resources.message(row),
            ordering_key=row.conversation_id,
        )
        for row in rows
        if (event_type := event_types[row.id]) is not None
    ]
    return await append_events(conn, made, source="carrier", created_at=now)
