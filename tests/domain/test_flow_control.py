"""Flow control from the receiver, as tables (domain/flow_control.py): which attempts of a batch
say something about an endpoint's rate, and the AIMD arithmetic of its effective rate. Pure
functions: no database, no network."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dispatcher.domain.flow_control import (
    FLOOR,
    NOT_ADAPTED,
    FlowState,
    Signal,
    adapt,
    effective_rate,
    observed_rate,
    signals,
)
from dispatcher.domain.outcomes import AttemptOutcome, AttemptResult, RetryAt
from tests.records import attempt_result

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SLOW_DOWN = Signal.SLOW_DOWN
ACCEPTED = Signal.ACCEPTED


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def answered(webhook_id: str, status: int, *, throttled: bool = False) -> AttemptResult:
    outcome = AttemptOutcome.SUCCESS if status < 300 else AttemptOutcome.HTTP_ERROR
    decision = None if status < 300 else RetryAt(at(10))
    result = attempt_result(webhook_id, NOW, outcome, status, decision=decision)
    return result._replace(throttled=throttled)


def timed_out(webhook_id: str, *, throttled: bool = False) -> AttemptResult:
    result = attempt_result(webhook_id, NOW, AttemptOutcome.TIMEOUT, None, decision=RetryAt(NOW))
    return result._replace(throttled=throttled)


# a batch -> what it says about each endpoint's rate (only the endpoints it concerns)
SIGNALS: list[tuple[str, list[AttemptResult], dict[str, Signal]]] = [
    ("nothing", [], {}),
    ("endpoints that never see a 429: nothing", [answered("A", 200), answered("B", 500)], {}),
    ("a 429 slows down", [answered("A", 200), answered("A", 429)], {"A": SLOW_DOWN}),
    ("whatever comes after it", [answered("A", 429), answered("A", 200, throttled=True)],
     {"A": SLOW_DOWN}),
    ("a 503 does not (its Retry-After paces)", [answered("A", 503)], {}),
    ("a 2xx at an adapted endpoint recovers", [answered("A", 200, throttled=True)],
     {"A": ACCEPTED}),
    ("not another failure", [answered("A", 500, throttled=True), timed_out("A", throttled=True)],
     {}),
    ("each endpoint its own", [answered("A", 429), answered("B", 204, throttled=True)],
     {"A": SLOW_DOWN, "B": ACCEPTED}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("attempts", "expected"), [(a, e) for _, a, e in SIGNALS], ids=[n for n, _, _ in SIGNALS]
)
def test_signals(attempts: list[AttemptResult], expected: dict[str, Signal]) -> None:
    assert signals(attempts) == expected


def state(rate: float, ceiling: float, changed: float = 0.0, slowed: float = 0.0) -> FlowState:
    return FlowState(rate, ceiling, at(changed), at(slowed))


# (state, signal, rateLimit, observed throughput, seconds after NOW) -> the state after
AIMD: list[tuple[str, FlowState, Signal, int | None, float, float, FlowState]] = [
    # The first 429: half the rate limit, or half the endpoint's throughput without one.
    ("first 429, limited", NOT_ADAPTED, SLOW_DOWN, 100, 0.0, 0, state(50, 100)),
    ("first 429, unlimited", NOT_ADAPTED, SLOW_DOWN, None, 300.0, 0, state(150, 300)),
    ("never below the floor", NOT_ADAPTED, SLOW_DOWN, 1, 0.0, 0, state(FLOOR, 1)),
    ("an idle unlimited endpoint", NOT_ADAPTED, SLOW_DOWN, None, 0.2, 0, state(FLOOR, FLOOR)),
    # Later 429s halve it again, at most once a second.
    ("again after a second", state(50, 100), SLOW_DOWN, 100, 0.0, 1, state(25, 100, 1, 1)),
    ("held within the second", state(50, 100), SLOW_DOWN, 100, 0.0, 0.5, state(50, 100)),
    ("held after a recovery step too", state(60, 100, 0.8, 0), SLOW_DOWN, 100, 0.0, 0.9,
     state(60, 100, 0.8, 0)),
    ("down to the floor", state(1.5, 100), SLOW_DOWN, 100, 0.0, 2, state(FLOOR, 100, 2, 2)),
    # Accepted answers: ceiling / 20 a second, at most a second's worth per step.
    ("recovers additively", state(50, 100), ACCEPTED, 100, 0.0, 0.5, state(52.5, 100, 0.5, 0)),
    ("a second's worth at most", state(50, 100), ACCEPTED, 100, 0.0, 60, state(55, 100, 60, 0)),
    ("recovered: not adapted any more", state(98, 100), ACCEPTED, 100, 0.0, 1, NOT_ADAPTED),
    ("unlimited: the limit goes", state(290, 300), ACCEPTED, None, 0.0, 1, NOT_ADAPTED),
    ("nothing to recover", NOT_ADAPTED, ACCEPTED, 100, 0.0, 1, NOT_ADAPTED),
    ("a clock behind: no step", state(50, 100, 5, 0), ACCEPTED, 100, 0.0, 1,
     state(50, 100, 1, 0)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("before", "signal", "rate_limit", "observed", "seconds", "after"),
    [row[1:] for row in AIMD],
    ids=[row[0] for row in AIMD],
)
def test_aimd(
    before: FlowState,
    signal: Signal,
    rate_limit: int | None,
    observed: float,
    seconds: float,
    after: FlowState,
) -> None:
    assert adapt(before, signal, rate_limit=rate_limit, observed=observed, now=at(seconds)) == after


def test_a_429_storm_then_acceptance_comes_back_to_the_rate_limit() -> None:
    flow = NOT_ADAPTED
    for second in range(10):  # a 429 every 100 ms for 10 s: halved once a second
        for tenth in range(10):
            flow = adapt(
                flow, SLOW_DOWN, rate_limit=1000, observed=0.0, now=at(second + tenth / 10)
            )
    assert flow.rate == FLOOR  # 1000 / 2**10 < 1
    rates = []
    for second in range(1, 30):  # accepted answers, one batch a second
        flow = adapt(flow, ACCEPTED, rate_limit=1000, observed=0.0, now=at(10 + second))
        rates.append(flow.rate)
    assert rates[:3] == [51.0, 101.0, 151.0]
    assert rates[19] is None  # back to the rate limit within 20 s: not adapted any more


def test_observed_rate() -> None:
    assert observed_rate(120, NOW, at(60)) == 2.0
    assert observed_rate(5, NOW, NOW) == 0.0


@pytest.mark.parametrize(
    ("rate_limit", "adapted", "effective"),
    [(None, None, None), (10, None, 10.0), (10, 2.5, 2.5), (None, 4.0, 4.0)],
)
def test_effective_rate(
    rate_limit: int | None, adapted: float | None, effective: float | None
) -> None:
    assert effective_rate(rate_limit, adapted) == effective
