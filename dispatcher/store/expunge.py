"""Removing content for good: an event's (its data, its deliveries' response excerpts, its
sends to come), or a message's text (from it and from the events that carried it). See
docs/events.md, "Removing content", and docs/messages.md. Statements in queries/expunge.sql.

An expunge of an event and the doors that could send it again (a retry, a recover) take
turns, per workspace (`hold_off_expunges`): a retry or recover sees the expunge, and an
expunge sees every delivery they queued. The engine's share is in store/queue.py: a delivery
in flight when its event is expunged is marked in the queue (`delivery_queue.expunged`); its
record keeps no excerpt and schedules no retry, and a claim of it gives it up.
"""

from __future__ import annotations

from datetime import datetime

import orjson

from dispatcher.domain import resources
from dispatcher.domain.events import MESSAGE_EVENTS
from dispatcher.store.database import Connection, Database
from dispatcher.store.queries import Queries, Statement
from dispatcher.store.rows import EventRow, MessageRow, fetch_row


class SQL(Queries, file="expunge.sql"):
    lock_content_to_expunge: Statement
    lock_content_to_resend: Statement
    erase_event: Statement
    event_delivery_ids: Statement
    lock_queued_deliveries: Statement
    give_up_expunged: Statement
    advance_lanes: Statement
    erase_response_excerpts: Statement
    erase_message_text: Statement
    events_carrying: Statement
    rewrite_event_data: Statement


async def hold_off_expunges(conn: Connection, workspace_id: str) -> None:
    """Inside a transaction that may send an event again (a retry, a recover): wait for an
    expunge in the workspace to end, and keep the next one waiting until this transaction
    ends. What it then reads of `events.expunged_at` stays true until it commits, and an
    expunge that follows sees every delivery it queued."""
    await conn.execute(*SQL.lock_content_to_resend(workspace_id=workspace_id))


async def event(db: Database, workspace_id: str, event_id: str, now: datetime) -> EventRow | None:
    """Erase an event's content, in one transaction: its payload (the envelope with
    `"data":null`, the only bytes an attempt could send from now on), the response excerpts
    of its deliveries' attempts, and its pending deliveries, given up (`expunged`). A delivery
    in flight is left to its attempt, marked. Expunging again changes nothing. Returns the
    event as store.events.get does; None when the workspace has no such event (test events
    included)."""
    async with db.transaction() as conn:
        # No retry or recover of the workspace runs meanwhile: none can queue a delivery of
        # this event after its queued ones are read below, nor send it without seeing this.
        await conn.execute(*SQL.lock_content_to_expunge(workspace_id=workspace_id))
        erased = await fetch_row(
            conn, SQL.erase_event(workspace_id=workspace_id, event_id=event_id, now=now), EventRow
        )
        if erased is None:
            return None
        delivery_ids = [
            row["id"]
            for row in await conn.fetch(
                *SQL.event_delivery_ids(
                    event_id=erased.id, created_at=erased.created_at, workspace_id=workspace_id
                )
            )
        ]
        # The queue rows first, then the history (the engine's order): an attempt being
        # recorded now finishes first, and its excerpt is erased below with the others.
        queued = await conn.fetch(*SQL.lock_queued_deliveries(delivery_ids=delivery_ids))
        if queued:
            given_up = [row["delivery_id"] for row in queued]
            await conn.execute(*SQL.give_up_expunged(given_up=given_up))
            await conn.execute(*SQL.advance_lanes(given_up=given_up, now=now))
        await conn.execute(
            *SQL.erase_response_excerpts(delivery_ids=delivery_ids, created_at=erased.created_at)
        )
    return erased


async def message(
    db: Database, workspace_id: str, message_id: str, now: datetime
) -> MessageRow | None:
    """Erase a message's text, and the text in the data of every event that carried it (its
    `message.*` events; their deliveries not yet sent go without it), in one transaction.
    Expunging again changes nothing. Returns the message as store.messages.get does; None
    when the workspace has no such message.

    The message's row is updated first: a carrier step of it (which locks the row) either
    made its event before, found below, or makes it after, from the row without the text.
    """
    async with db.transaction() as conn:
        row = await fetch_row(
            conn,
            SQL.erase_message_text(workspace_id=workspace_id, message_id=message_id, now=now),
            MessageRow,
        )
        if row is None:
            return None
        carrying = await conn.fetch(
            *SQL.events_carrying(
                workspace_id=workspace_id,
                message_id=message_id,
                created_at=row.created_at,
                message_events=sorted(MESSAGE_EVENTS),
            ),
        )
        # The data keeps its members and their order (orjson, as it was first written); the
        # envelope around it is rebuilt by the database, as always.
        rewritten = [
            (carrier, orjson.dumps(erased).decode())
            for carrier in carrying
            if (data := orjson.loads(carrier["payload"])["data"])
            != (erased := resources.erase_text(data))
        ]
        if rewritten:
            await conn.execute(
                *SQL.rewrite_event_data(
                    event_ids=[carrier["id"] for carrier, _ in rewritten],
                    created_at=[carrier["created_at"] for carrier, _ in rewritten],
                    data=[data for _, data in rewritten],
                ),
            )
    return row
