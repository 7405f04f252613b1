"""The event catalog (interface section 2).

The envelope around an event's data is built by the database alone, when the event is stored
(functions.sql: `dispatcher_envelope`), whichever door the event came in by, so that every
attempt sends the bytes stored; its shape is `domain.resources.EventEnvelope`.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from dispatcher.domain.enums import CallStatus

# Date-form version label carried by every envelope: the one functions.sql's dispatcher_envelope
# writes (tests/store/test_envelope.py keeps the two in step).
API_VERSION = "2026-11-01"

TEST_EVENT = "webhook.test"


class WebhookTestData(TypedDict):
    """`webhook.test`: the webhook the test was sent to (`POST /v1/webhooks/{id}/test`)."""

    id: str


def webhook_test_data(webhook_id: str) -> WebhookTestData:
    return {"id": webhook_id}


# What an event type looks like (`contact.updated`); functions.sql's dispatcher_publish_event
# refuses any other.
EVENT_TYPE_PATTERN = r"[a-z]+(\.[a-z_]+)+"

# Types the API and the outbox's callers publish. `webhook.test` is deliberately absent: only
# the test operation sends it.
PUBLISHABLE_TYPES: frozenset[str] = frozenset(
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

# Events the service publishes about its own work (docs/events.md, "Operational events"):
# subscriptions may hear them; nobody else may publish them.
WEBHOOK_DISABLED = "webhook.disabled"
WEBHOOK_ENABLED = "webhook.enabled"
DELIVERY_EXHAUSTED = "delivery.exhausted"
DELIVERY_RECOVERED = "delivery.recovered"
OPERATIONAL_TYPES: frozenset[str] = frozenset(
    {WEBHOOK_DISABLED, WEBHOOK_ENABLED, DELIVERY_EXHAUSTED, DELIVERY_RECOVERED}
)
# Types a subscription may hear.
EVENT_TYPES: frozenset[str] = PUBLISHABLE_TYPES | OPERATIONAL_TYPES
# The types whose data is a Message (domain/resources.py): an expunge of a message erases its
# text from them.
MESSAGE_EVENTS: frozenset[str] = frozenset(t for t in EVENT_TYPES if t.startswith("message."))

# Each call status has its event: `call.ringing`, ...
CALL_STATUS_EVENTS: dict[CallStatus, str] = {status: f"call.{status}" for status in CallStatus}
