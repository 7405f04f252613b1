"""What an attempt's outcome means, as tables: outcome x attempt number x clock -> decision,
and what the decisions of a batch do to their endpoints. Pure functions: no database, no
network, no event loop (procrastinate's tests/unit/test_retry.py is the model)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dispatcher.domain.enums import DeliveryStatus, DisabledReason
from dispatcher.domain.outcomes import (
    GONE_ERROR,
    AttemptOutcome,
    AttemptResult,
    ClockChange,
    ClockEffect,
    Decision,
    Delivered,
    GivenUp,
    GiveUpReason,
    RetryAt,
    ToDisable,
    decide,
    endpoints_to_disable,
    failing_too_long,
    failure_clocks,
    last_error,
)
from dispatcher.domain.retry import RetryPolicy
from dispatcher.settings import DEFAULT_RETRY_SCHEDULE
from tests.records import attempt_result

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# Three attempts in all: 10 s after the first, 20 s after the second, then given up.
POLICY = RetryPolicy((10.0, 20.0))

SUCCESS = AttemptOutcome.SUCCESS
HTTP_ERROR = AttemptOutcome.HTTP_ERROR
TIMEOUT = AttemptOutcome.TIMEOUT
CONNECTION_ERROR = AttemptOutcome.CONNECTION_ERROR
BLOCKED = AttemptOutcome.BLOCKED

EXHAUSTED = GivenUp(GiveUpReason.EXHAUSTED)
# Given up on an answer that asked for time (a 429 or 503 with Retry-After): disables nothing.
EXHAUSTED_PACED = GivenUp(GiveUpReason.EXHAUSTED, paced=True)
GONE = GivenUp(GiveUpReason.GONE)


def no_jitter() -> float:
    return 0.5


def later(seconds: float) -> RetryAt:
    return RetryAt(NOW + timedelta(seconds=seconds))


def paced(seconds: float) -> RetryAt:
    """Retried after an answer that asked for time: not held against the endpoint."""
    return RetryAt(NOW + timedelta(seconds=seconds), paced=True)


# (outcome, HTTP status, Retry-After, attempts made counting this one) -> decision
DECISIONS: list[tuple[AttemptOutcome, int | None, str | None, int, Decision]] = [
    # A 2xx is delivered, on any attempt.
    (SUCCESS, 200, None, 1, Delivered(NOW)),
    (SUCCESS, 204, None, 3, Delivered(NOW)),
    # A 410 gives up at once, whatever the schedule has left.
    (HTTP_ERROR, 410, None, 1, GONE),
    (HTTP_ERROR, 410, "5", 2, GONE),
    (HTTP_ERROR, 410, None, 3, GONE),
    # Any other failure follows the schedule, then gives up.
    (HTTP_ERROR, 500, None, 1, later(10)),
    (HTTP_ERROR, 500, None, 2, later(20)),
    (HTTP_ERROR, 500, None, 3, EXHAUSTED),
    (HTTP_ERROR, 302, None, 1, later(10)),  # redirects are not followed: a failure
    (HTTP_ERROR, 404, None, 2, later(20)),
    (TIMEOUT, None, None, 1, later(10)),
    (TIMEOUT, None, None, 3, EXHAUSTED),
    (CONNECTION_ERROR, None, None, 2, later(20)),
    (CONNECTION_ERROR, None, None, 3, EXHAUSTED),
    # A refused address is retried too: a name may resolve elsewhere later.
    (BLOCKED, None, None, 1, later(10)),
    (BLOCKED, None, None, 3, EXHAUSTED),
    # 429 and 503 may ask for more time (a floor), capped at the schedule's largest delay;
    # a valid Retry-After makes the answer paced (flow control: not held against the endpoint).
    (HTTP_ERROR, 429, "15", 1, paced(15)),
    (HTTP_ERROR, 429, "5", 1, paced(10)),  # less than the schedule: the schedule wins
    (HTTP_ERROR, 429, "0", 1, paced(10)),  # "now" is valid too: the schedule
    (HTTP_ERROR, 503, "3600", 1, paced(20)),  # capped
    (HTTP_ERROR, 503, "9" * 40, 1, paced(20)),  # huge: capped
    (HTTP_ERROR, 503, "Sun, 01 Mar 2026 12:00:15 GMT", 1, paced(15)),  # an HTTP date
    (HTTP_ERROR, 503, "Sun, 01 Mar 2026 11:00:00 GMT", 1, paced(10)),  # a date past
    (HTTP_ERROR, 429, "soon", 1, later(10)),  # not understood: ignored, an HTTP error
    (HTTP_ERROR, 429, "-5", 1, later(10)),  # negative: not valid
    (HTTP_ERROR, 429, "1.5", 1, later(10)),  # delta-seconds are whole: not valid
    (HTTP_ERROR, 429, None, 1, later(10)),  # no Retry-After: an HTTP error
    (HTTP_ERROR, 503, None, 2, later(20)),
    (HTTP_ERROR, 429, "15", 3, EXHAUSTED_PACED),  # it never extends the schedule
    (HTTP_ERROR, 429, None, 3, EXHAUSTED),
    # Any other status's Retry-After is not honoured.
    (HTTP_ERROR, 500, "15", 1, later(10)),
    (HTTP_ERROR, 302, "15", 1, later(10)),
]


@pytest.mark.parametrize(("outcome", "status", "retry_after", "attempts", "expected"), DECISIONS)
def test_decide(
    outcome: AttemptOutcome,
    status: int | None,
    retry_after: str | None,
    attempts: int,
    expected: Decision,
) -> None:
    decision = decide(
        outcome,
        status,
        attempts_made=attempts,
        policy=POLICY,
        now=NOW,
        retry_after=retry_after,
        rand=no_jitter,
    )
    assert decision == expected  # (dataclass equality: the same case, the same values)


@pytest.mark.parametrize(("rand", "delay"), [(0.0, 8.0), (0.5, 10.0), (1.0, 12.0)])
def test_the_retry_time_has_the_schedules_jitter(rand: float, delay: float) -> None:
    decision = decide(HTTP_ERROR, 500, attempts_made=1, policy=POLICY, now=NOW, rand=lambda: rand)
    assert decision == later(delay)


def test_the_default_schedule_retries_seven_times_then_gives_up() -> None:
    policy = RetryPolicy(DEFAULT_RETRY_SCHEDULE)
    decisions = [
        decide(TIMEOUT, None, attempts_made=n, policy=policy, now=NOW, rand=no_jitter)
        for n in range(1, 10)
    ]
    assert decisions == [
        *(later(delay) for delay in DEFAULT_RETRY_SCHEDULE),
        EXHAUSTED,  # the 8th attempt
        EXHAUSTED,  # a manual retry of a given-up delivery makes one attempt, no more
    ]


# decision -> (delivery status, failure clock, disables, lastError after an "HTTP 410/500")
CONSEQUENCES: list[
    tuple[Decision, DeliveryStatus, ClockEffect, DisabledReason | None, str | None]
] = [
    (Delivered(NOW), DeliveryStatus.DELIVERED, ClockEffect.RESET, None, None),
    (later(10), DeliveryStatus.PENDING, ClockEffect.START, None, "HTTP 500"),
    (EXHAUSTED, DeliveryStatus.FAILED, ClockEffect.START, DisabledReason.FAILING, "HTTP 500"),
    (paced(10), DeliveryStatus.PENDING, ClockEffect.KEEP, None, "HTTP 500"),
    (EXHAUSTED_PACED, DeliveryStatus.FAILED, ClockEffect.KEEP, None, "HTTP 500"),
    (GONE, DeliveryStatus.FAILED, ClockEffect.START, DisabledReason.GONE, GONE_ERROR),
    (
        GivenUp(GiveUpReason.DISABLED),
        DeliveryStatus.FAILED,
        ClockEffect.START,
        None,
        "HTTP 500",
    ),
]


@pytest.mark.parametrize(("decision", "status", "clock", "disables", "error"), CONSEQUENCES)
def test_what_each_decision_means(
    decision: Decision,
    status: DeliveryStatus,
    clock: ClockEffect,
    disables: DisabledReason | None,
    error: str | None,
) -> None:
    assert decision.status is status
    assert decision.failure_clock is clock
    assert decision.disables is disables
    answered = "HTTP 410" if decision == GONE else "HTTP 500"
    assert last_error(decision, None if status is DeliveryStatus.DELIVERED else answered) == error


def test_the_gone_error_says_the_endpoint_was_disabled() -> None:
    assert last_error(GONE, "HTTP 410") == "HTTP 410 (gone: webhook disabled)"


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def ok(webhook_id: str, seconds: float) -> AttemptResult:
    """A success that finished `seconds` after NOW."""
    return attempt_result(webhook_id, at(seconds))


def failed(webhook_id: str, seconds: float, decision: Decision = EXHAUSTED) -> AttemptResult:
    """A failure that finished `seconds` after NOW, decided as `decision`."""
    return attempt_result(webhook_id, at(seconds), HTTP_ERROR, 500, decision=decision)


# a batch of recorded attempts -> each endpoint's failure clock change
CLOCKS: list[tuple[str, list[AttemptResult], dict[str, ClockChange]]] = [
    ("nothing recorded", [], {}),
    ("a failure starts it", [failed("A", 1)], {"A": ClockChange(False, at(1))}),
    (
        "from the first failure",
        [failed("A", 1, later(10)), failed("A", 2)],
        {"A": ClockChange(False, at(1))},
    ),
    ("a success resets it", [failed("A", 1), ok("A", 2)], {"A": ClockChange(True, None)}),
    (
        "failures after the last success start it again",
        [ok("A", 1), failed("A", 2), failed("A", 3), ok("A", 4), failed("A", 5, GONE)],
        {"A": ClockChange(True, at(5))},
    ),
    (
        "in the order they finished, not the order given",
        [failed("A", 3), ok("A", 2), failed("A", 1)],
        {"A": ClockChange(True, at(3))},
    ),
    (
        "each endpoint its own",
        [failed("A", 1), ok("B", 2), ok("A", 3), failed("B", 4)],
        {"A": ClockChange(True, None), "B": ClockChange(True, at(4))},
    ),
    # Flow control: an answer that asked for time leaves the clock as it is.
    ("a paced answer neither starts it", [failed("A", 1, paced(10))], {}),
    (
        "nor advances it",
        [failed("A", 1, paced(10)), failed("A", 2), failed("A", 3, EXHAUSTED_PACED)],
        {"A": ClockChange(False, at(2))},
    ),
    (
        "nor resets it",
        [failed("A", 1), failed("A", 2, paced(10))],
        {"A": ClockChange(False, at(1))},
    ),
]


@pytest.mark.parametrize(
    ("attempts", "expected"), [(a, e) for _, a, e in CLOCKS], ids=[name for name, _, _ in CLOCKS]
)
def test_failure_clocks(attempts: list[AttemptResult], expected: dict[str, ClockChange]) -> None:
    assert failure_clocks(attempts) == expected


# a batch of recorded attempts -> endpoints to disable (gone now; failing if the clock says)
DISABLES: list[tuple[str, list[AttemptResult], ToDisable]] = [
    ("nothing given up", [ok("A", 1), failed("B", 2, later(10))], ToDisable([], [])),
    ("gone", [failed("B", 1, GONE), failed("A", 2, GONE)], ToDisable(["A", "B"], [])),
    ("exhausted", [failed("B", 1), failed("A", 2), failed("B", 3)], ToDisable([], ["A", "B"])),
    ("gone wins over failing", [failed("A", 1), failed("A", 2, GONE)], ToDisable(["A"], [])),
    (
        "a retry given up in flight disables nothing more",
        [failed("A", 1, GivenUp(GiveUpReason.DISABLED))],
        ToDisable([], []),
    ),
    (
        "given up on an answer that asked for time: not held against the endpoint",
        [failed("A", 1, EXHAUSTED_PACED), failed("B", 2, EXHAUSTED_PACED), failed("B", 3)],
        ToDisable([], ["B"]),
    ),
]


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [(a, e) for _, a, e in DISABLES],
    ids=[name for name, _, _ in DISABLES],
)
def test_endpoints_to_disable(attempts: list[AttemptResult], expected: ToDisable) -> None:
    assert endpoints_to_disable(attempts) == expected


FIVE_DAYS = timedelta(days=5)

# (endpoint's failing_since, disable_after) -> disabled as failing when a delivery gives up
FAILING: list[tuple[datetime | None, timedelta, bool]] = [
    (None, FIVE_DAYS, False),  # no failure since its last success
    (NOW - timedelta(hours=1), FIVE_DAYS, False),
    (NOW - FIVE_DAYS + timedelta(microseconds=1), FIVE_DAYS, False),
    (NOW - FIVE_DAYS, FIVE_DAYS, True),  # exactly five days
    (NOW - timedelta(days=6), FIVE_DAYS, True),
    (NOW, timedelta(0), True),  # DISPATCHER_DISABLE_AFTER=0: the first give-up disables
]


@pytest.mark.parametrize(("failing_since", "disable_after", "expected"), FAILING)
def test_failing_too_long(
    failing_since: datetime | None, disable_after: timedelta, expected: bool
) -> None:
    assert failing_too_long(failing_since, NOW, disable_after) is expected


def test_the_public_strings() -> None:
    """Metrics labels and the API speak these; renaming one is a breaking change."""
    assert [o.value for o in AttemptOutcome] == [
        "success",
        "http_error",
        "timeout",
        "connection_error",
        "blocked",
    ]
    assert [r.value for r in GiveUpReason] == ["exhausted", "gone", "disabled", "expunged"]
