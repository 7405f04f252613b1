"""The domain's records, made for tests: what a test does not care about gets a default, so a
table names only the fields its rule reads (and mypy still holds it to the real type)."""

from __future__ import annotations

from datetime import datetime

from dispatcher.domain.outcomes import (
    AttemptOutcome,
    AttemptResult,
    Decision,
    Delivered,
    GivenUp,
    GiveUpReason,
    last_error,
)


def attempt_result(
    webhook_id: str,
    started_at: datetime,
    outcome: AttemptOutcome = AttemptOutcome.SUCCESS,
    response_status: int | None = 200,
    response_ms: int = 1,
    *,
    finished_at: datetime | None = None,
    decision: Decision | None = None,
    delivery_id: str = "WD1",
) -> AttemptResult:
    """A recorded attempt (the delivery's first). It finished when it started unless told
    otherwise; without a decision, a success is delivered and a failure given up."""
    finished = started_at if finished_at is None else finished_at
    if decision is None:
        success = outcome is AttemptOutcome.SUCCESS
        decision = Delivered(finished) if success else GivenUp(GiveUpReason.EXHAUSTED)
    return AttemptResult(
        id=delivery_id,
        webhook_id=webhook_id,
        attempts_before=0,
        response_status=response_status,
        response_ms=response_ms,
        last_error=last_error(decision, outcome.value),
        finished_at=finished,
        decision=decision,
        started_at=started_at,
        outcome=outcome,
        response_body=None,
    )
