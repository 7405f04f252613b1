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
from typing import Any

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

# Why a delivery was given up, when it is worth a `delivery.exhausted`: the schedule ran out,
# or the receiver said it is gone. (A webhook disabled or deleted under it is not.)
EXHAUSTING = frozenset({GiveUpReason.EXHAUSTED, GiveUpReason.GONE})


@dataclass(frozen=True)
class Operational:
    """One operational event to publish in `workspace_id`'s stream."""

    workspace_id: str
    event_type: str
    data: dict[str, Any]
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
    data = {"id": webhook_id, "reason": str(reason), "disabledAt": isoformat(at)}
    return Operational(workspace_id, WEBHOOK_DISABLED, data, webhook_id)


def webhook_enabled(workspace_id: str, webhook_id: str) -> Operational:
    return Operational(workspace_id, WEBHOOK_ENABLED, {"id": webhook_id}, webhook_id)


def about_attempt(settled: SettledAttempt) -> Operational | None:
    """The operational event an attempt's settlement gives rise to, if any."""
    if settled.event_type in OPERATIONAL_TYPES:
        return None  # no cascades
    if settled.status == DeliveryStatus.FAILED and settled.given_up in EXHAUSTING:
        data: dict[str, Any] = {
            "id": settled.delivery_id,
            "webhookId": settled.webhook_id,
            "eventId": settled.event_id,
            "eventType": settled.event_type,
            "attempts": settled.attempts,
            "lastError": settled.last_error,
        }
        return Operational(settled.workspace_id, DELIVERY_EXHAUSTED, data, settled.webhook_id)
    if settled.status == DeliveryStatus.DELIVERED and settled.failed_before:
        data = {
            "id": settled.delivery_id,
            "webhookId": settled.webhook_id,
            "attempts": settled.attempts,
        }
        return Operational(settled.workspace_id, DELIVERY_RECOVERED, data, settled.webhook_id)
    return None


def for_operator(event: Operational) -> dict[str, Any]:
    """The data of the operator sink's copy of an operational event: the same, with the
    workspace it happened in (only there: a workspace knows its own id)."""
    return {**event.data, "workspaceId": event.workspace_id}
