"""Publishing events, and reading the stream. Every door (the API, inbound, the carrier, a
webhook's test, the SQL outbox) ends in functions.sql's `dispatcher_append_event`, the one writer
of new events: it builds the envelope (`dispatcher_envelope`), stores the event and fans it
out. (An expunge rewrites envelopes, with `dispatcher_envelope` too: store/expunge.py.) Its
statements are in queries/events.sql."""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import orjson

from dispatcher import metrics, tracing
from dispatcher.domain import ids
from dispatcher.errors import DatabaseUnavailable, OutcomeUnknown
from dispatcher.store.database import Connection, Database
from dispatcher.store.idempotency import IDEMPOTENCY_WINDOW, check_replay
from dispatcher.store.notifications import DELIVERIES_CHANNEL
from dispatcher.store.pages import Page, Position, fetch_page, paging, window
from dispatcher.store.publish_batcher import PublishBatcher
from dispatcher.store.queries import Queries, Statement
from dispatcher.store.rows import EventRow, fetch_row


class SQL(Queries, file="events.sql"):
    append_event: Statement
    append_events: Statement
    lock_idempotency_key: Statement
    lock_idempotency_keys: Statement
    find_idempotent_event: Statement
    find_idempotent_events: Statement
    events_page: Statement
    event: Statement
    stored_payloads: Statement


def _json(data: Mapping[str, Any]) -> str:
    """An event's data as the JSON text its envelope embeds as it is (the database keeps a
    `json` value's text), so every attempt carries these bytes."""
    return orjson.dumps(data).decode()


async def append_event(
    conn: Connection,
    *,
    workspace_id: str,
    event_type: str,
    number_id: str | None,
    data: Mapping[str, Any],
    source: str,
    created_at: datetime,
    idempotency_key: str | None = None,
    fingerprint: bytes | None = None,
    webhook_ids: Sequence[str] | None = None,
    ordering_key: str | None = None,
    event_id: str | None = None,
) -> tuple[str, str, int]:
    """Store an event and fan it out (inside the caller's transaction, if it has one): to the
    subscriptions that hear it, or to `webhook_ids` alone when given (a webhook's test).
    `ordering_key` is the event's ordering lane (a fifo subscription's); `event_id` its id,
    when the caller chose it (to look for it should the commit's answer be lost).

    Returns (event id, payload, deliveries created).
    """
    event_id = event_id or ids.new_id(ids.EVENT)
    # One statement (one round trip; atomic on its own, so a caller without a transaction of
    # its own commits the event and its deliveries at once, or neither). The publish's span
    # (when tracing is on) is stored with the event: its attempts link to it.
    with tracing.publishing(source, event_type, event_id) as publication:
        # The function's two OUT parameters come back as one record.
        appended: tuple[str, int] = await conn.fetchval(
            *SQL.append_event(
                id=event_id,
                workspace_id=workspace_id,
                type=event_type,
                number_id=number_id,
                source=source,
                data=_json(data),
                created_at=created_at,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                test_webhooks=None if webhook_ids is None else list(webhook_ids),
                traceparent=publication.traceparent,
                left_out=None,
                ordering_key=ordering_key,
            ),
        )
        payload, fanned = appended
        publication.fanned_out(fanned)
    metrics.EVENTS_PUBLISHED.labels(source, event_type).inc()
    metrics.FANNED_OUT.inc(fanned)
    return event_id, payload, fanned


@dataclass(frozen=True)
class NewEvent:
    """One event of a batch appended by `append_events` or published by `publish_batch`."""

    workspace_id: str
    event_type: str
    number_id: str | None
    data: Mapping[str, Any]
    # The subscription this event is about, which never receives it (an operational event).
    excluded_webhook_id: str | None = None
    ordering_key: str | None = None
    # Its Idempotency-Key and the fingerprint of the request that published it (the API's).
    idempotency_key: str | None = None
    fingerprint: bytes | None = None


async def _append_many(
    conn: Connection,
    events: Sequence[NewEvent],
    *,
    source: str,
    created_at: datetime,
    event_ids: Sequence[str] | None = None,
) -> list[tuple[str, int]]:
    """Store a batch of events and fan each out, in one statement (functions.sql's
    `dispatcher_append_events`; inside the caller's transaction, if it has one), under
    `event_ids` when the caller chose them. Returns each event's (payload, deliveries
    created), in the batch's order."""
    if not events:
        return []
    # One span for the batch (when tracing is on), stored with each of its events.
    with tracing.publishing(source, None, events=len(events)) as publication:
        rows = await conn.fetch(
            *SQL.append_events(
                ids=list(event_ids) if event_ids else [ids.new_id(ids.EVENT) for _ in events],
                workspace_ids=[event.workspace_id for event in events],
                types=[event.event_type for event in events],
                number_ids=[event.number_id for event in events],
                data=[_json(event.data) for event in events],
                source=source,
                created_at=created_at,
                idempotency_keys=[event.idempotency_key for event in events],
                fingerprints=[event.fingerprint for event in events],
                traceparent=publication.traceparent,
                left_out=[event.excluded_webhook_id for event in events],
                ordering_keys=[event.ordering_key for event in events],
            ),
        )
        appended = [(row["event_payload"], row["event_fanned"]) for row in rows]
        fanned = sum(made for _, made in appended)
        publication.fanned_out(fanned)
    for event in events:
        metrics.EVENTS_PUBLISHED.labels(source, event.event_type).inc()
    metrics.FANNED_OUT.inc(fanned)
    return appended


async def append_events(
    conn: Connection, events: Sequence[NewEvent], *, source: str, created_at: datetime
) -> int:
    """Store a batch of events and fan each out, in one statement (inside the caller's
    transaction, if it has one); returns the deliveries created. What a loop of
    `append_event` does, without a round trip per event."""
    appended = await _append_many(conn, events, source=source, created_at=created_at)
    return sum(made for _, made in appended)


async def publish(
    db: Database,
    *,
    workspace_id: str,
    event_type: str,
    number_id: str | None,
    data: dict[str, Any],
    idempotency_key: str | None,
    now: datetime,
    fingerprint: bytes | None = None,
    ordering_key: str | None = None,
) -> tuple[str, bool]:
    """Publish through the API; returns (payload, created).

    A key seen in this workspace within 24 hours returns the first event's payload and
    creates nothing, if the request's fingerprint is the first one's; another request under
    the key raises IdempotencyKeyReused (and creates nothing). Events stored before
    fingerprints existed (NULL) replay whatever the request, as they did then.

    Without a key, the event is stored with the publishes in progress beside it, in one
    statement and one commit, at the latest of their `now`s (store/publish_batcher.py); this
    returns once that commit is done.
    """
    if idempotency_key is None and not tracing.ENABLED:
        # Without a key, the event shares a statement and a commit with the publishes in
        # progress beside it (store/publish_batcher.py). (While tracing, each is stored alone,
        # under its own request's span.)
        event = NewEvent(workspace_id, event_type, number_id, data, ordering_key=ordering_key)
        return await _batcher(db).publish(event, now, partial(_write_gathering, db)), True
    # With a key, the lookup and the insert share a transaction under the key's advisory lock;
    # without one, one statement (one round trip, one commit). Its id is chosen here, so that
    # it can be looked for should the commit's answer be lost.
    event_id = ids.new_id(ids.EVENT)
    session = db.acquire(commits=True) if idempotency_key is None else db.transaction()
    replay: str | None = None
    try:
        async with session as conn:
            if idempotency_key is not None:
                await conn.execute(
                    *SQL.lock_idempotency_key(
                        workspace_id=workspace_id, idempotency_key=idempotency_key
                    )
                )
                existing = await conn.fetchrow(
                    *SQL.find_idempotent_event(
                        workspace_id=workspace_id,
                        idempotency_key=idempotency_key,
                        since=now - IDEMPOTENCY_WINDOW,
                    ),
                )
                if existing is not None:
                    check_replay(existing["request_fingerprint"], fingerprint)
                    replay = existing["payload"]
                    return replay, False
            _, payload, fanned = await append_event(
                conn,
                workspace_id=workspace_id,
                event_type=event_type,
                number_id=number_id,
                data=data,
                source="api",
                created_at=now,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                ordering_key=ordering_key,
                event_id=event_id,
            )
    except DatabaseUnavailable as exc:
        if replay is not None:  # the answer was read; only its read-only COMMIT was lost
            return replay, False
        (payload,) = await _settle(db, exc, [event_id])
        return payload, True
    if fanned:
        # Only deliveries are work for the engines: a publish nobody hears wakes nobody.
        db.wake(DELIVERIES_CHANNEL)
    return payload, True


async def _settle(db: Database, exc: DatabaseUnavailable, event_ids: list[str]) -> list[str]:
    """The payloads of `event_ids`, written by one write that failed with `exc`, when that
    write was stored after all; else DatabaseUnavailable saying that nothing was stored.

    Lost before its commit was sent (`exc` is no OutcomeUnknown), the write stored nothing.
    Lost while its commit was in flight, it is looked for (Database.settle): all its events
    are there or none (one commit); OutcomeUnknown again when the database cannot be
    reached to look. A request is thus answered 202 for an event that is stored, and 503
    `unavailable` only when it is not (docs/api.md, "Answers lost with the connection").
    """
    if isinstance(exc, OutcomeUnknown):

        async def look(conn: Connection) -> dict[str, str]:
            rows = await conn.fetch(*SQL.stored_payloads(event_ids=event_ids))
            return {row["id"]: row["payload"] for row in rows}

        stored = await db.settle(exc, look)
        if stored:
            if len(stored) != len(event_ids):  # cannot be (one commit): say what is known
                raise exc
            # It may have made deliveries (whether is not known here): waking costs a probe.
            db.wake(DELIVERIES_CHANNEL)
            return [stored[event_id] for event_id in event_ids]
    raise DatabaseUnavailable(exc.message, nothing_stored=True) from exc


# One batcher per pool (the statements it runs take that pool's connections).
_BATCHERS: weakref.WeakKeyDictionary[Database, PublishBatcher[NewEvent]] = (
    weakref.WeakKeyDictionary()
)


def _batcher(db: Database) -> PublishBatcher[NewEvent]:
    batcher = _BATCHERS.get(db)
    if batcher is None:
        batcher = _BATCHERS[db] = PublishBatcher()
    return batcher


async def _write_gathering(
    db: Database, events: Sequence[NewEvent], created_at: datetime
) -> list[str]:
    """The batcher's write: the gathered events in one statement, atomic on its own (one
    commit), at `created_at`; each one's payload, in order. The engines are woken when any
    made a delivery."""
    event_ids = [ids.new_id(ids.EVENT) for _ in events]
    try:
        async with db.acquire(commits=True) as conn:
            appended = await _append_many(
                conn, events, source="api", created_at=created_at, event_ids=event_ids
            )
    except DatabaseUnavailable as exc:
        return await _settle(db, exc, event_ids)
    if any(fanned for _, fanned in appended):
        db.wake(DELIVERIES_CHANNEL)
    return [payload for payload, _ in appended]


async def publish_batch(
    db: Database, *, workspace_id: str, events: Sequence[NewEvent], now: datetime
) -> list[tuple[str, bool]]:
    """Publish a batch through the API, all or nothing; returns each event's (payload,
    created), in the batch's order. The events' keys are distinct (the API refuses a batch
    that repeats one).

    An event whose key was used in this workspace within 24 hours is `publish`'s replay: the
    first event's payload when its fingerprint is the first one's (nothing created for it),
    IdempotencyKeyReused naming its place otherwise (nothing created at all). The others are
    appended together: one statement, whatever the batch's size.
    """
    keys = [event.idempotency_key for event in events if event.idempotency_key is not None]
    # As `publish`: without a key, one statement (atomic on its own); with keys, the lookup and
    # the insert share a transaction under every key's advisory lock, the one `publish` takes.
    # Ids chosen here, to look for them should the commit's answer be lost.
    session = db.acquire(commits=True) if not keys else db.transaction()
    event_ids = [ids.new_id(ids.EVENT) for _ in events]
    replayed: dict[int, str] = {}
    new = list(range(len(events)))
    try:
        async with session as conn:
            if keys:
                await conn.execute(*SQL.lock_idempotency_keys(workspace_id=workspace_id, keys=keys))
                found = await conn.fetch(
                    *SQL.find_idempotent_events(
                        workspace_id=workspace_id, keys=keys, since=now - IDEMPOTENCY_WINDOW
                    )
                )
                first = {row["idempotency_key"]: row for row in found}
                for item, event in enumerate(events):
                    key = event.idempotency_key
                    existing = first.get(key) if key else None
                    if existing is not None:
                        check_replay(existing["request_fingerprint"], event.fingerprint, item=item)
                        replayed[item] = existing["payload"]
            new = [item for item in range(len(events)) if item not in replayed]
            appended = await _append_many(
                conn,
                [events[item] for item in new],
                source="api",
                created_at=now,
                event_ids=[event_ids[item] for item in new],
            )
    except DatabaseUnavailable as exc:
        # Every event replayed: the answer was read; only its read-only COMMIT was lost.
        payloads = await _settle(db, exc, [event_ids[item] for item in new]) if new else []
        appended = [(payload, 0) for payload in payloads]
    if any(fanned for _, fanned in appended):
        db.wake(DELIVERIES_CHANNEL)
    made = iter(appended)
    return [
        (replayed[item], False) if item in replayed else (next(made)[0], True)
        for item in range(len(events))
    ]


async def list_page(
    db: Database,
    workspace_id: str,
    *,
    event_type: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    after: Position | None,
) -> Page[EventRow]:
    """The workspace's events, newest first, test events left out; `since` inclusive,
    `until` exclusive, on when they were created."""
    page = SQL.events_page(
        workspace_id=workspace_id,
        event_type=event_type,
        **window(since, until),
        **paging(after, limit),
    )
    return await fetch_page(db, page, EventRow, limit)


async def get(db: Database, workspace_id: str, event_id: str) -> EventRow | None:
    return await fetch_row(db, SQL.event(workspace_id=workspace_id, event_id=event_id), EventRow)
