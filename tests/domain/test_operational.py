"""Which settled attempts give rise to an operational event, and what it carries (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dispatcher.domain.enums import DeliveryStatus, DisabledReason
from dispatcher.domain.operational import (
    SettledAttempt,
    about_attempt,
    for_operator,
    webhook_disabled,
    webhook_enabled,
)
from dispatcher.domain.outcomes import GiveUpReason


def settled(
    status: DeliveryStatus,
    given_up: GiveUpReason | None = None,
    failed_before: bool = False,
    event_type: str = "contact.updated",
) -> SettledAttempt:
    return SettledAttempt(
        delivery_id="WD1",
        workspace_id="WS1",
        webhook_id="WH1",
        event_id="EV1",
        event_type=event_type,
        status=status,
        attempts=3,
        last_error="HTTP 500" if status == DeliveryStatus.FAILED else None,
        given_up=given_up,
        failed_before=failed_before,
    )


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (settled(DeliveryStatus.FAILED, GiveUpReason.EXHAUSTED), "delivery.exhausted"),
        (settled(DeliveryStatus.FAILED, GiveUpReason.GONE), "delivery.exhausted"),
        # Someone chose it: the webhook was disabled or deleted under the attempt.
        (settled(DeliveryStatus.FAILED, GiveUpReason.DISABLED), None),
        (settled(DeliveryStatus.DELIVERED, failed_before=True), "delivery.recovered"),
        (settled(DeliveryStatus.DELIVERED), None),
        # No cascades: a delivery of an operational event gives rise to none.
        (
            settled(DeliveryStatus.FAILED, GiveUpReason.EXHAUSTED, event_type="webhook.disabled"),
            None,
        ),
        (
            settled(DeliveryStatus.DELIVERED, failed_before=True, event_type="delivery.exhausted"),
            None,
        ),
    ],
)
def test_what_a_settled_attempt_gives_rise_to(
    attempt: SettledAttempt, expected: str | None
) -> None:
    event = about_attempt(attempt)
    assert (event and event.event_type) == expected
    if event is not None:
        assert event.about == "WH1"
        assert event.workspace_id == "WS1"


def test_what_each_event_carries() -> None:
    exhausted = about_attempt(settled(DeliveryStatus.FAILED, GiveUpReason.EXHAUSTED))
    assert exhausted is not None
    assert exhausted.data == {
        "id": "WD1",
        "webhookId": "WH1",
        "eventId": "EV1",
        "eventType": "contact.updated",
        "attempts": 3,
        "lastError": "HTTP 500",
    }
    recovered = about_attempt(settled(DeliveryStatus.DELIVERED, failed_before=True))
    assert recovered is not None
    assert recovered.data == {"id": "WD1", "webhookId": "WH1", "attempts": 3}
    at = datetime(2026, 11, 21, 10, 0, 0, 123000, tzinfo=UTC)
    disabled = webhook_disabled("WS1", "WH1", DisabledReason.FAILING, at)
    assert disabled.data == {
        "id": "WH1",
        "reason": "failing",
        "disabledAt": "2026-11-21T10:00:00.123Z",
    }
    assert (disabled.about, webhook_enabled("WS1", "WH1").data) == ("WH1", {"id": "WH1"})
    # Only the operator sink's copy says which workspace.
    assert "workspaceId" not in disabled.data
    assert for_operator(disabled) == {**disabled.data, "workspaceId": "WS1"}
