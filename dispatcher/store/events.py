"""The events table and fan-out. Every door (API, inbound, outbox function) ends here."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dispatcher import metrics
from dispatcher.domain import ids
from dispatcher.domain.events import envelope
from dispatcher.errors import IdempotencyKeyReused
from dispatcher.store.database import Connection, Database, Record
from dispatcher.store.notifications import DELIVERIES_CHANNEL

IDEMPOTENCY_WINDOW = timedelta(hours=24)


async def append_event(
    conn: Connection,
    *,
    workspace_id: str,
    event_type: str,
    number_id: str | None,
    data: dict[str, Any],
    source: str,
    created_at: datetime,
    idempotency_key: str | None = None,
    fingerprint: bytes | None = None,
) -> tuple[str, str, int]:
    """Store an event and fan it out (inside the caller's transaction, if it has one).

    Returns (event id, payload, deliveries created).
    """
    event_id = ids.new_id(ids.EVENT)
    payload = envelope(event_id, event_type, created_at, data)
    # One statement: the event and its fan-out (one round trip; atomic on its own, so a
    # caller without a transaction of its own commits both at once or neither).
    fanned: int = await conn.fetchval(
        """
        WITH event AS (
            INSERT INTO events (id, workspace_id, type, number_id, source, payload,
                                idempotency_key, request_fingerprint, created_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            RETURNING id
        )
        SELECT dispatcher_fan_out(event.id, $9, $2, $3, $4) FROM event
        """,
        event_id,
        workspace_id,
        event_type,
        number_id,
        source,
        payload,
        idempotency_key,
        fingerprint,
        created_at,
    )
    metrics.EVENTS_PUBLISHED.labels(source, event_type).inc()
    metrics.FANNED_OUT.inc(fanned)
    return event_id, payload, fanned


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
) -> tuple[str, bool]:
    """Publish through the API; returns (payload, created).

    A key seen in this workspace within 24 hours returns the first event's payload and
    creates nothing, if the request's fingerprint is the first one's; another request under
    the key raises IdempotencyKeyReused (and creates nothing). Events stored before
    fingerprints existed (NULL) replay whatever the request, as they did then.
    """
    # Without a key, publishing is one statement (one round trip, one commit); with one, the
    # lookup and the insert share a transaction under the key's advisory lock.
    session = db.acquire() if idempotency_key is None else db.transaction()
    async with session as conn:
        if idempotency_key is not None:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1 || ':' || $2))",
                workspace_id,
                idempotency_key,
            )
            existing: Record | None = await conn.fetchrow(
                "SELECT payload, request_fingerprint FROM events "
                "WHERE workspace_id = $1 AND idempotency_key = $2 AND created_at > $3 "
                "ORDER BY created_at DESC LIMIT 1",
                workspace_id,
                idempotency_key,
                now - IDEMPOTENCY_WINDOW,
            )
            if existing is not None:
                first = existing["request_fingerprint"]
                if first is not None and first != fingerprint:
                    raise IdempotencyKeyReused()
                return existing["payload"], False
        _, payload, _ = await append_event(
            conn,
            workspace_id=workspace_id,
            event_type=event_type,
            number_id=number_id,
            data=data,
            source="api",
            created_at=now,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
        )
    db.wake(DELIVERIES_CHANNEL)
    return payload, True
