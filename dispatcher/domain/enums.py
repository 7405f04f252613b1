"""Every closed set of values the interface speaks, each spelled once.

The API's request models, its response resources, its query filters and the OpenAPI document
all read these; the store compares against them where Python looks at a status. The values
are part of the public interface and of the database (CHECK constraints in schema.sql), so a
value is never renamed here alone. Each is a `StrEnum`: a member *is* its string (it compares
equal to it, serialises as it with orjson, and binds as text with asyncpg), and the class
lists the values in the order the interface documents them.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum


class Direction(StrEnum):
    """Which way a message or a call went, seen from the workspace's number."""

    INCOMING = "incoming"
    OUTGOING = "outgoing"


class MessageStatus(StrEnum):
    """An SMS message's life: outgoing ones go queued -> sent -> delivered | undelivered;
    incoming ones are received."""

    QUEUED = "queued"
    SENT = "sent"
    DELIVERED = "delivered"
    UNDELIVERED = "undelivered"
    RECEIVED = "received"


class CallStatus(StrEnum):
    """A call record's status, as the carrier reports it; each has its `call.<status>` event."""

    RINGING = "ringing"
    ANSWERED = "answered"
    COMPLETED = "completed"
    MISSED = "missed"
    FORWARDED = "forwarded"


class ConversationStatus(StrEnum):
    """The folder a conversation sits in (its `status`): new threads start open."""

    OPEN = "open"
    DONE = "done"


class ConversationItemKind(StrEnum):
    """What a conversation's latest item was (`lastItemKind`)."""

    SMS_MESSAGE = "sms_message"
    CALL_LOG = "call_log"


class DeliveryStatus(StrEnum):
    """A delivery's status as the API shows it: pending until delivered, or failed for good
    (the engine's attempt outcomes and decisions are domain/outcomes.py's)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class AttemptTrigger(StrEnum):
    """What made an attempt due (the attempt log's `trigger`)."""

    SCHEDULE = "schedule"  # the first attempt after its event, or a retry on the schedule
    MANUAL_RETRY = "manual_retry"  # POST .../deliveries/{id}/retry
    RECOVER = "recover"  # POST .../recover
    TEST = "test"  # POST .../test


class Ordering(StrEnum):
    """How a subscription's deliveries are ordered: `fifo` attempts those of one ordering lane
    (the events' `orderingKey`) one at a time, in the order of their events."""

    NONE = "none"
    FIFO = "fifo"


class HeldReason(StrEnum):
    """Why due work waits unclaimed (the engines' waiting report, queries/queue.sql
    `held_summary`, and the `reason` label of `dispatcher_deliveries_held`): its endpoint's rate
    limit, its concurrency limit, or its place behind the head of a fifo lane."""

    RATE_LIMIT = "rate_limit"
    CONCURRENCY = "concurrency"
    FIFO = "fifo"


class DisabledReason(StrEnum):
    """Why a webhook is disabled: by its owner, by the failure clock, or by a 410 Gone."""

    MANUAL = "manual"
    FAILING = "failing"
    GONE = "gone"


class Scope(StrEnum):
    """What an API key may do; each keyed route requires exactly one."""

    MESSAGES_READ = "messages:read"
    MESSAGES_WRITE = "messages:write"
    CONVERSATIONS_READ = "conversations:read"
    CONVERSATIONS_WRITE = "conversations:write"
    WEBHOOKS_READ = "webhooks:read"
    WEBHOOKS_WRITE = "webhooks:write"
    EVENTS_READ = "events:read"
    EVENTS_WRITE = "events:write"
    INGEST_WRITE = "ingest:write"
    # Poll a webhook's events (GET /v1/webhooks/{id}/poll); a key may be limited to one
    # webhook (`webhookId`, docs/admin.md).
    WEBHOOKS_POLL = "webhooks:poll"


# Scopes that another also grants: a key that reads webhooks could already read every event's
# payload through their deliveries, so it may read the events themselves.
ALSO_GRANTED_BY: dict[Scope, Scope] = {
    Scope.EVENTS_READ: Scope.WEBHOOKS_READ,
    Scope.WEBHOOKS_POLL: Scope.WEBHOOKS_READ,
}


def allows(held: Collection[str], required: Scope) -> bool:
    """Whether a key holding `held` may do what `required` guards."""
    return required in held or ALSO_GRANTED_BY.get(required) in held
