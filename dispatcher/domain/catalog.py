"""The event catalog: every event type a delivery can carry, with what it means, the type of
its `data` and an example (docs/events.md, "Catalog"; `GET /v1/event-types`; the OpenAPI
document's `webhooks`).

One home for each fact. The type of each event's data is the TypedDict its builder is held to
by mypy (`resources.Message`, `resources.Call`, `operational.*Data`, `events.WebhookTestData`);
the API publishes pydantic's JSON Schema (2020-12) of that type, and every example below is
made by the builder itself from example rows. A test validates each example against its
schema, and every event the test suite's receivers get against the schema of its type
(tests/catalog_check.py), so the catalog cannot drift from what is sent.

Which types: the ones a subscription may hear (`events.EVENT_TYPES`) and `webhook.test`. The
outbox function takes any type of the right form (`order.paid_late`), but no subscription can
name one outside EVENT_TYPES, so no such event is ever delivered: they are not listed. The
types only the application publishes (`contact.updated`, `call.recording.completed`, ...) have
free-form data: their schema says what the service checks (an object with a string `id`).
An application may publish the types the service makes (`message.received`, ...) itself too;
its data should then follow the published schema, which the service does not check beyond
`id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from annotated_types import MinLen
from typing_extensions import TypedDict

from dispatcher.domain import events, operational, resources
from dispatcher.domain.enums import CallStatus, DeliveryStatus, DisabledReason
from dispatcher.domain.outcomes import GiveUpReason


class ApplicationEventData(TypedDict):
    """An event the application publishes (`POST /v1/events`, the outbox function): any JSON
    object with a non-empty string `id` (the rest is the application's own)."""

    id: Annotated[str, MinLen(1)]


@dataclass(frozen=True)
class EventTypeEntry:
    """One event type of the catalog."""

    name: str
    description: str
    data: Any  # the TypedDict of its data
    example: Mapping[str, Any]  # its data, as the builder makes it


# -- the examples: made by the builders, from rows as the store would hand them -------------

_AT = datetime(2026, 11, 21, 4, 36, 12, 123000, tzinfo=UTC)
_WORKSPACE = "WS0f3c2a9b8e7d6c5b4a39281706f5e4d3"
_NUMBER = "PN6a1f0e9d8c7b6a5948372615f4e3d2c1"
_CONVERSATION = "CN2b7c3d9e0f1a2b3c4d5e6f708192a3b4"
_WEBHOOK = "WH4d2e8f1a3b5c7d9e0f1a2b3c4d5e6f70"
_DELIVERY = "WD8e1f2a3b4c5d6e7f8091a2b3c4d5e6f7"
_EVENT = "EV1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f"
_CONTACT = "+15557770000"
_OURS = "+15555550100"


def _message(status: str) -> resources.Message:
    incoming = status == "received"
    return resources.message(
        resources.MessageRow(
            id="MS5e0d1c2b3a49586776859a4b3c2d1e0f",
            workspace_id=_WORKSPACE,
            number_id=_NUMBER,
            conversation_id=_CONVERSATION,
            direction="incoming" if incoming else "outgoing",
            from_number=_CONTACT if incoming else _OURS,
            to_number=_OURS if incoming else _CONTACT,
            text="Is the shop open on Sunday?" if incoming else "Yes, from 10 to 4.",
            media=[],
            status=status,
            created_at=_AT,
            expunged=False,
        )
    )


def _call(status: CallStatus) -> resources.Call:
    return resources.call(
        resources.CallRow(
            id="AC7f3e2d1c0b9a8f7e6d5c4b3a29180706",
            workspace_id=_WORKSPACE,
            number_id=_NUMBER,
            conversation_id=_CONVERSATION,
            direction="incoming",
            from_number=_CONTACT,
            to_number=_OURS,
            status=status,
            duration_seconds=94 if status == CallStatus.COMPLETED else None,
            created_at=_AT,
        )
    )


def _settled(status: DeliveryStatus, given_up: GiveUpReason | None) -> operational.SettledAttempt:
    return operational.SettledAttempt(
        delivery_id=_DELIVERY,
        workspace_id=_WORKSPACE,
        webhook_id=_WEBHOOK,
        event_id=_EVENT,
        event_type="message.received",
        status=status,
        attempts=8,
        last_error="HTTP 503" if status == DeliveryStatus.FAILED else None,
        given_up=given_up,
        failed_before=True,
    )


def _about(settled: operational.SettledAttempt) -> Mapping[str, Any]:
    made = operational.about_attempt(settled)
    assert made is not None  # the examples are chosen to make one
    return made.data


_CALL_MEANINGS = {
    CallStatus.RINGING: "a call to or from one of the workspace's numbers is ringing",
    CallStatus.ANSWERED: "a call was answered",
    CallStatus.COMPLETED: "an answered call ended (`durationSeconds` says how long it lasted)",
    CallStatus.MISSED: "a call was not answered",
    CallStatus.FORWARDED: "a call was forwarded",
}

_BY_APPLICATION = (
    "Published by the application (`POST /v1/events`, `POST /v1/events/batch` or the "
    "outbox function); its data is the application's own, with a string `id`."
)
_APPLICATION_TYPES = {
    "call.recording.completed": "A call's recording is ready.",
    "call.voicemail.completed": "A voicemail was left and is ready.",
    "call.summary.completed": "A call's summary is ready.",
    "call.transcript.completed": "A call's transcript is ready.",
    "contact.updated": "A contact was created or changed.",
    "contact.deleted": "A contact was deleted.",
}


def _entries() -> tuple[EventTypeEntry, ...]:
    made = [
        EventTypeEntry(
            "message.received",
            "An incoming message arrived at one of the workspace's numbers (`POST "
            "/v1/inbound/messages`, the carrier). Its data is the Message; once the message "
            "is expunged, its `text` is null and `expunged` true.",
            resources.Message,
            _message("received"),
        ),
        EventTypeEntry(
            "message.delivered",
            "An outgoing message reached `delivered`. Its data is the Message.",
            resources.Message,
            _message("delivered"),
        ),
        EventTypeEntry(
            "message.failed",
            "An outgoing message reached `undelivered`. Its data is the Message.",
            resources.Message,
            _message("undelivered"),
        ),
    ]
    made.extend(
        EventTypeEntry(
            events.CALL_STATUS_EVENTS[status],
            f"{meaning[0].upper()}{meaning[1:]}: a call record with status `{status}` "
            "(`POST /v1/inbound/calls`, the carrier). Its data is the call record.",
            resources.Call,
            _call(status),
        )
        for status, meaning in _CALL_MEANINGS.items()
    )
    made.extend(
        EventTypeEntry(name, f"{meaning} {_BY_APPLICATION}", ApplicationEventData, {"id": "CT42"})
        for name, meaning in _APPLICATION_TYPES.items()
    )
    made.extend(
        [
            EventTypeEntry(
                events.WEBHOOK_DISABLED,
                "Operational, by the service: a subscription stopped, by its owner (`manual`), "
                "because it kept failing (`failing`, after DISPATCHER_DISABLE_AFTER without a "
                "success) or because its endpoint answered 410 (`gone`). Never delivered to "
                "the subscription it is about; cannot be published.",
                operational.WebhookDisabledData,
                operational.webhook_disabled(
                    _WORKSPACE, _WEBHOOK, DisabledReason.FAILING, _AT
                ).data,
            ),
            EventTypeEntry(
                events.WEBHOOK_ENABLED,
                "Operational, by the service: a subscription's owner enabled it again. Never "
                "delivered to the subscription it is about; cannot be published.",
                operational.WebhookEnabledData,
                operational.webhook_enabled(_WORKSPACE, _WEBHOOK).data,
            ),
            EventTypeEntry(
                events.DELIVERY_EXHAUSTED,
                "Operational, by the service: a delivery ended `failed` because its attempts "
                "ran out or its endpoint answered 410 (not when its webhook was disabled or "
                "deleted, or its event expunged). Cannot be published.",
                operational.DeliveryExhaustedData,
                _about(_settled(DeliveryStatus.FAILED, GiveUpReason.EXHAUSTED)),
            ),
            EventTypeEntry(
                events.DELIVERY_RECOVERED,
                "Operational, by the service: a delivery succeeded after at least one failed "
                "attempt. Cannot be published.",
                operational.DeliveryRecoveredData,
                _about(_settled(DeliveryStatus.DELIVERED, None)),
            ),
            EventTypeEntry(
                events.TEST_EVENT,
                "Sent only by `POST /v1/webhooks/{id}/test`, to that webhook alone; it cannot "
                "be subscribed to or published, and is not part of the event stream.",
                events.WebhookTestData,
                events.webhook_test_data(_WEBHOOK),
            ),
        ]
    )
    return tuple(made)


# Every event type a delivery can carry, in the order docs/events.md lists them.
CATALOG: tuple[EventTypeEntry, ...] = _entries()
BY_NAME: dict[str, EventTypeEntry] = {entry.name: entry for entry in CATALOG}
