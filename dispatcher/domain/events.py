"""The event catalog and the event envelope (interface section 2)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from dispatcher.domain.clock import isoformat

# Date-form version label carried by every envelope. schema.sql's dispatcher_publish_event
# writes the same value (a test keeps the two in step).
API_VERSION = "2026-11-01"

TEST_EVENT = "webhook.test"

# Types a subscription may hear. `webhook.test` is deliberately absent: only the test
# operation sends it.
EVENT_TYPES: frozenset[str] = frozenset(
    {
        "message.received",
        "message.delivered",
        "message.failed",
        "call.ringing",
        "call.answered",
        "call.completed",
        "call.missed",
        "call.forwarded",
        "call.recording.completed",
        "call.voicemail.completed",
        "call.summary.completed",
        "call.transcript.completed",
        "contact.updated",
        "contact.deleted",
    }
)

CALL_STATUS_EVENTS: dict[str, str] = {
    status: f"call.{status}"
    for status in ("ringing", "answered", "completed", "missed", "forwarded")
}


def envelope(event_id: str, event_type: str, created_at: datetime, data: dict[str, Any]) -> str:
    """Serialize the envelope once; the same bytes go out on every attempt."""
    body = {
        "id": event_id,
        "type": event_type,
        "apiVersion": API_VERSION,
        "createdAt": isoformat(created_at),
        "data": data,
    }
    return orjson.dumps(body).decode()
