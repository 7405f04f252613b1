"""Endpoint health: the figures `GET /v1/webhooks/{id}/stats` answers, and the rollups they are
read from.

Reading a week of attempts one by one would cost a scan of a million rows for a busy endpoint,
so the recorder keeps running totals instead (schema.sql: `webhook_stats_minutes`,
`webhook_stats_hours`): per endpoint and minute (and hour), how many attempts started then
with each outcome, a histogram of the response times of those that got an answer, and how
many deliveries created then an attempt settled. This module is the pure part of that: the
histogram's fixed buckets and the percentiles read from it, the tallies a batch adds, and the
rows a window reads. Everything is pure (no I/O, time comes in as `now`), so it is unit-tested
as tables.

Precision, as the API documents it:
- A window counts whole minutes: from the start of the minute `window` before now, so it
  covers at least the whole window and at most one minute more.
- Percentiles are read from the histogram: exact below 10 ms, otherwise within 10% (within 6%
  from 20 ms: buckets grow by 10% and a bucket is reported as its middle).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from dispatcher.domain.enums import DeliveryStatus
from dispatcher.domain.outcomes import AttemptOutcome, AttemptResult


class StatsWindow(StrEnum):
    """How far back the figures look (`window`); the API's default is a day."""

    HOUR = "1h"
    DAY = "24h"
    WEEK = "7d"

    @property
    def duration(self) -> timedelta:
        return _DURATIONS[self]


_DURATIONS = {
    StatsWindow.HOUR: timedelta(hours=1),
    StatsWindow.DAY: timedelta(days=1),
    StatsWindow.WEEK: timedelta(days=7),
}

# How long minute rows are worth keeping: the longest window, and the minute rows its start
# reads. Hour rows stay as long as what they count (retention): they tell the latest success
# and failure of any time.
MINUTES_KEPT = timedelta(days=8)


class Cutoffs(NamedTuple):
    """Rollup rows before these are deleted (by the maintenance loop)."""

    minutes: datetime
    hours: datetime


def rollup_cutoffs(now: datetime, retention_days: int) -> Cutoffs:
    """Hour rows leave with the days retention drops (DISPATCHER_RETENTION_DAYS: the counts
    leave with what they count); minute rows too, or after MINUTES_KEPT when that is sooner."""
    day = (now.astimezone(UTC) - timedelta(days=retention_days)).date()
    expired = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return Cutoffs(max(expired, now - MINUTES_KEPT), expired)


# -- the response-time histogram -------------------------------------------------------------
#
# Bucket i counts answers of LOWER_BOUNDS[i] ms up to the next bound (exclusive). One bucket per
# millisecond below EXACT_BELOW, then bounds growing by GROWTH (rounded up to whole ms) up to
# TOP_MS; the last bucket takes everything above (the request timeout is at most 30 s). The
# layout is stored with the data (int[] columns of exactly BUCKETS counts): never change it
# without a migration that converts the stored rows.
EXACT_BELOW = 10
GROWTH = 1.1
TOP_MS = 60_000


def _lower_bounds() -> tuple[int, ...]:
    bounds = list(range(EXACT_BELOW))
    step = 0
    while bounds[-1] < TOP_MS:
        # (less a hair: 10 * 1.1 is 11.000000000000002 in binary floating point)
        bound = math.ceil(EXACT_BELOW * GROWTH**step - 1e-9)
        if bound > bounds[-1]:
            bounds.append(bound)
        step += 1
    return tuple(bounds)


LOWER_BOUNDS = _lower_bounds()
BUCKETS = len(LOWER_BOUNDS)


def bucket_of(ms: int) -> int:
    """The bucket a response time falls in (a negative time counts as 0 ms)."""
    return max(bisect_right(LOWER_BOUNDS, ms) - 1, 0)


def bucket_value(bucket: int) -> int:
    """The time a bucket stands for: its one value below EXACT_BELOW, else its middle (the
    last, open-ended bucket: its lower bound)."""
    low = LOWER_BOUNDS[bucket]
    if bucket + 1 >= BUCKETS or low < EXACT_BELOW:
        return low
    high = LOWER_BOUNDS[bucket + 1] - 1
    return (low + high + 1) // 2


def add_histograms(histograms: Iterable[Sequence[int] | None]) -> list[int]:
    """Bucket by bucket sums (None: a row without answers)."""
    rows = [histogram for histogram in histograms if histogram is not None]
    if not rows:
        return [0] * BUCKETS
    return [sum(bucket) for bucket in zip(*rows, strict=True)]


def percentile(histogram: Sequence[int], percent: int) -> int | None:
    """The nearest-rank `percent`th percentile (1..100) of the times counted, as its bucket's
    value; None when nothing was counted. Integer arithmetic: 95% of 100 is rank 95, not 96."""
    answered = sum(histogram)
    if answered == 0:
        return None
    rank = max(-(-percent * answered // 100), 1)
    seen = 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= rank:
            return bucket_value(index)
    raise AssertionError("unreachable: the ranks add up to the total")  # pragma: no cover


# -- tallies: what a batch of recorded attempts adds -----------------------------------------


class SettledDelivery(NamedTuple):
    """A delivery an attempt settled, as the rollups count it."""

    webhook_id: str
    created_at: datetime
    status: str  # DeliveryStatus: delivered or failed


OUTCOMES = tuple(AttemptOutcome)  # the order of a tally's counts
_OUTCOME_INDEX = {outcome: index for index, outcome in enumerate(OUTCOMES)}
_SUCCESS = _OUTCOME_INDEX[AttemptOutcome.SUCCESS]


@dataclass(slots=True)
class Tally:
    """One endpoint's minute (or hour): the attempts that started then, by outcome (`counts`,
    in OUTCOMES order), the response times of those answered and the start of the latest
    success and failure; and the deliveries created then that an attempt settled, by status.
    (Lists and slots: the recorder tallies every batch.)"""

    counts: list[int] = field(default_factory=lambda: [0] * len(OUTCOMES))
    histogram: list[int] | None = None  # None: no attempt got an answer
    last_success_at: datetime | None = None
    last_failure_at: datetime | None = None
    delivered: int = 0
    failed: int = 0

    @property
    def outcomes(self) -> dict[AttemptOutcome, int]:
        return dict(zip(OUTCOMES, self.counts, strict=True))

    def add(self, attempt: AttemptResult) -> None:
        index = _OUTCOME_INDEX[attempt.outcome]
        self.counts[index] += 1
        if attempt.response_status is not None:
            if self.histogram is None:
                self.histogram = [0] * BUCKETS
            self.histogram[bucket_of(attempt.response_ms)] += 1
        started = attempt.started_at
        if index == _SUCCESS:
            if self.last_success_at is None or started > self.last_success_at:
                self.last_success_at = started
        elif self.last_failure_at is None or started > self.last_failure_at:
            self.last_failure_at = started

    def settle(self, delivery: SettledDelivery) -> None:
        if delivery.status == DeliveryStatus.DELIVERED:
            self.delivered += 1
        elif delivery.status == DeliveryStatus.FAILED:
            self.failed += 1

    def copy(self) -> Tally:
        histogram = None if self.histogram is None else list(self.histogram)
        return Tally(list(self.counts), histogram, self.last_success_at, self.last_failure_at,
                     self.delivered, self.failed)  # fmt: skip

    def merge(self, other: Tally) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        if other.histogram is not None:
            if self.histogram is None:
                self.histogram = list(other.histogram)
            else:
                self.histogram = [
                    a + b for a, b in zip(self.histogram, other.histogram, strict=True)
                ]
        self.last_success_at = _latest(self.last_success_at, other.last_success_at)
        self.last_failure_at = _latest(self.last_failure_at, other.last_failure_at)
        self.delivered += other.delivered
        self.failed += other.failed


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or (b is not None and b > a):
        return b
    return a


TallyKey = tuple[str, datetime]  # (webhook id, start of the minute or hour, UTC)


class Rollup(NamedTuple):
    """A batch's tallies, per endpoint and minute and per endpoint and hour, each sorted by
    key (the order the store writes them in, so that concurrent writers never deadlock)."""

    minutes: list[tuple[TallyKey, Tally]]
    hours: list[tuple[TallyKey, Tally]]


def floor_minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def rollup(attempts: Iterable[AttemptResult], settled: Iterable[SettledDelivery] = ()) -> Rollup:
    """What a batch adds to the rollups: each attempt in the minute it started, each delivery
    it settled in the minute the delivery was created; the minutes summed into their hours.
    (Plain loops: this runs on the engine's event loop for every batch it records.)"""
    minutes: defaultdict[tuple[str, int], Tally] = defaultdict(Tally)  # made on first use
    for attempt in attempts:
        minutes[attempt.webhook_id, _minute(attempt.started_at)].add(attempt)
    for delivery in settled:
        minutes[delivery.webhook_id, _minute(delivery.created_at)].settle(delivery)
    hours: dict[tuple[str, int], Tally] = {}
    shared: set[tuple[str, int]] = set()  # hours that are still their one minute's tally
    for (webhook_id, minute), counted in minutes.items():
        key = (webhook_id, minute // 60)
        hour = hours.get(key)
        if hour is None:
            hours[key] = counted
            shared.add(key)
        else:
            if key in shared:
                hour = hours[key] = hour.copy()
                shared.discard(key)
            hour.merge(counted)
    return Rollup(_by_key(minutes, 60), _by_key(hours, 3600))


def _minute(moment: datetime) -> int:
    """The minute a moment falls in, counted from the epoch (the key a batch tallies by)."""
    return int(moment.timestamp() // 60)


def _by_key(tallies: dict[tuple[str, int], Tally], seconds: int) -> list[tuple[TallyKey, Tally]]:
    return [
        ((webhook_id, datetime.fromtimestamp(start * seconds, UTC)), tally)
        for (webhook_id, start), tally in sorted(tallies.items())
    ]


# -- reading a window ------------------------------------------------------------------------


class WindowRows(NamedTuple):
    """Which rollup rows a window reads: minute rows from `since` up to `hours_from` and from
    `hours_until` on, hour rows in between (so a week reads about 170 hour rows and at most
    two hours of minute rows, not ten thousand minute rows)."""

    since: datetime  # the window's start: a minute boundary
    hours_from: datetime
    hours_until: datetime  # == hours_from: no hour rows


def window_rows(now: datetime, window: StatsWindow) -> WindowRows:
    since = floor_minute(now - window.duration)
    first_hour = floor_hour(since)
    if first_hour < since:
        first_hour += timedelta(hours=1)
    current_hour = floor_hour(now)
    if first_hour >= current_hour:
        return WindowRows(since, current_hour, current_hour)
    return WindowRows(since, first_hour, current_hour)


@dataclass(frozen=True)
class EndpointHealth:
    """One endpoint's figures over a window, as read from the store."""

    window: StatsWindow
    deliveries: Mapping[str, int]  # DeliveryStatus value -> deliveries created in the window
    attempts: Mapping[AttemptOutcome, int]  # attempts started in the window
    histogram: Sequence[int]  # response times of the window's answered attempts
    last_success_at: datetime | None
    last_failure_at: datetime | None
    failing_since: datetime | None
    # Requests a second it gets now: its rate as the receiver's 429s adapted it, else its
    # rateLimit; None: unrestricted (domain/flow_control.py).
    effective_rate: float | None = None

    @property
    def success_rate(self) -> float | None:
        total = sum(self.attempts.values())
        if total == 0:
            return None
        return self.attempts[AttemptOutcome.SUCCESS] / total

    def response_ms(self, percent: int) -> int | None:
        return percentile(self.histogram, percent)


# -- attempts per minute ---------------------------------------------------------------------

MINUTES_SHOWN = 60  # GET /v1/webhooks/{id}/stats/minutes: the last hour, minute by minute


def recent_minutes(now: datetime, count: int = MINUTES_SHOWN) -> list[datetime]:
    """The starts of the last `count` minutes, oldest first, the current (partial) one last."""
    current = floor_minute(now)
    return [current - timedelta(minutes=back) for back in range(count - 1, -1, -1)]


def per_minute(
    minutes: Sequence[datetime], counted: Mapping[datetime, Mapping[AttemptOutcome, int]]
) -> list[tuple[datetime, dict[AttemptOutcome, int]]]:
    """Each of `minutes` with its attempts by outcome; a minute without any counts 0 of each
    (the rollups keep no row for it)."""
    none = dict.fromkeys(OUTCOMES, 0)
    return [(minute, {**none, **counted.get(minute, {})}) for minute in minutes]
