"""Flow control from the receiver (docs/delivery.md, "Flow control"): what a receiver's 429 or
503 asks of the sender, and the endpoint's effective rate that follows from it. Pure
arithmetic: time comes in as `now`.

Two signals, each used for one thing:

- A 429 or 503 with a valid `Retry-After` asks for time: the delivery's next attempt waits for
  it (`outcomes.decide`, as a floor on the schedule's delay, capped at the schedule's largest
  delay), and the answer is not held against the endpoint: it neither starts nor resets its
  failure clock, and a delivery given up on such an answer does not disable it
  (`outcomes.ClockEffect.KEEP`).
- A 429, with or without `Retry-After`, says "slow down": the endpoint's effective rate is
  halved (AIMD: additive increase, multiplicative decrease), at most once a second, never
  below `FLOOR`, and recovers additively while the receiver accepts (2xx), to the endpoint's
  `rateLimit`, or, for an endpoint without one, to the throughput it had when the first 429
  came, where the adapted limit is removed. The state lives in the endpoint's `webhooks` row
  (shared by every engine, changed in the record transaction); the claim's token bucket runs
  at the effective rate.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from dispatcher.domain.outcomes import AttemptOutcome, AttemptResult

SLOW_DOWN_STATUS = 429
# The effective rate after a 429: this fraction of what it was.
DECREASE_FACTOR = 0.5
# Never below this many requests a second (rateLimit's own minimum). Retry-After paces below it.
FLOOR = 1.0
# At most one decrease in this long: the answers to requests sent at the old rate, still in
# flight when the first 429 came, say nothing new.
HOLD = timedelta(seconds=1)
# While the receiver accepts, the rate climbs back by ceiling / RECOVERY_SECONDS each second:
# from half the ceiling to all of it in RECOVERY_SECONDS / 2.
RECOVERY_SECONDS = 20.0
# The most time one recovery step counts: an accepted answer after a pause recovers at most
# this much time's worth (the pause said nothing about the receiver).
STEP_AT_MOST = timedelta(seconds=1)
# An endpoint without rateLimit starts at its throughput over this window of the health
# rollups (whole minutes: the current one and the one before).
OBSERVED_MINUTES = 2


class Signal(StrEnum):
    """What a batch of recorded attempts tells about an endpoint's rate."""

    SLOW_DOWN = "slow_down"  # a 429 among them
    ACCEPTED = "accepted"  # no 429, a 2xx, at an endpoint whose rate is adapted now


class FlowState(NamedTuple):
    """An endpoint's adapted rate, as its `webhooks` row keeps it (all None: not adapted,
    its rate is its `rateLimit`, or none)."""

    rate: float | None = None  # requests a second now
    ceiling: float | None = None  # what it recovers to (then the adaptation ends)
    changed_at: datetime | None = None  # the last change, up or down
    slowed_at: datetime | None = None  # the last decrease


NOT_ADAPTED = FlowState()


def signals(attempts: Iterable[AttemptResult]) -> dict[str, Signal]:
    """Per endpoint, what a batch says about its rate: only the endpoints it concerns, those
    with a 429, and those whose rate is adapted (`throttled` at the claim) with a 2xx. Empty
    for a batch of endpoints that never see a 429: then nothing more is written."""
    found: dict[str, Signal] = {}
    for attempt in attempts:
        if attempt.response_status == SLOW_DOWN_STATUS:
            found[attempt.webhook_id] = Signal.SLOW_DOWN
        elif (
            attempt.throttled
            and attempt.outcome == AttemptOutcome.SUCCESS
            and attempt.webhook_id not in found
        ):
            found[attempt.webhook_id] = Signal.ACCEPTED
    return found


def observed_rate(attempts: int, since: datetime, now: datetime) -> float:
    """Requests a second: `attempts` started from `since` to `now` (0 when no time passed)."""
    seconds = (now - since).total_seconds()
    return attempts / seconds if seconds > 0 else 0.0


def adapt(
    state: FlowState,
    signal: Signal,
    *,
    rate_limit: int | None,
    observed: float,
    now: datetime,
) -> FlowState:
    """The endpoint's state after `signal`. `rate_limit`: its configured one (None: none);
    `observed`: its recent throughput, requests a second (the ceiling of an endpoint without
    a rate limit, from the first 429 on)."""
    if signal is Signal.SLOW_DOWN:
        if state.rate is None or state.ceiling is None:
            ceiling = float(rate_limit) if rate_limit is not None else max(observed, FLOOR)
            return FlowState(max(ceiling * DECREASE_FACTOR, FLOOR), ceiling, now, now)
        if state.slowed_at is not None and now - state.slowed_at < HOLD:
            return state
        return FlowState(max(state.rate * DECREASE_FACTOR, FLOOR), state.ceiling, now, now)
    if state.rate is None or state.ceiling is None:
        return state
    since = state.changed_at or now
    elapsed = min(max(now - since, timedelta(0)), STEP_AT_MOST).total_seconds()
    rate = state.rate + state.ceiling / RECOVERY_SECONDS * elapsed
    if rate >= state.ceiling:
        return NOT_ADAPTED
    return FlowState(rate, state.ceiling, now, state.slowed_at)


def effective_rate(rate_limit: int | None, adapted: float | None) -> float | None:
    """Requests a second the endpoint gets now: its adapted rate, else its rate limit; None:
    unrestricted."""
    if adapted is not None:
        return adapted
    return None if rate_limit is None else float(rate_limit)
