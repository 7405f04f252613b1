"""Rows as the public resources of the interface (section 2), for the API and for events."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from dispatcher.domain.clock import isoformat, isoformat_or_none


class Row(Protocol):
    """A database row (asyncpg Record) or any mapping by column name."""

    def __getitem__(self, key: str, /) -> Any: ...


def message(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "createdAt": isoformat(row["created_at"]),
        "direction": row["direction"],
        "from": row["from_number"],
        "to": row["to_number"],
        "text": row["text"],
        "media": row["media"],
        "numberId": row["number_id"],
        "conversationId": row["conversation_id"],
        "status": row["status"],
    }


def call(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "createdAt": isoformat(row["created_at"]),
        "direction": row["direction"],
        "from": row["from_number"],
        "to": row["to_number"],
        "status": row["status"],
        "durationSeconds": row["duration_seconds"],
        "numberId": row["number_id"],
        "conversationId": row["conversation_id"],
    }


def conversation(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "contact": row["contact"],
        "createdAt": isoformat(row["created_at"]),
        "lastItemAt": isoformat(row["last_item_at"]),
        "lastItemKind": row["last_item_kind"],
        "numberId": row["number_id"],
        "status": row["status"],
    }


def webhook(row: Row, default_concurrency: int) -> dict[str, Any]:
    return {
        "id": row["id"],
        "createdAt": isoformat(row["created_at"]),
        "disabledAt": isoformat_or_none(row["disabled_at"]),
        "disabledReason": row["disabled_reason"],
        "events": list(row["events"]),
        "name": row["name"],
        "numberIds": None if row["number_ids"] is None else list(row["number_ids"]),
        "url": row["url"],
        "maxConcurrency": row["max_concurrency"] or default_concurrency,
    }


def delivery(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "webhookId": row["webhook_id"],
        "attempts": row["attempts"],
        "createdAt": isoformat(row["created_at"]),
        "deliveredAt": isoformat_or_none(row["delivered_at"]),
        "event": row["event_type"],
        "lastError": row["last_error"],
        "nextAttemptAt": isoformat_or_none(row["next_attempt_at"]),
        # The stored envelope bytes, embedded as they are (no parse and re-serialize).
        "payload": orjson.Fragment(row["payload"]),
        "responseMs": row["response_ms"],
        "responseStatus": row["response_status"],
        "status": row["status"],
    }
