"""What an attempt's outcome means, for its delivery and for its endpoint: the one place
where it is decided.

For the delivery, a decision has exactly one of three forms: `Delivered`, `RetryAt` a time,
or `GivenUp` with why. For the endpoint, each decision either resets the failure clock (a
success) or starts it (any failure, unless already running), and a give-up may disable it:
at once when the receiver answered 410 (`gone`), or as `failing` when the clock says it has
had no success for `DISPATCHER_DISABLE_AFTER`. A failure that is not the endpoint's (the
egress proxy's: `charged=False`) follows the schedule but does neither; nor does a 429 or 503
with a valid `Retry-After`, the receiver asking for time (`paced`: a give-up on it disables
nothing; domain/flow_control.py).

Everything here is pure (time comes in as `now`, randomness as `rand`), so the rules are
unit-tested as tables, without a database. The engine asks `decide` right after an attempt
and hands the attempt with its decision, an `AttemptResult` (declared here, where the rules
that read it live), to the store, which executes the decisions of a batch in its record
transaction (`failure_clocks`, `endpoints_to_disable`, `failing_too_long`), reading each
endpoint's failure clock there, after the batch's own change: what the engine saw at claim
time may be stale, since other engines record attempts to the same endpoints meanwhile.

One rule is executed by the store alone, because only the database knows at that moment: a
`RetryAt` whose webhook was disabled or deleted (`GiveUpReason.DISABLED`), or whose event was
expunged (`GiveUpReason.EXPUNGED`), while the attempt was in flight is written as given up,
its `lastError` suffixed with why.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from operator import attrgetter
from typing import ClassVar, NamedTuple, TypeAlias

from dispatcher.domain.enums import DeliveryStatus, DisabledReason
from dispatcher.domain.retry import RetryPolicy, parse_retry_after


class AttemptOutcome(StrEnum):
    """How one attempt ended, as the sender saw it (these strings are public: metrics labels,
    and the attempt outcomes the API will show)."""

    SUCCESS = "success"  # a 2xx answer
    HTTP_ERROR = "http_error"  # any other answer (3xx included: redirects are not followed)
    TIMEOUT = "timeout"  # no complete answer in time
    CONNECTION_ERROR = "connection_error"  # anything else: DNS, connect, TLS, I/O, a bad URL
    BLOCKED = "blocked"  # the address guard refused every address (retried: DNS may change)


class GiveUpReason(StrEnum):
    """Why a delivery was given up (the `reason` of `delivery.given_up` and its metric)."""

    EXHAUSTED = "exhausted"  # the retry schedule ran out
    GONE = "gone"  # the receiver answered 410
    DISABLED = "disabled"  # its webhook was disabled or deleted while the attempt was in flight
    EXPUNGED = "expunged"  # its event was expunged while the attempt was in flight


class ClockEffect(StrEnum):
    """What an attempt does to its endpoint's failure clock (`webhooks.failing_since`)."""

    RESET = "reset"  # a success: the endpoint is not failing
    START = "start"  # a failure: failing since now, unless it already was
    # Not held against the endpoint: a failure that is not its own (the egress proxy's,
    # domain/proxy.py), or a 429 or 503 with a valid Retry-After (the receiver asked for time,
    # domain/flow_control.py). The clock stays as it is, and such a give-up disables nothing.
    KEEP = "keep"


@dataclass(frozen=True, slots=True)
class Delivered:
    """The receiver took it (2xx): done, never sent again."""

    at: datetime

    status: ClassVar[DeliveryStatus] = DeliveryStatus.DELIVERED
    failure_clock: ClassVar[ClockEffect] = ClockEffect.RESET
    disables: ClassVar[DisabledReason | None] = None


@dataclass(frozen=True, slots=True)
class RetryAt:
    """Failed; due again at `at` (still pending). Not `charged`: the failure was not the
    endpoint's (the egress proxy's); `paced`: the receiver asked for time (a 429 or 503 with
    Retry-After). Either way it does not count against the endpoint: its clock is left alone."""

    at: datetime
    charged: bool = True
    paced: bool = False

    status: ClassVar[DeliveryStatus] = DeliveryStatus.PENDING
    disables: ClassVar[DisabledReason | None] = None

    @property
    def failure_clock(self) -> ClockEffect:
        return ClockEffect.START if self.charged and not self.paced else ClockEffect.KEEP


@dataclass(frozen=True, slots=True)
class GivenUp:
    """Failed for good (`failed`, no next attempt); a manual retry may still send it once.
    Not `charged` (the last failure was the egress proxy's): the endpoint is not judged."""

    why: GiveUpReason
    charged: bool = True
    paced: bool = False  # the last answer asked for time (see RetryAt): never disables

    status: ClassVar[DeliveryStatus] = DeliveryStatus.FAILED

    @property
    def failure_clock(self) -> ClockEffect:
        return ClockEffect.START if self.charged and not self.paced else ClockEffect.KEEP

    @property
    def disables(self) -> DisabledReason | None:
        """`gone`: disable the endpoint now. `failing`: disable it if its failure clock has
        run for `disable_after` (see `failing_too_long`). Nothing when not `charged`, nor
        after a paced answer."""
        if not self.charged:
            return None
        if self.why is GiveUpReason.GONE:
            return DisabledReason.GONE
        if self.why is GiveUpReason.EXHAUSTED and not self.paced:
            return DisabledReason.FAILING
        return None


Decision: TypeAlias = Delivered | RetryAt | GivenUp

GONE_STATUS = 410
# Answers whose Retry-After is honoured (as a floor on the next delay).
RETRY_AFTER_STATUSES = frozenset({429, 503})
GONE_ERROR = "HTTP 410 (gone: webhook disabled)"

_GONE = GivenUp(GiveUpReason.GONE)
_EXHAUSTED = GivenUp(GiveUpReason.EXHAUSTED)
_EXHAUSTED_PACED = GivenUp(GiveUpReason.EXHAUSTED, paced=True)


def decide(
    outcome: AttemptOutcome,
    status: int | None,
    *,
    attempts_made: int,
    policy: RetryPolicy,
    now: datetime,
    retry_after: str | None = None,
    rand: Callable[[], float] = random.random,
    charged: bool = True,
) -> Decision:
    """The delivery's fate after its `attempts_made`-th attempt (counting this one).

    A success is delivered; a 410 gives up at once (whatever the attempt number); any other
    failure (an error status, a timeout, a connection error, a refused address) is retried
    on `policy`'s schedule, later if a 429 or 503 asked so with `Retry-After`, and given up
    once the schedule has run out. Not `charged` (the egress proxy failed, not the
    endpoint): the same schedule, but the decision leaves the endpoint's clock alone and
    disables nothing. A 429 or 503 with a valid `Retry-After` is `paced`: the receiver asked
    for time, which is not held against the endpoint either (domain/flow_control.py).
    """
    if outcome == AttemptOutcome.SUCCESS:
        return Delivered(now)
    if status == GONE_STATUS:
        return _GONE
    waited = parse_retry_after(retry_after, now) if status in RETRY_AFTER_STATUSES else None
    paced = waited is not None
    delay = policy.delay_after(attempts_made, waited, rand)
    if delay is None:
        if not charged:
            return GivenUp(GiveUpReason.EXHAUSTED, charged=False, paced=paced)
        return _EXHAUSTED_PACED if paced else _EXHAUSTED
    return RetryAt(now + timedelta(seconds=delay), charged=charged, paced=paced)


def last_error(decision: Decision, error: str | None) -> str | None:
    """What the delivery's `lastError` says after the attempt: nothing once delivered; the
    attempt's error otherwise, saying so when a 410 disabled the endpoint."""
    if type(decision) is Delivered:
        return None
    if type(decision) is GivenUp and decision.why is GiveUpReason.GONE:
        return GONE_ERROR
    return error


class AttemptResult(NamedTuple):
    """One attempt and what it was decided to mean (`decide`), as it is recorded: the engine
    makes it right after the attempt, the store writes a batch of them in one transaction
    (store/queue.py), and the endpoint rules below and the health rollups (domain/health.py)
    read it."""

    id: str  # the delivery's
    webhook_id: str
    attempts_before: int  # the delivery's attempts when claimed: fences off a late result
    response_status: int | None
    response_ms: int
    last_error: str | None  # as `last_error` words it
    finished_at: datetime
    decision: Decision
    started_at: datetime  # for the attempt log
    outcome: AttemptOutcome
    response_body: str | None  # the answer's first bytes (DISPATCHER_RESPONSE_EXCERPT_BYTES)
    in_lane: bool = False  # the claim's `in_lane`
    throttled: bool = False  # its endpoint's rate was adapted at the claim (flow_control.py)


class ClockChange(NamedTuple):
    """One endpoint's failure clock after a batch of attempts.

    `reset`: the batch had a success; the clock is then `failing_from` (None: not failing).
    Otherwise the clock starts at `failing_from` unless it is already running.
    """

    reset: bool
    failing_from: datetime | None  # the first failure after the batch's last success


_RESET = ClockChange(True, None)


def failure_clocks(attempts: Iterable[AttemptResult]) -> dict[str, ClockChange]:
    """Per endpoint, what a batch of recorded attempts does to its failure clock, taken in
    the order they finished: a success resets it; failures after the last success start it
    from the first of them."""
    changes: dict[str, ClockChange] = {}
    for attempt in sorted(attempts, key=attrgetter("finished_at")):
        effect = attempt.decision.failure_clock
        if effect is ClockEffect.KEEP:
            continue  # not held against the endpoint (the proxy's failure, or a paced answer)
        if effect is ClockEffect.RESET:
            changes[attempt.webhook_id] = _RESET
            continue
        change = changes.get(attempt.webhook_id)
        if change is None:
            changes[attempt.webhook_id] = ClockChange(False, attempt.finished_at)
        elif change.failing_from is None:
            changes[attempt.webhook_id] = ClockChange(change.reset, attempt.finished_at)
    return changes


class ToDisable(NamedTuple):
    """Endpoints a batch of recorded attempts may disable, each list sorted and distinct."""

    gone: list[str]  # answered 410: disable now
    maybe_failing: list[str]  # a delivery exhausted its schedule: disable if failing too long


def endpoints_to_disable(attempts: Iterable[AttemptResult]) -> ToDisable:
    """Which endpoints the batch's give-ups may disable (an endpoint gone is not also judged
    as failing: it is disabled already)."""
    gone: set[str] = set()
    exhausted: set[str] = set()
    for attempt in attempts:
        reason = attempt.decision.disables
        if reason is DisabledReason.GONE:
            gone.add(attempt.webhook_id)
        elif reason is DisabledReason.FAILING:
            exhausted.add(attempt.webhook_id)
    return ToDisable(sorted(gone), sorted(exhausted - gone))


def failing_too_long(
    failing_since: datetime | None, now: datetime, disable_after: timedelta
) -> bool:
    """Whether an endpoint whose failure clock reads `failing_since` (as updated with the
    batch) has gone `disable_after` without a success: then a give-up disables it."""
    return failing_since is not None and failing_since <= now - disable_after
