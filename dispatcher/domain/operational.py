"""Operational events: what the service tells a workspace about its own work (docs/events.md,
"Operational events"). The one place that decides which happen and what they carry.

- `webhook.disabled` `{id, reason, disabledAt}`: a subscription stopped, by its owner
  (`manual`), by the failure clock (`failing`) or by a 410 (`gone`);
- `webhook.enabled` `{id}`: its owner started it again;
- `delivery.exhausted` `{id, webhookId, eventId, eventType, attempts, lastError}`: a delivery
  ended failed because its attempts ran out or its endpoint answered 410; not when its
  webhook was disabled, deleted or its event expunged (someone chose that);
- `delivery.recovered` `{id, webhookId, attempts}`: a delivery succeeded after a failed
  attempt.

Two rules keep them from feeding on themselves: an operational event is never delivered to
the subscription it is about (`Operational.about`: the fan-out leaves it out), and a delivery
of an operational event gives rise to none (no cascades). The operator sink's workspace gives
rise to none at all (the store leaves it out: it knows which workspace that is).

Pure: the store hands in what it recorded and publishes what comes back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NotRequired

from typing_extensions import TypedDict

from dispatcher.domain.clock import isoformat
from dispatcher.domain.enums import DeliveryStatus, DisabledReason
from dispatcher.domain.events import (
    DELIVERY_EXHAUSTED,
    DELIVERY_RECOVERED,
    OPERATIONAL_TYPES,
    WEBHOOK_DISABLED,
    WEBHOOK_ENABLED,
)
from dispatcher.domain.outcomes import GiveUpReason
from dispatcher.domain.resources import Timestamp

# The data each operational event carries: the one description of it, which the builders
# below are held to (mypy) and the event catalog publishes as its JSON Schema
# (domain/catalog.py, `GET /v1/event-types`). `workspaceId` is only in the operator sink's
# copy (`for_operator`).


class WebhookDisabledData(TypedDict):
    """`webhook.disabled`: the subscription that stopped, why, and when."""

    id: str
    reason: DisabledReason
    disabledAt: Timestamp
    workspaceId: NotRequired[str]


class WebhookEnabledData(TypedDict):
    """`webhook.enabled`: the subscription its owner enabled again."""

    id: str
    workspaceId: NotRequired[str]


class DeliveryExhaustedData(TypedDict):
    """`delivery.exhausted`: the delivery that ended failed, its event, and its last error."""

    id: str
    webhookId: str
    eventId: str
    eventType: str
    attempts: int
    lastError: str | None
    workspaceId: NotRequired[str]


class DeliveryRecoveredData(TypedDict):
    """`delivery.recovered`: the delivery that succeeded after a failed attempt."""

    id: str
    webhookId: str
    attempts: int
    workspaceId: NotRequired[str]


OperationalData = (
    WebhookDisabledData | WebhookEnabledData | DeliveryExhaustedData | DeliveryRecoveredData
)

# Why a delivery was given up, when it is worth a `delivery.exhausted`: the schedule ran out,
# or the receiver said it is gone. (A webhook disabled or deleted under it is not.)
EXHAUSTING = frozenset({GiveUpReason.EXHAUSTED, GiveUpReason.GONE})


@dataclass(frozen=True)
class Operational:
    """One operational event to publish in `workspace_id`'s stream."""

    workspace_id: str
    event_type: str
    data: OperationalData
    about: str  # the webhook it is about: never delivered there


@dataclass(frozen=True)
class SettledAttempt:
    """What the recorder wrote for one attempt that settled its delivery, as far as
    operational events care."""

    delivery_id: str
    workspace_id: str
    webhook_id: str
    event_id: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    last_error: str | None
    given_up: GiveUpReason | None  # why, when `status` is failed
    failed_before: bool  # an earlier attempt of this delivery failed


def webhook_disabled(
    workspace_id: str, webhook_id: str, reason: DisabledReason, at: datetime
) -> Operational:
    data: WebhookDisabledData = {
        "id": webhook_id,
        "reason": DisabledReason(reason),
        "disabledAt": isoformat(at),
    }
    return Operational(workspace_id, WEBHOOK_DISABLED, data, webhook_id)


def webhook_enabled(workspace_id: str, webhook_id: str) -> Operational:
    data: WebhookEnabledData = {"id": webhook_id}
    return Operational(workspace_id, WEBHOOK_ENABLED, data, webhook_id)


def about_attempt(settled: SettledAttempt) -> Operational | None:
    """The operational event an attempt's settlement gives rise to, if any."""
    if settled.event_type in OPERATIONAL_TYPES:
        return None  # no cascades
    if settled.status == DeliveryStatus.FAILED and settled.given_up in EXHAUSTING:
        exhausted: DeliveryExhaustedData = {
            "id": settled.delivery_id,
            "webhookId": settled.webhook_id,
            "eventId": settled.event_id,
            "eventType": settled.event_type,
            "attempts": settled.attempts,
            "lastError": settled.last_error,
        }
        return Operational(settled.workspace_id, DELIVERY_EXHAUSTED, exhausted, settled.webhook_id)
    if settled.status == DeliveryStatus.DELIVERED and settled.failed_before:
        recovered: DeliveryRecoveredData = {
            "id": settled.delivery_id,
            "webhookId": settled.webhook_id,
            "attempts": settled.attempts,
        }
        return Operational(settled.workspace_id, DELIVERY_RECOVERED, recovered, settled.webhook_id)
    return None


def for_operator(event: Operational) -> dict[str, Any]:
    """The data of the operator sink's copy of an operational event: the same, with the
    workspace it happened in (only there: a workspace knows its own id)."""
    return {**event.data, "workspaceId": event.workspace_id}
